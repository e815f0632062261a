"""The 3xTF32 GEMM (``kernels/triton/gemm_f32x3.py``) against cuBLAS at fp32, TF32 and
torch.compile, on the fp32 GEMM shapes of KernelBench problems, with its error.

For each shape it checks ``matmul_f32x3`` (and ``linear_f32x3`` where the shape is a linear
layer's) against a float64 product: the max error relative to the largest output, beside
cuBLAS fp32's own and plain TF32's (``torch.backends.cuda.matmul.allow_tf32``), and
``allclose`` at KernelBench's 1e-4 against cuBLAS fp32. Times are CUDA-event medians (3
warm-up calls, then 10; the first call autotunes): cuBLAS fp32 (``a @ b``), the same under
TF32 (for reference: it fails the tolerance), ``torch.compile(max-autotune-no-cudagraphs)``
of the same product (its Triton templates honour ``allow_tf32=False``), the kernel at
tf32x3, and the kernel at ``ieee`` (the same tiles on the SIMT units). TFLOP/s count
2*M*N*K. A step that fails is recorded, not raised. About 60-90 s on an H100.

Usage (GPU machine, repository root): python3 benchmarks/gpu/gemm_probe.py --json OUT.json
``--shapes M,N,K[,B];...`` replaces the default list; ``--no-compile`` skips compile.
On a CPU it runs a dry run on small shapes (interpreter, wall times), to check the script.
Not covered: the epilogues (bias and activation are timed only in the ``linear`` rows),
batched shapes other than the one listed, bf16 (cuBLAS is at its bound there).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

GPU = torch.cuda.is_available()
if not GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from solforge.kernels.triton.gemm_f32x3 import linear_f32x3, matmul_f32x3  # noqa: E402

# (name, M, N, K, batch, linear?): KernelBench level 1 1_Square (N=2048*2) and
# 6_Matmul_with_large_K_dimension_, level 2
# 12_Gemm_Multiply_LeakyReLU and 99_Matmul_GELU_Softmax (linear layers), level 3
# 3_DeepNarrowMLP's widest layer, MinGPT's c_attn (batch*seq rows), a bmm
DEFAULT = [("kb1_square", 4096, 4096, 4096, 1, False),
           ("kb2_12_gemm", 1024, 8192, 8192, 1, True),
           ("kb2_99_linear_gelu", 1024, 8192, 8192, 1, True),
           ("mingpt_c_attn", 65536, 2304, 768, 1, True),
           ("bmm_16x1024", 1024, 1024, 1024, 16, False),
           ("skinny_k", 8192, 8192, 256, 1, False),
           ("kb1_6_large_k", 256, 256, 524288, 1, False)]  # 16 tiles of 64x64: split-K
SMALL = [("dry_square", 96, 80, 72, 1, False), ("dry_linear", 64, 48, 40, 1, True)]


def _time(fn, warmup: int = 3, iters: int = 10) -> float:
    if not GPU:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def _rel(y: torch.Tensor, exact: torch.Tensor) -> float:
    return ((y.double() - exact).abs().max() / exact.abs().max()).item()


def probe(name: str, m: int, n: int, k: int, batch: int, linear: bool, compile_: bool) -> dict:
    dev = "cuda" if GPU else "cpu"
    torch.manual_seed(0)
    out: dict = {"name": name, "M": m, "N": n, "K": k, "batch": batch, "linear": linear}
    shape_a = (batch, m, k) if batch > 1 else (m, k)
    a = torch.randn(*shape_a, device=dev)
    if linear:
        w = torch.randn(n, k, device=dev) / k ** 0.5
        bias = torch.randn(n, device=dev)
        b = w.t()
    else:
        b = torch.randn(*((batch, k, n) if batch > 1 else (k, n)), device=dev)
    flops = 2.0 * m * n * k * batch
    exact = a.double() @ b.double()
    ref = a @ b
    out["err_cublas_fp32"] = _rel(ref, exact)
    steps = {
        "cublas_fp32": lambda: a @ b,
        "f32x3": lambda: matmul_f32x3(a, b),
        "ieee": lambda: matmul_f32x3(a, b, precision="ieee"),
    }
    if linear:
        steps["linear_f32x3_bias_gelu"] = lambda: linear_f32x3(a, w, bias, "gelu")
        steps["eager_linear_bias_gelu"] = lambda: torch.nn.functional.gelu(
            torch.nn.functional.linear(a, w, bias))
    for label, fn in steps.items():
        try:
            y = fn()
            if label in ("f32x3", "ieee"):
                out[f"err_{label}"] = _rel(y, exact)
                out[f"allclose_1e-4_{label}"] = bool(torch.allclose(y, ref, rtol=1e-4, atol=1e-4))
            ms = _time(fn)
            out[f"{label}_ms"] = round(ms, 4)
            out[f"{label}_tflops"] = round(flops / (ms * 1e9), 1)
        except Exception as e:  # recorded, the next step runs
            out[f"{label}_error"] = f"{type(e).__name__}: {e}"[:400]
    if GPU:
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            out["err_tf32"] = _rel(a @ b, exact)
            out["allclose_1e-4_tf32"] = bool(torch.allclose(a @ b, ref, rtol=1e-4, atol=1e-4))
            out["cublas_tf32_ms"] = round(_time(lambda: a @ b), 4)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
        if compile_:
            try:
                fn = torch.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs")
                fn(a, b)
                out["compile_max_autotune_ms"] = round(_time(lambda: fn(a, b)), 4)
            except Exception as e:
                out["compile_error"] = f"{type(e).__name__}: {e}"[:400]
    if out.get("f32x3_ms") and out.get("cublas_fp32_ms"):
        out["speedup_vs_cublas_fp32"] = round(out["cublas_fp32_ms"] / out["f32x3_ms"], 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--shapes", default="")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    shapes = DEFAULT if GPU else SMALL
    if args.shapes:
        shapes = []
        for i, s in enumerate(args.shapes.split(";")):
            m, n, k, *b = (int(v) for v in s.split(","))
            shapes.append((f"shape{i}", m, n, k, b[0] if b else 1, False))
    rows: list[dict] = []
    info = {"device": torch.cuda.get_device_name() if GPU else "cpu (dry run)",
            "torch": torch.__version__, "rows": rows}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        pass
    for shape in shapes:
        t = time.time()
        try:
            row = probe(*shape, compile_=not args.no_compile)
        except Exception:
            row = {"name": shape[0], "error": traceback.format_exc()[-800:]}
        row["probe_s"] = round(time.time() - t, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        # after every shape: a timeout (session 22's 150 s: max-autotune took 54 s on the
        # first shape) keeps the rows measured so far
        Path(args.json).write_text(json.dumps(info, indent=1))
    Path(args.json).write_text(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
