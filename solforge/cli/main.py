"""The ``solforge`` command. Each command group lives in its own module and only wires
components together; the logic is in the packages it calls."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="solforge",
    help="Autonomous, verifiable GPU kernel optimization: problems, evaluator, agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Imported here so `solforge --help` stays fast and one broken group cannot hide the rest.
    from solforge.cli import bench, problems

    app.add_typer(problems.app, name="problems")
    bench.register(app)
    for name in ("calibrate", "optimize", "runs", "rl", "imports", "report", "ci", "models",
                 "synth"):
        try:
            module = __import__(f"solforge.cli.{name}", fromlist=["register"])
        except ModuleNotFoundError as e:
            if e.name != f"solforge.cli.{name}":
                raise
            continue
        module.register(app)


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
