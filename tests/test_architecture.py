"""The tree's layers, read from the imports (docs/ARCHITECTURE.md draws the same picture).

Every import counts: module level, inside a function, under ``if TYPE_CHECKING:``. A layer
imports only layers below it; peers of one layer do not import each other; no two modules
import each other in a circle. Module paths named in strings (registries, ``-m`` entry
points) are not imports and are not read here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "solforge"

# top to bottom; a row's groups are peers
PACKAGE_LAYERS = [
    ["cli"],
    ["rl", "synth"],
    ["search", "agents", "report", "gate", "models"],
    ["orchestrate"],
    ["bench"],
    ["sol", "kernels"],
    ["problems", "records", "env", "registry"],
]
BENCH_LAYERS = [
    ["suite"],
    ["evaluator"],
    ["judge"],
    ["runner", "baselines"],
    ["policy", "measure"],
]


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = ["solforge", *p.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _edges() -> dict[str, set[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name and t.startswith("solforge"):
                    edges[name].add(t)
    return edges


def _layer_of(parts: list[str], layers: list[list[str]]) -> int | None:
    for i, row in enumerate(layers):
        if parts and parts[0] in row:
            return i
    return None


def _violations(edges: dict[str, set[str]], depth: int, prefix: str,
                layers: list[list[str]]) -> list[str]:
    bad = []
    for a, targets in edges.items():
        if not a.startswith(prefix + "."):
            continue
        pa = a[len(prefix) + 1:].split(".")
        for b in targets:
            if not b.startswith(prefix + ".") or b == prefix:
                if b == prefix and prefix != "solforge":
                    bad.append(f"{a} imports its own package face {b}")
                continue
            pb = b[len(prefix) + 1:].split(".")
            if pa[0] == pb[0]:
                continue
            la, lb = _layer_of(pa, layers), _layer_of(pb, layers)
            if la is None or lb is None:
                bad.append(f"{a} -> {b}: not placed in a layer")
            elif lb <= la:
                bad.append(f"{a} -> {b}: {'a peer' if la == lb else 'upward'}")
    return sorted(bad)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def _rooms(folder: Path) -> set[str]:
    return {p.name if p.is_dir() else p.stem for p in folder.iterdir()
            if (p.is_dir() and any(p.rglob("*.py"))) or
            (p.suffix == ".py" and p.stem != "__init__")}


def test_every_package_is_in_a_layer():
    assert _rooms(ROOT) == {g for row in PACKAGE_LAYERS for g in row}
    assert _rooms(ROOT / "bench") == {g for row in BENCH_LAYERS for g in row}


def test_packages_import_only_downward():
    assert _violations(_edges(), 1, "solforge", PACKAGE_LAYERS) == []


def test_bench_imports_only_downward():
    assert _violations(_edges(), 2, "solforge.bench", BENCH_LAYERS) == []


def test_no_import_circle():
    assert _cycles(_edges()) == []


def test_the_checker_sees_an_upward_import_and_a_circle():
    edges = {"solforge.bench.measure.timing": {"solforge.bench.judge.pipeline"},
             "solforge.bench.judge.pipeline": {"solforge.bench.measure.timing"},
             "solforge.records.evaluation": {"solforge.cli.main"}}
    assert _violations(edges, 2, "solforge.bench", BENCH_LAYERS) == [
        "solforge.bench.measure.timing -> solforge.bench.judge.pipeline: upward"]
    assert _violations(edges, 1, "solforge", PACKAGE_LAYERS) == [
        "solforge.records.evaluation -> solforge.cli.main: upward"]
    assert _cycles(edges) == [["solforge.bench.judge.pipeline", "solforge.bench.measure.timing"]]


if __name__ == "__main__":  # the whole list, for a person fixing it
    e = _edges()
    print(*_violations(e, 1, "solforge", PACKAGE_LAYERS), sep="\n")
    print(*_violations(e, 2, "solforge.bench", BENCH_LAYERS), sep="\n")
    print(*_cycles(e), sep="\n")
