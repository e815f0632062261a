"""What the search sees on problems nobody wrote for it: every KernelBench level 1-3 file
loaded, traced and given its candidates, as a GPU search would (``search_context(problem,
"cuda")`` + ``generate_candidates``), on a CPU, without evaluating anything.

Run from the repository root (CPU; two minutes on two idle cores, ten on busy ones: the
RNNs of level 3 take tens of seconds each on meta tensors)::

    PYTHONPATH=$PWD python benchmarks/kb_survey.py \\
        --out benchmarks/results/2026-12-06-cpu-kb-survey/survey.json

The files are read from a KernelBench mirror (``--mirror``, a bare git directory) at
``--commit`` and extracted to a temporary folder. Each file is surveyed in a forked child
process with a time limit (``--timeout``): a file that hangs or crashes the interpreter
is recorded as such and the survey goes on. The tracer builds models and inputs on the
meta device, so KernelBench's full-size ``get_inputs`` cost no memory; a workload it must
build on the CPU is only ever a ``cpu`` one, which plain KernelBench files do not have.

The JSON holds one record per file (loaded or the load error, the trace error, the
pattern, rewrite and generator errors, the pattern kinds, the candidate names, whether
the traced graph printed as a file runs on meta tensors, seconds) and the totals. Not
covered: whether a candidate computes the right numbers or is fast (the evaluator's, on a
device; the printed check sees names, calls, shapes and dtypes only); level 4 (its files
fetch models from the Hugging Face Hub).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MIRROR = "/work/.mirror/ScalingIntelligence+KernelBench/repo"
COMMIT = "423217d9"
LEVELS = ("level1", "level2", "level3")


def extract(mirror: str, commit: str, dest: Path) -> list[Path]:
    """The level folders' files of ``mirror`` at ``commit``, extracted under ``dest``, in
    KernelBench's order (level, then number)."""
    from solforge.problems.loader import problem_files

    paths = [f"KernelBench/{lv}" for lv in LEVELS]
    archive = subprocess.run(["git", f"--git-dir={mirror}", "archive", commit, *paths],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return problem_files(dest / "KernelBench")


def printed_check(ctx: Any, tmp: Path) -> str | None:
    """None when the traced graph, printed as a standalone file (``forward_source``, the
    constructor copied), runs on meta tensors and gives the reference's output shapes
    and dtypes; else why not. Meta tensors have no values: a wrong number goes unseen,
    a wrong name, call, shape or dtype does not."""
    import types

    import torch.fx as fx
    import torch.utils._pytree as pytree

    from solforge.problems.loader import import_file
    from solforge.search.emit import BASE_IMPORTS, standalone_file
    from solforge.search.fxsource import EmitError, forward_source
    from solforge.search.trace import _build  # the tracer's own builder: the same fallbacks

    p = ctx.problem
    try:
        forward = forward_source(ctx.traced.graph, {})
    except EmitError as e:
        return f"EmitError: {e}"
    path = tmp / f"printed_{p.path.stem}.py"
    path.write_text(standalone_file(
        problem=p.name, candidate="printed", summary="the traced graph", details=[],
        levers=[], reference_path=p.path,
        imports=[*BASE_IMPORTS, "import torch.nn.functional as F", "import math"],
        forward=forward))
    # the reference's outputs on meta tensors are the traced graph's (its first workload)
    (out,) = [n for n in ctx.traced.graph.nodes if n.op == "output"]
    want = fx.node.map_aggregate(out.args[0], lambda a: a.meta.get("val")
                                 if isinstance(a, fx.Node) else a)
    w = p.workload(ctx.traced.workloads[0])
    try:
        printed = types.SimpleNamespace(Model=import_file(path).ModelNew,
                                        get_inputs=ctx.module.get_inputs,
                                        get_init_inputs=ctx.module.get_init_inputs)
        new, inputs = _build(printed, w, p.train_mode or p.kernelbench_plain)
        got = new(*inputs)
    except Exception as e:
        return f"the printed file fails: {type(e).__name__}: {str(e)[:300]}"

    def sig(out: Any) -> list[Any]:
        return [(tuple(x.shape), str(x.dtype)) if hasattr(x, "shape") else repr(x)
                for x in pytree.tree_leaves(out)]

    if sig(got) != sig(want):
        return f"the printed file gives {sig(got)}, the reference {sig(want)}"
    return None


def survey_file(path: Path) -> dict[str, Any]:
    """One file's record: what loading, tracing, matching and generating gave."""
    from solforge.problems import load_problem
    from solforge.search.candidates import generate_candidates, search_context

    rec: dict[str, Any] = {"file": f"{path.parent.name}/{path.name}", "loaded": False}
    start = time.perf_counter()
    try:
        problem = load_problem(path)
    except Exception as e:
        rec["load_error"] = str(e).replace(str(path.parent) + "/", "")
        rec["seconds"] = round(time.perf_counter() - start, 3)
        return rec
    rec["loaded"] = True
    rec["name"] = problem.name
    ctx = search_context(problem, "cuda")
    cands, gen_errors = generate_candidates(ctx)
    rec |= {
        "traced": ctx.traced is not None,
        "trace_error": ctx.trace_error,
        "skipped_workloads": ctx.traced.skipped if ctx.traced else [],
        "pattern_kinds": [m.kind for m in ctx.matches],
        "pattern_errors": ctx.pattern_errors,
        "rewrite_errors": ctx.rewrite_errors,
        "generator_errors": gen_errors,
        "candidates": [c.name for c in cands],
    }
    if ctx.traced is not None:
        with tempfile.TemporaryDirectory() as tmp:
            rec["printed_error"] = printed_check(ctx, Path(tmp))
    rec["seconds"] = round(time.perf_counter() - start, 3)
    return rec


def _child(path: Path, conn: Any) -> None:
    import torch

    torch.set_num_threads(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # a problem file that prints must not interleave with the table
    try:
        rec = survey_file(path)
    except BaseException as e:  # noqa: BLE001 - recorded, the survey goes on
        rec = {"file": f"{path.parent.name}/{path.name}", "status": "error",
               "error": f"{type(e).__name__}: {e}"}
    conn.send(rec)
    conn.close()


def survey_isolated(path: Path, timeout: float) -> dict[str, Any]:
    """:func:`survey_file` in a forked child (the parent's imports are shared), killed
    after ``timeout`` seconds."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(path, send))
    start = time.perf_counter()
    proc.start()
    send.close()
    rec: dict[str, Any] | None = None
    if recv.poll(timeout):
        try:
            rec = recv.recv()
        except EOFError:
            rec = None
    proc.join(5 if rec is not None else 0)
    if proc.is_alive():
        proc.kill()
        proc.join()
    name = f"{path.parent.name}/{path.name}"
    if rec is None:
        status = "timeout" if time.perf_counter() - start >= timeout else "crashed"
        rec = {"file": name, "status": status, "exitcode": proc.exitcode,
               "seconds": round(time.perf_counter() - start, 3)}
    rec.setdefault("status", "ok")
    return rec


def totals(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The counts the README quotes."""
    loaded = [r for r in records if r.get("loaded")]
    traced = [r for r in loaded if r.get("traced")]
    with_patterns = [r for r in traced if r.get("pattern_kinds")]
    files_by_kind = collections.Counter(k for r in with_patterns
                                        for k in dict.fromkeys(r["pattern_kinds"]))
    matches_by_kind = collections.Counter(k for r in with_patterns for k in r["pattern_kinds"])

    def having(key: str) -> list[str]:
        return [r["file"] for r in records if r.get(key)]

    return {
        "files": len(records),
        "loaded": len(loaded),
        "traced": len(traced),
        "trace_refused": len(loaded) - len(traced),
        "with_patterns": len(with_patterns),
        "files_by_kind": dict(files_by_kind.most_common()),
        "matches_by_kind": dict(matches_by_kind.most_common()),
        "load_errors": {r["file"]: r["load_error"] for r in records if r.get("load_error")},
        "trace_errors": {r["file"]: r["trace_error"] for r in loaded if r.get("trace_error")},
        "pattern_errors": having("pattern_errors"),
        "rewrite_errors": having("rewrite_errors"),
        "generator_errors": having("generator_errors"),
        "printed_errors": {r["file"]: r["printed_error"] for r in records
                           if r.get("printed_error")},
        "not_ok": {r["file"]: r["status"] for r in records if r.get("status") != "ok"},
        "seconds": round(sum(r.get("seconds", 0.0) for r in records), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", default=MIRROR, help="KernelBench's git directory")
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--out", type=Path, help="the JSON to write (default: stdout only)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per file")
    ap.add_argument("--only", default="", help="files whose level/name contains this")
    args = ap.parse_args()

    import torch

    from solforge.search.trace import preload_compiler

    preload_compiler()  # once, in the parent: every child shares it
    records = []
    with tempfile.TemporaryDirectory(prefix="kb_survey_") as tmp:
        files = [f for f in extract(args.mirror, args.commit, Path(tmp))
                 if args.only in f"{f.parent.name}/{f.name}"]
        for f in files:
            rec = survey_isolated(f, args.timeout)
            records.append(rec)
            why = (rec.get("load_error") or rec.get("trace_error") or
                   ", ".join(rec.get("pattern_kinds") or []) or "")
            print(f"{rec['file']:<70} {rec['status']:<8} {why[:100]}", flush=True)
    summary = {"commit": args.commit, "device": "cuda (candidates only; nothing evaluated)",
               "machine": platform.node(), "torch": torch.__version__,
               "python": platform.python_version(), "totals": totals(records),
               "files": records}
    t = summary["totals"]
    print(f"\n{t['files']} files, {t['loaded']} loaded, {t['traced']} traced, "
          f"{t['trace_refused']} refused, {t['with_patterns']} with patterns "
          f"{t['files_by_kind']}; pattern/rewrite/generator errors in "
          f"{len(t['pattern_errors'])}/{len(t['rewrite_errors'])}/"
          f"{len(t['generator_errors'])} files; printed graphs failing on meta: "
          f"{len(t['printed_errors'])}; not ok: {t['not_ok'] or 'none'}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
