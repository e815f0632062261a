"""What the search agent generates for a few problem files on this machine, and a quick
check and timing of chosen candidates against the reference (no judge, no sandbox).

    python3 benchmarks/gpu/kb_probe.py FILE [FILE ...] --want sdpa,library --json OUT.json

For each file: the candidates ``generate_candidates`` lists, and why a matched pattern gave
no candidate (``rewrite_errors``, generator errors). For each listed candidate named in
``--want``: its file is imported, built with the reference's init inputs and its state
dict, run on one input set, compared with the reference at ``--tol`` (atol = rtol), and
both are timed with CUDA events (``--warmup`` calls, then the median of ``--iters``);
the first call's wall time (``first_call_s``: a compiled candidate's compile and tuning)
is kept, and the JSON is rewritten after every problem; ``--kernels`` lists each timed
candidate's device kernels (whether Inductor's ``triton_*`` kernels ran, for instance).
A failure is recorded and the next one runs. This is a probe for planning a judged run,
not a measurement to report: the judge's figures (fresh inputs, several trials, L2
flushed, the compile baseline) are what benchmarks/results quote.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _time(fn, args, warmup: int, iters: int) -> float:
    if not torch.cuda.is_available():  # a dry run on a CPU: wall time
        with torch.no_grad():
            fn(*args)
            t = time.perf_counter()
            fn(*args)
            return (time.perf_counter() - t) * 1e3
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*args)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    return statistics.median(times)


def _load(source: str, name: str):
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tensors(out) -> list[torch.Tensor]:
    """A forward's outputs as a list: one tensor, or the tensors of a tuple or list."""
    return [out] if isinstance(out, torch.Tensor) else \
        [t for t in out if isinstance(t, torch.Tensor)]


def _kernel_names(fn, args) -> list[str]:
    """The device kernels of one call, in launch order (names cut to 90 characters): an
    Inductor kernel is named ``triton_*``, an eager ATen one ``at::native::*``."""
    if not torch.cuda.is_available():
        return []
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                    key=lambda e: e.time_range.start)
    return [e.name[:90] for e in events][:60]


def probe(file: str, want: set[str], tol: float, warmup: int, iters: int,
          kernels: bool = False) -> dict:
    from solforge.problems import load_problem
    from solforge.search.candidates import generate_candidates, search_context

    out: dict = {"file": file}
    t0 = time.time()
    problem = load_problem(file)
    ctx = search_context(problem, "cuda")
    cands, errors = generate_candidates(ctx)
    out.update(candidates=[c.name for c in cands], rewrite_errors=ctx.rewrite_errors,
               generator_errors=errors, trace_error=ctx.trace_error,
               pattern_errors=ctx.pattern_errors,
               patterns=[m.description for m in ctx.matches],
               generate_s=round(time.time() - t0, 1))
    chosen = [c for c in cands if c.name in want]
    if not chosen:
        return out
    ref_mod = _load(Path(file).read_text(), "probe_reference")
    init = ref_mod.get_init_inputs()
    torch.manual_seed(0)
    ref = ref_mod.Model(*init).to(DEVICE)
    torch.manual_seed(1)
    inputs = [x.to(DEVICE) if isinstance(x, torch.Tensor) else x
              for x in ref_mod.get_inputs()]
    with torch.no_grad():
        expected = ref(*inputs)
    out["reference_ms"] = round(_time(ref, inputs, warmup, iters), 4)
    out["timed"] = {}
    for c in chosen:
        rec: dict = {}
        try:
            mod = _load(c.source, f"probe_{c.name.replace(':', '_').replace('+', '_')}")
            torch.manual_seed(0)
            new = mod.ModelNew(*init).to(DEVICE)
            new.load_state_dict(ref.state_dict(), strict=False)
            t_first = time.perf_counter()
            with torch.no_grad():
                got = new(*inputs)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            # the first call's wall time: a compiled candidate's compile (and, for
            # max-autotune or coordinate descent, its tuning) is in it
            rec["first_call_s"] = round(time.perf_counter() - t_first, 2)
            # a forward may return several tensors (a backward's dx, dweight, dbias)
            pairs = list(zip(_tensors(got), _tensors(expected)))
            if not pairs or len(_tensors(got)) != len(_tensors(expected)):
                raise ValueError("the candidate returns other outputs than the reference")
            diff = max(float((g.float() - e.float()).abs().nan_to_num().max())
                       for g, e in pairs)
            bad = sum(float((~torch.isclose(g.float(), e.float(), atol=tol, rtol=tol,
                                            equal_nan=True)).float().sum())
                      for g, e in pairs) / sum(e.numel() for _, e in pairs)
            rec.update(max_abs_error=diff, mismatch=bad,
                       ms=round(_time(new, inputs, warmup, iters), 4))
            rec["speedup_vs_reference"] = round(out["reference_ms"] / rec["ms"], 3)
            if kernels:
                rec["kernels"] = _kernel_names(new, inputs)
        except Exception as e:  # recorded; the next candidate runs
            rec["error"] = f"{type(e).__name__}: {e}"[:600]
            rec["trace"] = traceback.format_exc()[-1500:]
        out["timed"][c.name] = rec
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--want", default="sdpa,library")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", default=None)
    ap.add_argument("--kernels", action="store_true",
                    help="list each timed candidate's device kernels (one profiled call)")
    a = ap.parse_args()
    want = set(a.want.split(","))
    results = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
               "torch": torch.__version__, "python": sys.version.split()[0], "problems": []}
    for f in a.files:
        try:
            r = probe(f, want, a.tol, a.warmup, a.iters, a.kernels)
        except Exception as e:
            r = {"file": f, "error": f"{type(e).__name__}: {e}"[:600],
                 "trace": traceback.format_exc()[-1500:]}
        results["problems"].append(r)
        print(json.dumps(r, default=str)[:1500], flush=True)
        if a.json:  # after every problem: a call cut short keeps what finished
            Path(a.json).write_text(json.dumps(results, indent=1, default=str))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
