"""Check on a GPU that the speed-of-light unit of each op family holds: no PyTorch kernel of
that family beats the bound solforge computes for it.

Run from the repository root on the GPU machine (under a minute on an H200)::

    python benchmarks/gpu/check_sol_units.py            # table on stdout; $OUT/sol_units.json
    python benchmarks/gpu/check_sol_units.py --dry-run  # any machine: builds every case small
                                                        # on the CPU, counts it, resolves its
                                                        # unit on the H200 datasheet row

Each case sets PyTorch's settings (PyTorch's defaults unless it says otherwise), counts the
op's work as the judge does (``count_work`` on the device), times it with the judge's own
``solforge.bench.measure.timing.measure`` (median device kernel time over fresh inputs, L2 flushed;
CUDA-event latency beside it), lists its kernels, and computes the bound under the same
settings: ``sol_time`` on the stored calibration of this device if there is one, and on the
datasheet row. ``ok``: the kernel time is not below the datasheet bound, nor below the
calibrated bound less ``CALIBRATION_SHORTFALL``, and the judge would not call it faster than
light. ``unit_ok`` says whether solforge picked the unit the case expects, ``count_ok``
whether the counted FLOPs match the case's formula (the fused RNN count, for one, only
runs on a GPU). The exit status is 1 when a case is not ok.

Cases: fp32 conv2d (KernelBench level 2's 1_Conv2D_ReLU_BiasAdd at its size) with cuDNN's
default TF32 and with TF32 off, fp32 conv_transpose2d, conv3d and conv1d, fp32 matmul by
default and under set_float32_matmul_precision('high'), fp32 einsum (bmm) under 'high',
bf16 matmul, fp32 SDPA (memory-efficient kernel: 3xTF32) and through the math backend, bf16
SDPA, fp32 LSTM (cuDNN).

Not covered: other shapes of the same ops (a bound is a lower bound for every shape; these
are sized to be compute-bound, where a wrong unit shows), cuDNN's autotuning
(``cudnn.benchmark`` stays off, as in the judge), and GPUs without a datasheet row or a
stored calibration (no bound: every case is reported without ``ok``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's solforge

from solforge.bench.measure.timing import TimingConfig, measure  # noqa: E402
from solforge.sol import (  # noqa: E402
    compute_time,
    count_work,
    faster_than_sol,
    load_profile,
    match_device,
    read_math_flags,
    sol_time,
    tensor_terms,
)
from solforge.sol.calibrate import CALIBRATION_SHORTFALL  # noqa: E402
from solforge.sol.profile import DeviceProfile, profile_from_spec  # noqa: E402

# timing per case: the judge's method with a shorter loop (13 cases in well under a minute)
TIMING = TimingConfig(warmup_calls=2, warmup_ms=20.0, min_calls=5, max_calls=30,
                      budget_ms=250.0, hold_bytes=1 << 30)


@dataclass
class Case:
    """One op under one group of settings, and what solforge should make of it."""

    name: str
    build: Callable[[float], tuple[nn.Module, list[torch.Tensor]]]  # scale -> (model, inputs)
    flops: Callable[[float], float]  # the tensor FLOPs by hand, at that scale
    precision: str  # the class a problem with this reference would declare
    expect: str  # the unit the bound should assume
    cudnn_tf32: bool | None = None  # None: PyTorch's default
    matmul_precision: str | None = None
    sdpa_math_only: bool = False
    notes: list[str] = field(default_factory=list)


def _n(x: int, scale: float) -> int:
    return max(1, int(x * scale))


class ConvReluBias(nn.Module):
    """KernelBench level 2, 1_Conv2D_ReLU_BiasAdd."""

    def __init__(self, cin: int, cout: int, k: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k)
        self.bias = nn.Parameter(torch.randn(cout, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


class Fn(nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _conv2d(s: float):
    b, h = _n(128, s), _n(128, s)
    return ConvReluBias(64, 128, 3), [torch.randn(b, 64, h, h)]


def _conv2d_flops(s: float) -> float:
    b, h = _n(128, s), _n(128, s)
    return 2.0 * b * 128 * 64 * 9 * (h - 2) ** 2


def _convT(s: float):
    return nn.ConvTranspose2d(256, 128, 3, stride=2), [torch.randn(_n(64, s), 256, 64, 64)]


def _convT_flops(s: float) -> float:  # transposed: per input point
    return 2.0 * _n(64, s) * 256 * 128 * 9 * 64 * 64


def _conv3d(s: float):
    return nn.Conv3d(64, 64, 3), [torch.randn(_n(8, s), 64, 32, 64, 64)]


def _conv3d_flops(s: float) -> float:
    return 2.0 * _n(8, s) * 64 * 64 * 27 * 30 * 62 * 62


def _conv1d(s: float):
    return nn.Conv1d(512, 512, 3), [torch.randn(_n(64, s), 512, 4096)]


def _conv1d_flops(s: float) -> float:
    return 2.0 * _n(64, s) * 512 * 512 * 3 * 4094


def _matmul(n: int, dtype: torch.dtype):
    def build(s: float):
        m = _n(n, s)
        return Fn(torch.matmul), [torch.randn(m, m, dtype=dtype), torch.randn(m, m, dtype=dtype)]
    return build


def _matmul_flops(n: int) -> Callable[[float], float]:
    return lambda s: 2.0 * _n(n, s) ** 3


def _einsum(s: float):
    b = _n(32, s)
    return (Fn(lambda x, y: torch.einsum("bij,bjk->bik", x, y)),
            [torch.randn(b, 1024, 2048), torch.randn(b, 2048, 1024)])


def _einsum_flops(s: float) -> float:
    return 2.0 * _n(32, s) * 1024 * 2048 * 1024


def _sdpa(b: int, h: int, seq: int, d: int, dtype: torch.dtype):
    def build(s: float):
        q, k, v = (torch.randn(_n(b, s), h, seq, d, dtype=dtype) for _ in range(3))
        return Fn(F.scaled_dot_product_attention), [q, k, v]
    return build


def _sdpa_flops(b: int, h: int, seq: int, d: int) -> Callable[[float], float]:
    return lambda s: 4.0 * _n(b, s) * h * seq * seq * d


def _lstm(s: float):
    return nn.LSTM(1024, 1024, num_layers=2), [torch.randn(256, _n(128, s), 1024)]


def _lstm_flops(s: float) -> float:  # every weight matrix on every token, both layers
    return 2.0 * 256 * _n(128, s) * 2 * (4 * 1024 * 1024 * 2)


CASES = [
    Case("conv2d_fp32", _conv2d, _conv2d_flops, "fp32", "tf32",
         notes=["KernelBench level2 1_Conv2D_ReLU_BiasAdd; the 2026-12 bug: bounded at fp32"]),
    Case("conv2d_fp32_tf32_off", _conv2d, _conv2d_flops, "fp32", "fp32", cudnn_tf32=False),
    Case("conv_transpose2d_fp32", _convT, _convT_flops, "fp32", "tf32"),
    Case("conv3d_fp32", _conv3d, _conv3d_flops, "fp32", "tf32"),
    Case("conv1d_fp32", _conv1d, _conv1d_flops, "fp32", "tf32"),
    Case("matmul_fp32", _matmul(4096, torch.float32), _matmul_flops(4096), "fp32", "fp32"),
    Case("matmul_fp32_high", _matmul(8192, torch.float32), _matmul_flops(8192), "fp32", "tf32",
         matmul_precision="high"),
    Case("einsum_fp32_high", _einsum, _einsum_flops, "fp32", "tf32", matmul_precision="high"),
    Case("matmul_bf16", _matmul(8192, torch.bfloat16), _matmul_flops(8192), "bf16", "bf16"),
    Case("sdpa_fp32", _sdpa(8, 16, 2048, 64, torch.float32), _sdpa_flops(8, 16, 2048, 64),
         "fp32", "3xtf32"),
    Case("sdpa_fp32_math", _sdpa(2, 16, 2048, 64, torch.float32), _sdpa_flops(2, 16, 2048, 64),
         "fp32", "fp32", sdpa_math_only=True),
    Case("sdpa_bf16", _sdpa(8, 16, 4096, 128, torch.bfloat16), _sdpa_flops(8, 16, 4096, 128),
         "bf16", "bf16"),
    Case("lstm_fp32", _lstm, _lstm_flops, "fp32", "tf32"),
]


@contextlib.contextmanager
def settings(case: Case) -> Iterator[None]:
    """The case's PyTorch settings for the block, then what was there before."""
    old_precision = torch.get_float32_matmul_precision()
    old_tf32 = torch.backends.cudnn.allow_tf32
    with contextlib.ExitStack() as stack:
        if case.matmul_precision is not None:
            torch.set_float32_matmul_precision(case.matmul_precision)
        if case.cudnn_tf32 is not None:
            torch.backends.cudnn.allow_tf32 = case.cudnn_tf32
        if case.sdpa_math_only:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(old_precision)
            torch.backends.cudnn.allow_tf32 = old_tf32


