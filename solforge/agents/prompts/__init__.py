"""The prompts every agent receives: the protocol (``SKILL.md``) and a role.

Both are package data read with :mod:`importlib.resources`, and both are replaceable by a
user's file (``--protocol FILE``, ``--role-file FILE``). The system prompt is the protocol
followed by the role; the facts of one problem (its name, device, allowed languages,
workloads, budgets) travel in the first user message, built by :func:`task_message`, so a
user's protocol needs no template syntax.

Not covered: per-model prompt variants, few-shot examples.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

from solforge.problems.spec import Problem

ROLES = ("optimizer", "diagnoser", "reviewer")


def _packaged(name: str) -> str:
    return files(__name__).joinpath(name).read_text(encoding="utf-8")


def protocol_text(path: str | Path | None = None) -> str:
    """The protocol: ``path`` if given, else the packaged ``SKILL.md``."""
    if path is None:
        return _packaged("SKILL.md")
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"--protocol {p}: no such file (give a markdown file, or "
                                "leave it out to use solforge's SKILL.md)")
    return p.read_text(encoding="utf-8")


def role_text(role: str = "optimizer", path: str | Path | None = None) -> str:
    """A role prompt: ``path`` if given, else the packaged ``<role>.md``."""
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"--role-file {p}: no such file")
        return p.read_text(encoding="utf-8")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; use one of {', '.join(ROLES)} or give "
                         "--role-file")
    return _packaged(f"{role}.md")


def system_prompt(protocol: str | Path | None = None, role: str = "optimizer",
                  role_file: str | Path | None = None) -> str:
    return protocol_text(protocol).rstrip() + "\n\n" + role_text(role, role_file).rstrip() + "\n"


def task_message(problem: Problem, device: str, languages: list[str] | None, policy: str,
                 budgets: dict[str, Any], has_solution: bool = False) -> str:
    """The first user message: the facts of this problem and this run."""
    prec = problem.precision
    visible = problem.visible_workloads()
    held = len(problem.workloads) - len(visible)
    lines = [
        f"Problem: {problem.name} ({problem.category}"
        + (f", from {', '.join(problem.models)}" if problem.models else "") + ")",
    ]
    if problem.description:
        lines.append(problem.description.strip())
    lines += [
        f"Device: {device}" + (" (CPU: Triton runs under its interpreter; CUDA languages "
                              "cannot run here)" if device == "cpu" else ""),
        "Languages allowed: " + (", ".join(languages) if languages
                                 else "any of pytorch, triton, cuda_cpp, cute_dsl"),
        f"Policy: {policy}",
        (f"Tolerance ({prec.name}): atol={prec.atol:g} rtol={prec.rtol:g}, at least "
         f"{prec.matched_ratio:g} of elements within it"),
        "Visible workloads: " + "; ".join(f"{w.name} {w.params_json()}" for w in visible),
        f"Held-out workloads: {held} (other shapes; they count in the verdict)",
        "Budgets: " + ", ".join(f"{k} {v}" for k, v in budgets.items() if v),
        "",
        "The workspace holds problem.py" + (" and solution.py (the candidate to start from)"
                                            if has_solution else "") + ". "
        + ("Start by reading both." if has_solution else
           "Start by reading it, then write solution.py."),
    ]
    return "\n".join(lines)
