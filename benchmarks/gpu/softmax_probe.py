"""Softmax and log-softmax over rows of 393216 fp32 (KernelBench's 23_Softmax and its
LogSoftmax): the library's one-read cooperative path against its two-pass path, eager
PyTorch and torch.compile.

For x = torch.rand(rows, 393216) on the GPU, rows 4096 (6.4 GB, KernelBench's) and 1024,
it checks softmax and log_softmax against PyTorch (max abs error, allclose at 1e-4), checks
that no program of the cooperative launch gave up waiting (``row_softmax._cooperative``'s
flag: a program that did read its row twice), and times with CUDA events (3 warm-up calls,
the median of 10): ``torch.softmax`` eager, ``torch.compile(torch.softmax)`` (default
mode), the two-pass path (``softmax(x, cooperative=False)``) and the cooperative one, and
the same for log-softmax but compile. The speed of light is one read and one write of x
at the device's bandwidth (the GB/s column counts those bytes). A compile that fails is
recorded, not raised. About 30 s of GPU time, most of it the compile.

Usage (GPU machine, repository root): python3 benchmarks/gpu/softmax_probe.py --json OUT.json
``--chunk``, ``--warps`` and ``--prefetch`` set the cooperative kernel's piece, warps and
next-row load for the run (the module's ``_COOP_*``), to compare configurations; the JSON
records the ones used.
Not covered: other row lengths (``--rows`` and ``--cols`` change the shape), bf16 inputs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from solforge.kernels.triton import cooperative, row_softmax  # noqa: E402


def time_ms(fn, x, warmup: int = 3, reps: int = 10) -> float:
    """The median of ``reps`` calls' CUDA-event times, after ``warmup`` calls."""
    for _ in range(warmup):
        fn(x)
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(reps)]
    for start, end in pairs:
        start.record()
        fn(x)
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs)


def check(out: torch.Tensor, ref: torch.Tensor) -> dict:
    err = (out - ref).abs().max().item()
    return {"max_abs_err": err, "allclose_1e-4": bool(torch.allclose(out, ref, 1e-4, 1e-4))}


def gave_up(x: torch.Tensor, log: bool) -> bool | None:
    """Whether a program of one cooperative launch gave up waiting (None: not that path)."""
    plan = row_softmax.plan_rows(x.shape[0], x.shape[1], row_softmax.sm_count(str(x.device)),
                                 interpret=False)
    if plan.kind != "coop":
        return None
    cnt = row_softmax._cooperative(x, torch.empty_like(x), plan, log)
    return bool(cnt[-1].item())


def run_case(rows: int, cols: int, compiled) -> dict:
    x = torch.rand(rows, cols, device="cuda")
    plan = row_softmax.plan_rows(rows, cols, row_softmax.sm_count(str(x.device)),
                                 interpret=False)
    case: dict = {"shape": [rows, cols], "plan": plan._asdict(), "check": {}, "ms": {},
                  "errors": {}}
    for name, ours, ref_fn in (("softmax", row_softmax.softmax, torch.softmax),
                               ("log_softmax", row_softmax.log_softmax, torch.log_softmax)):
        ref = ref_fn(x, dim=1)
        case["check"][name] = check(ours(x), ref)
        case["check"][name + "_two_pass"] = check(ours(x, cooperative=False), ref)
        del ref
        case["check"][name]["gave_up"] = gave_up(x, name == "log_softmax")
        case["ms"][f"{name} eager"] = time_ms(lambda t: ref_fn(t, dim=1), x)
        if name == "softmax":
            try:
                t0 = time.perf_counter()
                compiled(x)
                case["compile_s"] = time.perf_counter() - t0
                case["ms"]["softmax compile"] = time_ms(compiled, x)
            except Exception as e:  # noqa: BLE001 - recorded, the probe goes on
                case["errors"]["softmax compile"] = f"{type(e).__name__}: {e}"[:2000]
        case["ms"][f"{name} two-pass"] = time_ms(lambda t: ours(t, cooperative=False), x)
        case["ms"][f"{name} coop"] = time_ms(ours, x)
    nbytes = 2 * x.numel() * x.element_size()
    case["gbs"] = {k: nbytes / v / 1e6 for k, v in case["ms"].items()}
    return case


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--rows", type=int, nargs="+", default=[4096, 1024])
    ap.add_argument("--cols", type=int, default=393216)
    ap.add_argument("--chunk", type=int, help="elements a piece (a power of two)")
    ap.add_argument("--warps", type=int, help="warps a program")
    ap.add_argument("--prefetch", action="store_true", help="load the next row's piece early")
    args = ap.parse_args()
    if args.chunk:
        row_softmax._COOP_CHUNK = args.chunk
    if args.warps:
        row_softmax._COOP_WARPS = args.warps
    if args.prefetch:
        row_softmax._COOP_PREFETCH = True
    compiled = torch.compile(lambda t: torch.softmax(t, dim=1))
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__,
              "sms": torch.cuda.get_device_properties(0).multi_processor_count,
              "coop": {"chunk": row_softmax._COOP_CHUNK, "warps": row_softmax._COOP_WARPS,
                       "prefetch": row_softmax._COOP_PREFETCH,
                       "per_sm": cooperative.PER_SM},
              "cases": []}
    for rows in args.rows:
        case = run_case(rows, args.cols, compiled)
        result["cases"].append(case)
        print(f"\n{result['device']}: {rows} x {args.cols} fp32, plan {case['plan']}")
        for name, c in case["check"].items():
            print(f"  {name:22s} max abs err {c['max_abs_err']:.2e} "
                  f"allclose {c['allclose_1e-4']} gave up {c.get('gave_up')}")
        for name, ms in case["ms"].items():
            print(f"  {name:22s} {ms:8.3f} ms {case['gbs'][name]:7.0f} GB/s")
        for name, err in case["errors"].items():
            print(f"  {name}: {err.splitlines()[0] if err else err}")
        torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    ok = all(c["allclose_1e-4"] for case in result["cases"] for c in case["check"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
