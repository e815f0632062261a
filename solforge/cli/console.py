"""The console every command prints to: wide enough for its tables when output is piped
(rich falls back to 80 columns without a terminal, which folds every table); and the one
way commands report a problem file that failed to load."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape


def make_console() -> Console:
    if sys.stdout.isatty():
        return Console()
    return Console(width=int(os.environ.get("COLUMNS") or 160))


def _described(path: Path, error: str) -> str:
    # the loader's errors already start with the file's (resolved) path: not repeated
    named = error.startswith((str(path), str(Path(path).resolve())))
    return ("" if named else f"{path}: ") + error


def broken_text(path: Path, error: str) -> str:
    """What to say of a problem file that failed to load, as plain text."""
    return "failed to load " + _described(path, error)


def broken_line(path: Path, error: str) -> str:
    """:func:`broken_text` as console markup."""
    return "[red]failed to load[/red] " + escape(_described(path, error))


def fmt(x: float | None, unit: str = "", digits: int = 3) -> str:
    """A figure as every table prints it: ``digits`` significant digits and its unit, or
    ``-`` when it was not measured."""
    return "-" if x is None else f"{x:.{digits}g}{unit}"

