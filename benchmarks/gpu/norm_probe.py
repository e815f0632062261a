"""The one-read cooperative normalisations (``row_norm``) on KernelBench's shapes, against
the two-launch paths, eager PyTorch and torch.compile.

Cases, in this order (all fp32, ``torch.rand`` inputs as KernelBench's):
- ``layer_norm``: 40_LayerNorm, ``nn.LayerNorm((64, 256, 256))`` on [16, 64, 256, 256]
  (0.27 GB), the weight and bias set away from ones and zeros;
- ``group_norm``: 35_GroupNorm_, ``nn.GroupNorm(8, 64)`` on [112, 64, 512, 512] (7.5 GB);
- ``instance_norm``: 34_InstanceNorm, ``nn.InstanceNorm2d(64)`` on the same shape;
- ``l1``: 38_L1Norm_, ``x / torch.mean(torch.abs(x), dim=1, keepdim=True)`` on
  [32768, 65535] (8.6 GB);
- ``l2``: 39_L2Norm_, ``x / torch.norm(x, p=2, dim=1, keepdim=True)`` on the same shape.

For each: the plan (``row_norm.plan``), the cooperative output and the two-launch one
against eager PyTorch (max abs error, allclose at atol = rtol = 1e-4, the evaluator's fp32
tolerance), whether a program of one cooperative launch gave up waiting (``gave_up``: it
read its row twice; ``arrived``: every row's pieces signalled), and CUDA-event times (3
warm-up calls, the median of 10) of eager, the two-launch path (LayerNorm's
``layernorm_split``, ``cooperative=False``; for the others, which had no library path
before, the same kernel in two launches), the cooperative path, and torch.compile
(default mode; compiled last, after every case's other figures, and skipped once less than
30 s of ``--budget`` is left). The speed of light is one read and one write of x (the GB/s
column counts those bytes). A case whose tensors do not fit the free memory (x, the
reference, one output, and one in flight) is run on fewer rows, recorded as ``scaled``.
The JSON is written after each case, so a cut run keeps what it measured. About 60 s on
an H100, most of it torch.compile.

Usage (GPU machine, repository root): python3 benchmarks/gpu/norm_probe.py --json OUT.json
``--only layer_norm,l2`` runs some cases; ``--no-hints`` turns the cooperative kernel's L2
eviction hints off (``row_norm._COOP_L2_HINTS``), to compare; ``--dry-run`` runs small shapes, on this
machine's GPU or, without one, under Triton's interpreter on the CPU (timed by the wall
clock, 2 calls a figure: checks that the probe runs, not speeds).
Not covered: bf16 inputs; other shapes than KernelBench's (``--dry-run``'s aside).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

if not torch.cuda.is_available():  # the kernels read the flag when they are imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch.nn as nn  # noqa: E402

from solforge.kernels.triton import (  # noqa: E402
    cooperative,
    div_by_row_norm,
    group_norm,
    instance_norm,
    layer_norm,
    layernorm,
    row_norm,
)
from solforge.kernels.triton._common import sm_count  # noqa: E402

# name: (KernelBench's shape, the dry run's shape)
SHAPES = {
    "layer_norm": ((16, 64, 256, 256), (3, 4, 8, 37)),
    "group_norm": ((112, 64, 512, 512), (2, 16, 4, 37)),
    "instance_norm": ((112, 64, 512, 512), (2, 16, 9, 37)),
    "l1": ((32768, 65535), (64, 1001)),
    "l2": ((32768, 65535), (64, 1001)),
}


def _affine(mod: nn.Module) -> nn.Module:
    """``mod`` with its weight and bias (if any) away from ones and zeros."""
    with torch.no_grad():
        for p in mod.parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p))
    return mod


def build(name: str, shape: tuple[int, ...], device: str):
    """(the eager module or function, ours with ``cooperative``, the rows and the
    ``row_norm.norm_rows`` arguments of one cooperative launch, bytes of weights)."""
    c = shape[1] if len(shape) > 2 else 0
    if name == "layer_norm":
        mod = _affine(nn.LayerNorm(shape[1:])).to(device)
        w, b = mod.weight.detach(), mod.bias.detach()

        def ours(x, coop=True):
            return layer_norm(x, w, b, mod.eps, normalized_shape=shape[1:], cooperative=coop)

        def launch(x):
            return (x.view(shape[0], -1), row_norm.MEAN_VAR,
                    dict(eps=mod.eps, weight=w.view(-1), bias=b.view(-1),
                         affine=row_norm.PER_COLUMN), layernorm.COOP_MIN)
        return mod, ours, launch, 2 * w.numel() * 4
    if name in ("group_norm", "instance_norm"):
        groups = 8 * c // 64 if name == "group_norm" else c
        mod = _affine(nn.GroupNorm(groups, c)).to(device) if name == "group_norm" else \
            nn.InstanceNorm2d(c).to(device)
        spatial = shape[2] * shape[3]

        def ours(x, coop=True):
            if name == "group_norm":
                return group_norm(x, groups, mod.weight, mod.bias, mod.eps, cooperative=coop)
            return instance_norm(x, eps=mod.eps, cooperative=coop)

        def launch(x):
            kw = dict(eps=mod.eps, groups=groups, per_group=c // groups, spatial=spatial)
            if name == "group_norm":
                kw.update(weight=mod.weight.detach(), bias=mod.bias.detach(),
                          affine=row_norm.PER_CHANNEL)
            return x.view(shape[0] * groups, -1), row_norm.MEAN_VAR, kw, None
        return mod, ours, launch, 0
    norm = "mean_abs" if name == "l1" else "l2"

    def eager(x):
        if norm == "mean_abs":
            return x / torch.mean(torch.abs(x), dim=1, keepdim=True)
        return x / torch.norm(x, p=2, dim=1, keepdim=True)

    def ours(x, coop=True):
        return div_by_row_norm(x, norm, cooperative=coop)

    def launch(x):
        return x, row_norm.MEAN_ABS if norm == "mean_abs" else row_norm.L2, {}, None
    return eager, ours, launch, 0


def time_ms(fn, x, reps: int = 10) -> float:
    """The median of ``reps`` calls' CUDA-event times (wall-clock times off a GPU), after
    3 warm-up calls (1 off a GPU)."""
    for _ in range(3 if x.device.type == "cuda" else 1):
        fn(x)
    if x.device.type != "cuda":
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(x)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(reps)]
    for start, end in pairs:
        start.record()
        fn(x)
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs)


def check(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """Max abs error and allclose at 1e-4, a slab of rows at a time (no 7.5 GB temporary)."""
    err, ok = 0.0, True
    for o, r in zip(out.split(8), ref.split(8)):
        err = max(err, (o - r).abs().max().item())
        ok = ok and bool(torch.allclose(o, r, 1e-4, 1e-4))
    return {"max_abs_err": err, "allclose_1e-4": ok}


def fitted(shape: tuple[int, ...], device: str) -> tuple[int, ...]:
    """``shape`` with fewer rows when x, the reference, one output and one in flight do
    not fit the free memory (with 2 GB to spare)."""
    if device != "cuda":
        return shape
    free = torch.cuda.mem_get_info()[0] - 2e9
    nbytes = 4 * torch.Size(shape).numel()
    rows = shape[0]
    while rows > 1 and 4 * nbytes * rows / shape[0] > free:
        rows //= 2
    return (rows,) + tuple(shape[1:])


def run_case(name: str, shape: tuple[int, ...], device: str, reps: int) -> dict:
    eager, ours, launch, wbytes = build(name, shape, device)
    x = torch.rand(shape, device=device)
    rows, stat, kw, max_tile = launch(x)
    plan = row_norm.plan(*rows.shape, sm_count(str(x.device)),
                         row_norm.INTERPRET or device != "cuda", max_tile=max_tile)
    case: dict = {"shape": list(shape), "plan": plan._asdict(), "check": {}, "ms": {}}
    with torch.no_grad():
        ref = eager(x)
        case["check"]["coop"] = check(ours(x), ref)
        case["check"]["two_launch"] = check(ours(x, False), ref)
        del ref
        if plan.kind in ("coop", "pieces"):
            y = torch.empty_like(rows)
            cnt = row_norm.norm_rows(rows, y, stat, row_plan=plan, **kw)
            del y
            case["check"]["coop"]["gave_up"] = bool(cnt[-1].item())
            case["check"]["coop"]["arrived"] = bool((cnt[:-1] == plan.pieces).all().item()) \
                if plan.kind == "coop" else None
        case["ms"]["eager"] = time_ms(eager, x, reps=reps)
        case["ms"]["two-launch"] = time_ms(lambda t: ours(t, False), x, reps=reps)
        case["ms"]["coop"] = time_ms(ours, x, reps=reps)
    nbytes = 2 * x.numel() * x.element_size() + wbytes
    case["gbs"] = {k: nbytes / v / 1e6 for k, v in case["ms"].items()}
    return case


def compile_case(name: str, shape: tuple[int, ...], device: str, case: dict,
                 reps: int) -> None:
    eager, *_ = build(name, shape, device)
    x = torch.rand(shape, device=device)
    try:
        compiled = torch.compile(eager)
        t0 = time.perf_counter()
        with torch.no_grad():
            compiled(x)
            case["compile_s"] = time.perf_counter() - t0
            case["ms"]["compile"] = time_ms(compiled, x, reps=reps)
        case["gbs"]["compile"] = (2 * x.numel() * 4) / case["ms"]["compile"] / 1e6
    except Exception as e:  # noqa: BLE001 - recorded, the probe goes on
        case.setdefault("errors", {})["compile"] = f"{type(e).__name__}: {e}"[:2000]


def report(name: str, case: dict) -> None:
    print(f"\n{name} {case['shape']} plan {case['plan']}" +
          (f" (scaled from {case['scaled_from']})" if case.get("scaled_from") else ""))
    for k, c in case["check"].items():
        print(f"  {k:12s} max abs err {c['max_abs_err']:.2e} allclose {c['allclose_1e-4']}"
              f" gave up {c.get('gave_up')} arrived {c.get('arrived')}")
    for k, ms in case["ms"].items():
        print(f"  {k:12s} {ms:9.3f} ms {case['gbs'][k]:7.0f} GB/s")
    for k, err in case.get("errors", {}).items():
        print(f"  {k}: {err.splitlines()[0] if err else err}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--only", help="comma-separated cases (default all): " + ",".join(SHAPES))
    ap.add_argument("--dry-run", action="store_true", help="small shapes (see the docstring)")
    ap.add_argument("--no-hints", action="store_true", help="no L2 eviction hints")
    ap.add_argument("--budget", type=float, default=85.0,
                    help="seconds; torch.compile is skipped once less than 30 are left")
    args = ap.parse_args()
    t_start = time.perf_counter()
    if args.no_hints:
        row_norm._COOP_L2_HINTS = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    names = args.only.split(",") if args.only else list(SHAPES)
    reps = 2 if args.dry_run and device == "cpu" else 10  # (the interpreter is slow)
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "torch": torch.__version__, "triton": __import__("triton").__version__,
              "sms": sm_count(device), "interpret": row_norm.INTERPRET,
              "coop": {"chunk": row_norm._COOP_CHUNK, "warps": row_norm._COOP_WARPS,
                       "maxnreg": row_norm._COOP_MAXNREG, "per_sm": cooperative.PER_SM,
                       "l2_hints": row_norm._COOP_L2_HINTS},
              "dry_run": args.dry_run, "cases": {}}

    def save():
        result["elapsed_s"] = time.perf_counter() - t_start
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))

    shapes = {}
    for name in names:
        full, small = SHAPES[name]
        shape = small if args.dry_run else fitted(full, device)
        shapes[name] = shape
        case = run_case(name, shape, device, reps)
        if shape[0] != (small if args.dry_run else full)[0]:
            case["scaled_from"] = list(full)
        result["cases"][name] = case
        report(name, case)
        save()
        if device == "cuda":
            torch.cuda.empty_cache()
    for name in names:
        case = result["cases"][name]
        if time.perf_counter() - t_start > args.budget - 30:
            case.setdefault("errors", {})["compile"] = "skipped: the probe's budget"
            continue
        compile_case(name, shapes[name], device, case, reps)
        print(f"{name}: compile {case['ms'].get('compile', float('nan')):.3f} ms "
              f"({case.get('compile_s', float('nan')):.1f} s to compile)", flush=True)
        save()
        if device == "cuda":
            torch.cuda.empty_cache()
    save()
    ok = all(c["allclose_1e-4"] and not c.get("gave_up")
             for case in result["cases"].values() for c in case["check"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