def _profiles(device_name: str) -> dict[str, DeviceProfile]:
    """The stored calibration (if any) and the datasheet row (if any) of ``device_name``."""
    out: dict[str, DeviceProfile] = {}
    spec = match_device(device_name)
    if spec is not None:
        out["datasheet"] = profile_from_spec(spec, device_name)
    stored = load_profile(device_name) if device_name != "cpu" else None
    if stored is not None and stored.source == "calibrated":
        out["calibrated"] = stored
    return out


def run_case(case: Case, device: torch.device, profiles: dict[str, DeviceProfile],
             scale: float, timed: bool) -> dict:
    torch.manual_seed(0)
    with settings(case):
        with torch.device(device):
            model, inputs = case.build(scale)
        model = model.to(device).eval()
        flags = read_math_flags()
        work = count_work(model, inputs)
        row: dict = {"case": case.name, "precision": case.precision, "expect_unit": case.expect,
                     "flags": dataclasses.asdict(flags), "tensor_flops": work.tensor_flops,
                     "expected_flops": case.flops(scale), "bytes": work.bytes,
                     "parts": [p.model_dump() for p in work.tensor], "notes": case.notes}
        row["count_ok"] = math.isclose(work.tensor_flops, row["expected_flops"], rel_tol=0.01)
        if timed:
            def call(*xs):
                with torch.no_grad():
                    return model(*xs)
            t = measure(call, [inputs], device, TIMING)
            row.update(kernel_ms=t.median_kernel_ms, latency_ms=t.median_latency_ms,
                       kernels=t.kernels, timed_calls=len(t.kernel_ms))
        oks = []
        for label, profile in profiles.items():
            sol_ms, bound = sol_time(work, profile, case.precision, flags)
            compute_ms = compute_time(work, profile, case.precision, flags)
            terms = tensor_terms(work, profile, case.precision, flags)
            entry = {"sol_ms": sol_ms, "bound": bound, "compute_ms": compute_ms,
                     "units": [t.unit for t in terms],
                     "reasons": [f"{t.what}: {t.unit} ({t.why})" for t in terms]}
            t_k = row.get("kernel_ms")
            if t_k is not None:
                floor = sol_ms * (1 - CALIBRATION_SHORTFALL if label == "calibrated" else 1)
                entry["ratio"] = t_k / sol_ms
                entry["faster_than_sol"] = faster_than_sol(t_k, sol_ms, work.bytes,
                                                           profile.llc_bytes, compute_ms)
                entry["ok"] = t_k >= floor and not entry["faster_than_sol"]
                oks.append(entry["ok"])
            row[label] = entry
        label = next(iter(profiles), None)  # the datasheet row where there is one
        row["unit"] = "+".join(row[label]["units"]) if label else None
        row["unit_ok"] = row["unit"] == case.expect
        row["ok"] = all(oks) if oks else None
    return row


