"""Registries of named implementations as ``name -> "module:attr"`` tables.

A registry is a plain ``dict`` whose values are either an import path (``"module:attr"``,
resolved with :mod:`importlib` the first time the name is asked for, then kept) or the
object itself (what a plug-in registered at run time). The built-ins are rows of the
table written where the registry lives, so the module that owns the registry never
imports the modules that implement it: no import cycle, and an implementation whose
dependencies are missing costs only its own name.

:func:`resolve` and :func:`lookup` raise :class:`RegistryError` naming what to fix: the
unknown name and the known ones, or the import path whose module failed to import and why.

Not covered: discovering plug-ins (each registry keeps its own door: a ``register_*``
function, and where it has one, an entry-point group read by its owner).
"""

from __future__ import annotations

import importlib
from typing import Any


class RegistryError(ValueError):
    """A registered name that is unknown, or whose import path does not resolve."""


def resolve(path: str, what: str = "entry") -> Any:
    """The object at ``"module:attr"`` (``attr`` may be dotted)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise RegistryError(f"{what}: {path!r} is not an import path; write it as "
                            "'package.module:attribute'")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:
        raise RegistryError(f"{what}: {path} could not be loaded: importing {module_name} "
                            f"failed ({type(e).__name__}: {e}); fix that module or install "
                            "what it needs") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RegistryError(f"{what}: {path} could not be loaded: {module_name} has no "
                                f"attribute {attr!r}; fix the import path") from None
    return obj


def lookup(table: dict[str, Any], name: str, what: str) -> Any:
    """The object registered as ``name`` in ``table``, its import path resolved (and the
    resolved object kept in the table)."""
    if name not in table:
        raise RegistryError(f"unknown {what} {name!r}; use one of: {', '.join(table)}")
    entry = table[name]
    if isinstance(entry, str):
        entry = table[name] = resolve(entry, f"{what} {name!r}")
    return entry


def lazy_face(package: str, face: dict[str, str], namespace: dict[str, Any]
              ) -> tuple[Any, Any]:
    """A package face (PEP 562): the ``__getattr__`` and ``__dir__`` of ``package`` whose
    public names ``face`` maps to the modules defining them, each imported on first use
    and then kept in ``namespace`` (the package's ``globals()``). Not covered: names a
    module defines under another name (the face's name is the attribute looked up)."""

    def __getattr__(name: str) -> Any:
        module = face.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *face])

    return __getattr__, __dir__
