"""The solution inside a model's completion: the source a trainer's text stands for.

A completion is either a bare Python file or prose with fenced code blocks. The solution
is the last fenced block that defines ``class ModelNew`` (models often show a draft, then
the final version); failing that, the whole text when it parses as Python and defines
``ModelNew``. Anything else has no solution: its reward is a failure, said as such
(``NO_SOLUTION``), without running anything.

Not covered: multi-file answers, tool-call transcripts (use :class:`~solforge.rl.env.
KernelEnv` for those), completions cut off by the token limit inside a block (an unclosed
fence counts as a block to the end of the text, and usually fails to build).
"""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:\n```|\Z)", re.DOTALL)
_MODELNEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)


def extract_solution(text: str) -> str | None:
    """The solution source in ``text``, or None (see the module docstring)."""
    if not isinstance(text, str) or not text.strip():
        return None
    blocks = [body for lang, body in _FENCE.findall(text)
              if lang.lower() in ("", "python", "py", "python3") and _MODELNEW.search(body)]
    if blocks:
        return blocks[-1].strip("\n") + "\n"
    if "```" not in text and _MODELNEW.search(text):
        try:
            ast.parse(text)
        except SyntaxError:
            return None
        return text if text.endswith("\n") else text + "\n"
    return None