def _line(row: dict) -> str:
    """One row of the table: unit ('!' if not the expected one), kernel time, each bound and
    the time's ratio to it, kernels named tf32, the verdict."""
    def f(x: float | None, spec: str = ".3f") -> str:
        return "-" if x is None else format(x, spec)

    ds, cal = row.get("datasheet", {}), row.get("calibrated", {})
    tf32 = "tf32" if any("tf32" in k for k in row.get("kernels", [])) else ""
    verdict = "-" if row["ok"] is None else ("ok" if row["ok"] else "FAIL")
    unit = str(row["unit"]) + ("" if row["unit_ok"] else "!")
    return (f"{row['case']:24s} {unit:8s} {f(row.get('kernel_ms')):>9s} "
            f"{f(ds.get('sol_ms')):>9s} {f(ds.get('ratio'), '.2f'):>6s} "
            f"{f(cal.get('sol_ms')):>9s} {f(cal.get('ratio'), '.2f'):>6s} "
            f"{'' if row['count_ok'] else 'COUNT!':6s} {tf32:4s} {verdict}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="no GPU: build each case small "
                    "on the CPU, count it and resolve its unit on the H200 datasheet row")
    ap.add_argument("--out", default=None, help="JSON path (default $OUT/sol_units.json "
                    "when OUT is set)")
    args = ap.parse_args(argv)
    dry = args.dry_run
    if not dry and not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run for the CPU-safe parts", file=sys.stderr)
        return 2
    device = torch.device("cpu" if dry else "cuda")
    name = "NVIDIA H200" if dry else torch.cuda.get_device_name()
    profiles = _profiles(name)
    t0 = time.perf_counter()
    rows = []
    print(f"{'case':24s} {'unit':8s} {'kernel ms':>9s} {'sheet SOL':>9s} {'ratio':>6s} "
          f"{'cal SOL':>9s} {'ratio':>6s} {'':6s} {'':4s} verdict")
    for case in CASES:
        try:
            row = run_case(case, device, profiles, scale=1 / 16 if dry else 1.0,
                           timed=not dry)
        except Exception as e:  # noqa: BLE001  (one case's failure is reported, not fatal)
            row = {"case": case.name, "error": f"{type(e).__name__}: {e}", "ok": False}
            print(f"{case.name:24s} ERROR {row['error'][:120]}")
        else:
            print(_line(row))
        rows.append(row)
        if not dry:  # the next case's buffers: up to 2 GB each
            torch.cuda.empty_cache()
    result = {
        "schema": "solforge.sol_units/1", "device": name, "dry_run": dry,
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "profiles": {k: p.model_dump(mode="json", by_alias=True) for k, p in profiles.items()},
        "calibration_shortfall": CALIBRATION_SHORTFALL, "seconds": time.perf_counter() - t0,
        "cases": rows,
        "ok": all(r.get("ok") is not False for r in rows),
    }
    out = args.out or (str(Path(os.environ["OUT"]) / "sol_units.json")
                       if os.environ.get("OUT") else None)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1, default=str))
    failed = [r["case"] for r in rows if r.get("ok") is False]
    mismatched = [r["case"] for r in rows if r.get("unit_ok") is False]
    miscounted = [r["case"] for r in rows if r.get("count_ok") is False]
    print(f"{len(rows)} cases in {result['seconds']:.1f} s; bound beaten: {failed or 'none'}; "
          f"unit other than expected (!): {mismatched or 'none'}; count off: "
          f"{miscounted or 'none'}" + (f"; JSON: {out}" if out else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
