"""solforge: autonomous, verifiable GPU kernel optimization."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `solforge.apply(model, RUN_OR_EXPORT)` without `import solforge` importing torch
    if name == "apply":
        from solforge.models.apply import apply

        return apply
    raise AttributeError(f"module 'solforge' has no attribute {name!r}")
