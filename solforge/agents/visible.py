"""The workspace's ``problem.py``: the problem file with its held-out workloads removed.

An agent sees the reference and its visible workloads only, so it cannot tune for the
shapes the verdict keeps back. The file is the problem's own source, edited at the AST
node positions of ``SOLFORGE["workloads"]``: each held-out entry is cut out, with the
lines it occupies when it has them to itself (its own trailing comment goes too: it may
name the shape), else with just its comma; everything else (comments, formatting, the
other entries) stays as it was. When the workloads are not a literal list (a
comprehension, a variable), the whole value is replaced by a literal list of the visible
workloads rendered from the loaded problem. The result is loaded back and its workload
names checked against the problem's visible ones before it is used.

Not covered: hiding held-out shapes written elsewhere in the file (a docstring that lists
them, a helper that builds them), and the original file itself: an agent's ``run_command``
can read the installed corpus. The held-out workloads still decide the verdict either way.
"""

from __future__ import annotations

import ast
from pathlib import Path

from solforge.problems.loader import load_problem
from solforge.problems.spec import Problem, ProblemError


def _offsets(src: bytes) -> list[int]:
    """Byte offset of the start of each line (1-based line numbers index it)."""
    starts = [0, 0]
    for i, b in enumerate(src):
        if b == 0x0A:
            starts.append(i + 1)
    return starts


def _workloads_node(tree: ast.Module) -> ast.expr | None:
    """The value node of the ``"workloads"`` key of the module-level ``SOLFORGE`` dict."""
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        if not any(isinstance(t, ast.Name) and t.id == "SOLFORGE" for t in targets):
            continue
        if isinstance(node.value, ast.Dict):
            for k, v in zip(node.value.keys, node.value.values):
                if isinstance(k, ast.Constant) and k.value == "workloads":
                    return v
    return None


def _held_out(entry: ast.expr) -> bool | None:
    """True/False for a literal workload dict whose ``visible`` is literal; None: unknown."""
    if not isinstance(entry, ast.Dict):
        return None
    for k, v in zip(entry.keys, entry.values):
        if isinstance(k, ast.Constant) and k.value == "visible":
            return v.value is False if isinstance(v, ast.Constant) else None
    return False


def _cut_entries(src: bytes, node: ast.List) -> bytes | None:
    """``src`` without the held-out entries of the list ``node``; None if undecidable."""
    verdicts = [_held_out(e) for e in node.elts]
    if any(v is None for v in verdicts):
        return None
    line = _offsets(src)

    def pos(lineno: int, col: int) -> int:
        return line[lineno] + col

    cuts: list[tuple[int, int]] = []
    for entry, held in zip(node.elts, verdicts):
        if not held:
            continue
        start = pos(entry.lineno, entry.col_offset)
        end = pos(entry.end_lineno, entry.end_col_offset)
        before = src[line[entry.lineno]:start]
        line_end = src.find(b"\n", end)
        line_end = len(src) if line_end < 0 else line_end
        after = src[end:line_end].strip()
        if before.strip() == b"" and (after in (b"", b",") or after.lstrip(b",").lstrip()
                                      .startswith(b"#")):
            # the entry has its lines to itself: remove them whole (its comment with it)
            cuts.append((line[entry.lineno], min(line_end + 1, len(src))))
        else:
            # shares its line with other entries: cut the entry and its comma only, so
            # every comment stays where it was
            stop = end
            while stop < len(src) and src[stop:stop + 1] in (b" ", b"\t"):
                stop += 1
            if src[stop:stop + 1] == b",":
                stop += 1
                while stop < len(src) and src[stop:stop + 1] in (b" ", b"\t"):
                    stop += 1
            else:
                stop = end
            cuts.append((start, stop))
    out = src
    for a, b in sorted(cuts, reverse=True):
        out = out[:a] + out[b:]
    return out


def _render(problem: Problem) -> str:
    """The visible workloads as a Python list literal (params through ``repr``)."""
    items = []
    for w in problem.visible_workloads():
        fields = {"name": w.name, "params": w.params}
        if w.cpu:
            fields["cpu"] = True
        for k in ("flops", "bytes"):
            if getattr(w, k) is not None:
                fields[k] = getattr(w, k)
        body = ", ".join(f"{k!r}: {v!r}" for k, v in fields.items())
        items.append(f"        {{{body}}},")
    return "[\n" + "\n".join(items) + "\n    ]"


def visible_source(problem: Problem) -> str:
    """The text of ``problem``'s file with its held-out workloads removed."""
    src = problem.path.read_bytes()
    if all(w.visible for w in problem.workloads):
        return src.decode()
    tree = ast.parse(src)
    node = _workloads_node(tree)
    if node is None:
        raise ProblemError(f"{problem.path}: held-out workloads, but no literal SOLFORGE dict "
                           "with a 'workloads' key to remove them from; write SOLFORGE as a "
                           "dict literal")
    edited = _cut_entries(src, node) if isinstance(node, ast.List) else None
    if edited is None:
        line = _offsets(src)
        a = line[node.lineno] + node.col_offset
        b = line[node.end_lineno] + node.end_col_offset
        edited = src[:a] + _render(problem).encode() + src[b:]
    return edited.decode()


def write_visible_problem(problem: Problem, dest: Path) -> Path:
    """Write the agent's ``problem.py`` to ``dest`` and check it keeps exactly the visible
    workloads; :class:`ProblemError` (naming the problem file) when it cannot."""
    dest = Path(dest)
    dest.write_text(visible_source(problem))
    try:
        seen = load_problem(dest)
    except ProblemError as e:
        raise ProblemError(f"{problem.path}: the agent's copy without held-out workloads "
                           f"does not load ({e}); simplify SOLFORGE['workloads']") from None
    want = [w.name for w in problem.visible_workloads()]
    got = [w.name for w in seen.workloads]
    if got != want:
        raise ProblemError(f"{problem.path}: the agent's copy has workloads {got}, expected "
                           f"the visible ones {want}; simplify SOLFORGE['workloads']")
    return dest
