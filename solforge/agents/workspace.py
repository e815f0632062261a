"""The agent's workspace: a directory and the file tools that act inside it.

It holds ``problem.py`` (the reference with visible workloads only, see ``visible.py``)
and whatever the agent writes; ``solution.py`` is the default answer file. Every path an
agent names is resolved (symbolic links followed) and must stay inside the workspace.
Each method returns the text the model reads, or raises
:class:`~solforge.agents.errors.ToolError` with what to do instead.

Not covered: containment of what ``run_command`` does to these files (see ``shell.py``);
binary files (reads decode UTF-8 with replacement).
"""

from __future__ import annotations

import re
from pathlib import Path

from solforge.agents.errors import ToolError

PROBLEM_FILE = "problem.py"
SOLUTION_FILE = "solution.py"


class Workspace:
    """File tools confined to ``root``."""

    def __init__(self, root: Path, max_read_chars: int = 60000,
                 max_write_bytes: int = 1_000_000) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_read_chars = max_read_chars
        self.max_write_bytes = max_write_bytes

    def resolve(self, path: str | None, default: str = SOLUTION_FILE) -> Path:
        """``path`` inside the workspace (relative to it, or absolute within it)."""
        name = (path or "").strip() or default
        p = Path(name)
        p = (p if p.is_absolute() else self.root / p).resolve()
        if p != self.root and self.root not in p.parents:
            raise ToolError(f"{name}: outside the workspace; use paths relative to it "
                            f"(e.g. {SOLUTION_FILE})")
        return p

    def rel(self, p: Path) -> str:
        return str(p.relative_to(self.root)) if p != self.root else "."

    def _existing(self, path: str | None) -> Path:
        p = self.resolve(path)
        if not p.is_file():
            listing = ", ".join(sorted(self.rel(x) for x in self.root.glob("*.py"))) or "none"
            raise ToolError(f"{self.rel(p)}: no such file (Python files here: {listing})")
        return p

    def read_file(self, path: str | None = None) -> str:
        p = self._existing(path)
        text = p.read_text(errors="replace")
        if len(text) > self.max_read_chars:
            return (text[: self.max_read_chars] + f"\n[truncated: {self.rel(p)} has "
                    f"{len(text)} characters; use grep, or run_command with sed -n to read "
                    "the rest]")
        return text

    def write_file(self, path: str | None = None, content: str = "") -> str:
        p = self.resolve(path)
        data = content.encode()
        if len(data) > self.max_write_bytes:
            raise ToolError(f"{len(data)} bytes is over the {self.max_write_bytes}-byte "
                            "limit of one file")
        if p.is_dir():
            raise ToolError(f"{self.rel(p)} is a directory")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        return f"wrote {len(data)} bytes to {self.rel(p)}"

    def edit_file(self, path: str | None = None, old: str = "", new: str = "") -> str:
        p = self._existing(path)
        text = p.read_text(errors="replace")
        if not old:
            raise ToolError("old is empty: give the exact text to replace (use write_file to "
                            "write a whole file)")
        count = text.count(old)
        if count == 0:
            raise ToolError(f"old text not found in {self.rel(p)}: read_file it and copy the "
                            "text exactly, whitespace included")
        if count > 1:
            raise ToolError(f"old text occurs {count} times in {self.rel(p)}: include more "
                            "surrounding lines so it occurs once")
        p.write_text(text.replace(old, new, 1))
        start = text.index(old)
        line = text.count("\n", 0, start) + 1
        return f"edited {self.rel(p)} at line {line} ({len(old)} -> {len(new)} characters)"

    def list_files(self, pattern: str | None = None, limit: int = 200) -> str:
        pat = (pattern or "").strip() or "*"
        if Path(pat).is_absolute() or ".." in Path(pat).parts:
            raise ToolError("the pattern is relative to the workspace (e.g. '*.py', '**/*')")
        found = [p for p in sorted(self.root.glob(pat))
                 if "__pycache__" not in p.parts and p.resolve().is_relative_to(self.root)]
        if not found:
            return f"no files match {pat!r}"
        lines = [f"{self.rel(p)}/" if p.is_dir() else f"{self.rel(p)}  ({p.stat().st_size} "
                 "bytes)" for p in found[:limit]]
        if len(found) > limit:
            lines.append(f"... {len(found) - limit} more")
        return "\n".join(lines)

    def grep(self, pattern: str, path: str | None = None, limit: int = 100) -> str:
        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise ToolError(f"bad regular expression {pattern!r}: {e}") from None
        base = self.resolve(path, default=".")
        files = [base] if base.is_file() else sorted(
            f for f in base.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
        hits: list[str] = []
        for f in files:
            if f.stat().st_size > 2_000_000:
                continue
            try:
                lines = f.read_text().splitlines()
            except (UnicodeDecodeError, OSError):
                continue
            for i, line in enumerate(lines, 1):
                if rx.search(line):
                    hits.append(f"{self.rel(f)}:{i}: {line[:300]}")
                    if len(hits) >= limit:
                        return "\n".join(hits) + f"\n[stopped at {limit} matches]"
        return "\n".join(hits) if hits else f"no match for {pattern!r}"
