"""Do the search's library candidates compute the reference's numbers on problems nobody
wrote for it? Every KernelBench level 1-3 file, shrunk to CPU sizes, given its candidates
as a GPU search would (``search_context(problem, "cuda")`` + ``generate_candidates``), and
each candidate that substitutes library kernels judged for correctness by the real
evaluator on the CPU (Triton under the interpreter; nothing timed).

Run from the repository root (CPU, hours on two cores: level 1's 1-84 and level 2's 1-40
took about 75 minutes in session 34; ``--start-at`` carries a cut sweep on)::

    TRITON_INTERPRET=1 PYTHONPATH=$PWD python benchmarks/kb_numerics.py \\
        --out benchmarks/results/2026-12-07-cpu-s34-kb-numerics/numerics.json

**Shrinking.** A KernelBench file sets its sizes as module-level integers (``batch_size =
16``, ``N = 2048 * 2``, ``D, H, W = 16, 64, 64``). Each integer of 32 or more (alone, or
in a module-level tuple or list) is divided by the smallest factor of :data:`FACTORS` (1:
the file as written) that brings the reference's input and parameter elements under
``--max-elements`` (counted on the meta device) and lets its reference build and run on
the CPU; multiples of 8 stay multiples of 8 and odd sizes odd (a masked tail stays a
masked tail). Sizes set inside ``get_inputs`` or the constructor are not changed, nor
integers under 32 (kernel sizes, strides, group counts). A file no factor brings under
the cap is recorded ``not_shrunk`` and skipped.

**Judging.** One CPU evaluator judges every candidate whose levers include
``library_kernel``, and every generated row-program kernel (family ``rowfuse``), and not
``compile`` or ``cuda_graphs`` (Inductor's C++ builds would
take the hour; a replay needs a GPU): two correctness trials on fresh inputs, the
problem's own tolerance (KernelBench's plain fp32 files: 1e-4). Each candidate runs in the
judge's sandboxed runner, so one that crashes or hangs is recorded with its status.

The 3xTF32 GEMM pattern matches only GEMMs large enough for the tensor cores to pay
(``patterns/gemm_f32x3.MIN_MACS``, ``MIN_TILES``), which the shrunk ones are not: its
thresholds are lowered here (``MIN_DIM`` to 16: the kernel's 64-wide tiles then run
masked) so that its rewrites are judged too, unless ``--gemm-sizes-as-on-a-gpu``. Under the interpreter its TF32 products are numpy's
fp32 products: the rewrite (operands, transposes, batch dims, the fused epilogue) is what
is checked, not the 3xTF32 split's rounding (``tests/kernels`` and the GPU runs check that).

The JSON holds one record per file (the factor, the candidates judged and each one's
status, message head and largest error) and the totals. Not covered: the real sizes
(a kernel's tiling at 4096 wide, int32 offsets past 2**31, an autotuned config that only
a GPU picks), speed, and the candidates that compile (their numerics are Inductor's).
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.kb_survey import COMMIT, MIRROR, extract  # the survey's own extraction

FACTORS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
MIN_SCALED = 32  # integers under this are shapes of the operation, not of the data


def _scaled(v: int, f: int) -> int:
    if v < MIN_SCALED:
        return v
    s = v // f
    if v % 8 == 0:
        return max(8, s // 8 * 8)
    if v % 2 == 1 and s % 2 == 0:
        s += 1
    return max(3, s)


def _int_constant(node: ast.expr) -> int | None:
    """The value of an integer written as a constant expression (``2048 * 2``, ``1 << 14``,
    ``-3``), or None."""
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator,
               ast.unaryop)
    if not all(isinstance(n, allowed) for n in ast.walk(node)) or not all(
            type(n.value) is int for n in ast.walk(node) if isinstance(n, ast.Constant)):
        return None
    try:
        value = eval(compile(ast.Expression(node), "<size>", "eval"), {"__builtins__": {}})
    except (ArithmeticError, ValueError):
        return None
    return value if type(value) is int else None


class _Shrink(ast.NodeTransformer):
    """Module-level ``NAME = <int>`` (and ints in a module-level tuple or list) scaled."""

    def __init__(self, f: int) -> None:
        self.f = f
        self.changed: dict[str, Any] = {}

    def _value(self, node: ast.expr) -> ast.expr:
        value = _int_constant(node)
        if value is not None:
            return ast.copy_location(ast.Constant(_scaled(value, self.f)), node)
        if isinstance(node, (ast.Tuple, ast.List)):
            node.elts = [self._value(e) for e in node.elts]
        return node

    def shrink(self, tree: ast.Module) -> ast.Module:
        for stmt in tree.body:
            # ``n = 4096``, and ``D, H, W = 24, 32, 32`` (KernelBench's 3-D problems)
            if isinstance(stmt, ast.Assign) and all(
                    isinstance(t, ast.Name) or isinstance(t, ast.Tuple)
                    and all(isinstance(e, ast.Name) for e in t.elts) for t in stmt.targets):
                before = ast.unparse(stmt.value)
                stmt.value = self._value(stmt.value)
                after = ast.unparse(stmt.value)
                if after != before:
                    self.changed[ast.unparse(stmt.targets[0])] = after
        return tree


def _numel(xs: Any) -> int:
    import torch

    if isinstance(xs, torch.Tensor):
        return xs.numel()
    if isinstance(xs, (list, tuple)):
        return sum(_numel(x) for x in xs)
    return 0


def _child_check(path: Path, max_elements: int) -> str | None:
    """In a child: the reference's inputs and parameters counted on the meta device, then,
    within the cap, built and run on the CPU."""
    import torch

    from solforge.problems.loader import import_file

    torch.set_num_threads(1)
    m = import_file(path)
    with torch.device("meta"):
        model = m.Model(*m.get_init_inputs())
        n = _numel(m.get_inputs()) + sum(p.numel() for p in model.parameters())
    if n > max_elements:
        return f"{n} elements (cap {max_elements})"
    torch.manual_seed(0)
    model = m.Model(*m.get_init_inputs()).eval()
    with torch.no_grad():
        model(*m.get_inputs())
    return None


def _runs(path: Path, max_elements: int) -> str | None:
    """None when the file's reference fits the cap and builds and runs on the CPU; else why
    not. In a forked child: a shrunk size can hang or crash."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child() -> None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        try:
            send.send(_child_check(path, max_elements))
        except BaseException as e:  # noqa: BLE001 - the reason is the answer
            send.send(f"{type(e).__name__}: {str(e)[:200]}")

    proc = ctx.Process(target=child)
    proc.start()
    send.close()
    why = recv.recv() if recv.poll(120) else "the reference did not finish in 120 s"
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    return why


