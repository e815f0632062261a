"""The console every command prints to: wide enough for its tables when output is piped
(rich falls back to 80 columns without a terminal, which folds every table)."""

from __future__ import annotations

import os
import sys

from rich.console import Console


def make_console() -> Console:
    if sys.stdout.isatty():
        return Console()
    return Console(width=int(os.environ.get("COLUMNS") or 160))