def shrink_file(src: Path, dest_dir: Path, max_elements: int) -> dict[str, Any]:
    """The smallest factor (:data:`FACTORS`, 1 first: the file as written) whose copy of
    ``src`` fits the cap and whose reference runs, written under ``dest_dir`` with the
    same name; or why none did."""
    tried: dict[str, str] = {}
    dest = dest_dir / src.name
    for f in FACTORS:
        tree = _Shrink(f)
        out = ast.unparse(tree.shrink(ast.parse(src.read_text()))) if f > 1 else \
            src.read_text()
        if f > 1 and not tree.changed:
            tried[str(f)] = "no module-level size to shrink"
            break
        dest.write_text(out + "\n")
        why = _runs(dest, max_elements)
        if why is None:
            return {"factor": f, "sizes": tree.changed}
        # over the cap, or fits but fails (a size that no longer divides): a larger factor
        tried[str(f)] = why
    return {"not_shrunk": tried}


def judged(ev: Any, problem: Any, cand: Any, tmp: Path) -> dict[str, Any]:
    path = tmp / f"{problem.path.stem}__{cand.name.replace('+', '_').replace(':', '_')}.py"
    path.write_text(cand.source)
    start = time.perf_counter()
    try:
        r = ev.evaluate(problem, path)
    except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
        return {"candidate": cand.name, "status": "EVALUATOR_ERROR",
                "message": f"{type(e).__name__}: {str(e)[:400]}"}
    errs = [w.max_abs_error for w in r.workloads if w.max_abs_error is not None]
    return {"candidate": cand.name, "status": r.status.name, "message": r.message[:400],
            "max_abs_error": max(errs) if errs else None,
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", default=MIRROR, help="KernelBench's git directory")
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--out", type=Path, help="the JSON to write (default: stdout only)")
    ap.add_argument("--only", default="",
                    help="files whose level/name contains one of these (comma-separated)")
    ap.add_argument("--start-at", default="",
                    help="skip the files before this level/name (KernelBench's order)")
    ap.add_argument("--max-elements", type=int, default=1 << 18,
                    help="input and parameter elements a shrunk file may have")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per candidate")
    ap.add_argument("--gemm-sizes-as-on-a-gpu", action="store_true",
                    help="keep the 3xTF32 GEMM pattern's size thresholds (the shrunk "
                         "GEMMs then never match it)")
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("set TRITON_INTERPRET=1: the candidates' Triton kernels run on this CPU")

    import torch

    from solforge.bench.evaluator import Evaluator
    from solforge.problems import load_problem
    from solforge.records.options import EvalOptions
    from solforge.search.candidates import generate_candidates, search_context
    from solforge.search.trace import preload_compiler

    preload_compiler()
    if not args.gemm_sizes_as_on_a_gpu:
        # the shrunk GEMMs fall under the 3xTF32 GEMM's size thresholds: matched from
        # 16 in M, N and K, its rewrite and kernel are judged too
        from solforge.search.patterns import gemm_f32x3

        gemm_f32x3.MIN_MACS, gemm_f32x3.MIN_TILES, gemm_f32x3.MIN_DIM = 0, 1, 16
    opts = EvalOptions(device="cpu", timing=False, timeout_s=args.timeout, trials=2)
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kb_numerics_") as tmp_s, Evaluator(opts) as ev:
        tmp = Path(tmp_s)
        (tmp / "src").mkdir()
        files = [f for f in extract(args.mirror, args.commit, tmp / "src")
                 if any(o in f"{f.parent.name}/{f.name}" for o in args.only.split(","))]
        names = [f"{f.parent.name}/{f.name}" for f in files]
        if args.start_at:
            files = files[next(i for i, n in enumerate(names) if args.start_at in n):]
        for f in files:
            name = f"{f.parent.name}/{f.name}"
            rec: dict[str, Any] = {"file": name}
            start = time.perf_counter()
            out_dir = tmp / "shrunk" / f.parent.name
            out_dir.mkdir(parents=True, exist_ok=True)
            rec |= shrink_file(f, out_dir, args.max_elements)
            if "not_shrunk" not in rec:
                try:
                    problem = load_problem(out_dir / f.name)
                    ctx = search_context(problem, "cuda")
                    cands, gen_errors = generate_candidates(ctx)
                    rec["generator_errors"] = gen_errors
                    lib = [c for c in cands if ("library_kernel" in c.levers
                                                or c.family == "rowfuse")
                           and "compile" not in c.levers and "cuda_graphs" not in c.levers]
                    rec["library_candidates"] = [judged(ev, problem, c, tmp) for c in lib]
                except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
                    rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
            rec["seconds"] = round(time.perf_counter() - start, 1)
            records.append(rec)
            verdicts = ", ".join(f"{c['candidate']}={c['status']}"
                                 for c in rec.get("library_candidates", []))
            state = ("not shrunk" if "not_shrunk" in rec else rec.get("error")
                     or f"x1/{rec['factor']}")
            print(f"{name:<64} {state[:40]:<12} {verdicts[:160]}", flush=True)
            _summary(args, torch.__version__, records)
    summary = _summary(args, torch.__version__, records)
    t = summary["totals"]
    print(f"\n{t['files']} files, {t['shrunk']} shrunk, {t['files_with_library_candidates']} "
          f"with library candidates, {t['candidates_judged']} judged: {t['by_status']}; "
          f"not passed: {t['not_passed'] or 'none'}; errors: {t['errors'] or 'none'}")


def _summary(args: Any, torch_version: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals and the records, written to ``--out`` (after every file: a sweep cut
    short keeps what it judged)."""
    judged_all = [c for r in records for c in r.get("library_candidates", [])]
    by_status = collections.Counter(c["status"] for c in judged_all)
    summary = {
        "commit": args.commit, "device": "cpu (Triton interpreter; correctness only)",
        "machine": platform.node(), "torch": torch_version,
        "python": platform.python_version(), "start_at": args.start_at or None,
        "only": args.only or None,
        "totals": {
            "files": len(records),
            "shrunk": sum("factor" in r for r in records),
            "not_shrunk": [r["file"] for r in records if "not_shrunk" in r],
            "files_with_library_candidates": sum(bool(r.get("library_candidates"))
                                                 for r in records),
            "candidates_judged": len(judged_all),
            "by_status": dict(by_status.most_common()),
            "not_passed": {f"{r['file']}:{c['candidate']}": c["status"] for r in records
                           for c in r.get("library_candidates", [])
                           if c["status"] != "PASSED"},
            "errors": {r["file"]: r["error"] for r in records if r.get("error")},
            "seconds": round(sum(r.get("seconds", 0.0) for r in records), 1),
        },
        "files": records,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
