"""Measure a device's real ceilings: bandwidth, matmul rate per unit, empty-kernel time.

- Bandwidth: a large device-to-device copy, counting the bytes read plus the bytes written.
  The buffer is many times the last-level cache, so the copy streams from DRAM.
- Peak per unit: a large square matmul on random data (never zeros: tensor cores draw less
  power on zeros and clock higher, which overstates the rate: bf16 894 against 788 TFLOP/s,
  benchmarks/results/2026-11-30-h200). CUDA: fp32 with TF32 off (the
  SIMT rate, also the bound for elementwise work), tf32, bf16, fp16, fp8 through
  ``torch._scaled_mm`` and int8 through ``torch._int_mm`` where this GPU and PyTorch have them.
  CPU: fp32, and bf16 where it runs.
- Empty kernel: CUDA, the device time per launch of a 1-element op, taken from CUDA events
  around the replay of a CUDA graph of many such launches (the graph removes the host's launch
  cost, so this is what the GPU itself needs per kernel); CPU, the cost of one trivial op call.

Each figure is the best of several timed batches: a ceiling is the fastest rate the device was
seen to sustain, so a bound computed from it stays a lower bound. Sizes are fixed per device
kind: on a GPU 8192-cubed and long-K (8192x16384x4096) GEMMs, the faster of the two per
unit, and a 2 GiB copy (``quick``: 4096 and 1 GiB); on a CPU 1024-cubed fp32 GEMMs and a
256 MiB copy, about five seconds in all (``quick``: one).

Not covered: fp4 and fp6 (no stable PyTorch entry point; the datasheet table keeps fp4),
sustained clocks under long load (each measurement lasts well under a second), other streams
or processes sharing the device (calibrate an idle device), and per-shape efficiency (a
skinny GEMM never reaches the square-GEMM rate; the roofline does not model that).
"""

from __future__ import annotations

import contextlib
import platform
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import torch

from solforge.sol.profile import DeviceProfile

GiB = 1024**3
MiB = 1024**2

# How far a calibrated rate may sit under what the unit sustains on other shapes: 8%.
# Measured: bf16 8192^3 calibrations at 774-804 TFLOP/s against 826 for cuBLAS's bf16 GEMM
# of linear_llama3_8b_down's prefill_m8192 (M 8192, K 14336, N 4096), 6.3% over the slowest
# (benchmarks/results/2026-12-02-h200-s10, calibration-call*.json and the runs' eager_ms).
# The slack covers tables calibrated on the square shape alone (those recorded there) and
# shapes faster than either. A wrong unit is off by 2x or more; the faster-than-light
# check's margin (IMPOSSIBLE_FRACTION) covers the rest.
CALIBRATION_SHORTFALL = 0.08


def calibrate(device: str = "cuda", *, quick: bool = False) -> DeviceProfile:
    """Measure ``device`` ('cpu', 'cuda' or 'cuda:N') and return its profile (not stored:
    ``profile.save_profile`` does that)."""
    if device == "cpu":
        return _calibrate_cpu(quick)
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise RuntimeError("calibrate: PyTorch sees no CUDA device; use --device cpu")
        return _calibrate_cuda(torch.device(device), quick)
    raise ValueError(f"calibrate: unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:N'")


# ----------------------------------------------------------------------------- CUDA

def _calibrate_cuda(dev: torch.device, quick: bool) -> DeviceProfile:
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(dev)
    notes: list[str] = []
    with torch.cuda.device(dev):
        free, _ = torch.cuda.mem_get_info(dev)
        copy_bytes = min(GiB if quick else 2 * GiB, free // 8)
        bandwidth = _cuda_bandwidth(dev, copy_bytes)
        n = 4096 if quick else 8192
        peaks: dict[str, float] = {}
        # a square GEMM and a long-K one (a Llama MLP's down projection has K 14336): the
        # unit's rate is the faster of the two; the square shape alone calibrates bf16 3-6%
        # under cuBLAS's long-K rate (benchmarks/results/2026-12-02-h200-s10)
        for m, k, nn in ((n, n, n), (n, 2 * n, n // 2)):
            for unit, make in _cuda_gemms(dev, (m, k, nn), props).items():
                try:
                    fn = make()
                    rate = 2 * m * k * nn / (_cuda_best_ms(fn, iters=10) * 1e9)
                    peaks[unit] = max(peaks.get(unit, 0.0), rate)
                except (RuntimeError, TypeError, AttributeError, NotImplementedError) as e:
                    if (m, k, nn) == (n, n, n):
                        notes.append(f"{unit}: not measured ({type(e).__name__}: "
                                     f"{str(e)[:120]})")
        notes += _drop_slow_low_precision(peaks)
        empty_ms = _cuda_empty_kernel_ms(dev)
    return DeviceProfile(
        name=props.name, source="calibrated", peaks_tflops=peaks, bandwidth_gbs=bandwidth,
        empty_kernel_ms=empty_ms, llc_bytes=getattr(props, "L2_cache_size", None) or None,
        measured_at=datetime.now(timezone.utc), torch_version=torch.__version__,
        host=(f"{props.name}, {props.multi_processor_count} SMs, compute capability "
              f"{props.major}.{props.minor}, {props.total_memory / GiB:.0f} GiB; "
              f"{n}^3 and {n}x{2 * n}x{n // 2} GEMMs, {copy_bytes / GiB:.1f} GiB copy"),
        notes=notes,
    )


def _drop_slow_low_precision(peaks: dict[str, float]) -> list[str]:
    """Drop an fp8 or int8 rate measured below the bf16 rate, and say why.

    On every NVIDIA GPU with these units they are at least as fast as bf16; a slower reading
    means PyTorch's entry point does not drive the unit well (``torch._int_mm``: 127-128
    TOP/s against 1,468 TFLOP/s for fp8, benchmarks/results/2026-11-30-h200). Kept, it
    would set the bound far too high and flag honest int8 kernels as faster than light;
    dropped, that unit's work is bounded by the next faster unit the profile has
    (``roofline._FALLBACK``).
    """
    notes, bf16 = [], peaks.get("bf16")
    for unit in ("fp8", "int8"):
        if bf16 and unit in peaks and peaks[unit] < bf16:
            notes.append(f"{unit}: measured {peaks.pop(unit):,.0f} TFLOP/s, below bf16's "
                         f"{bf16:,.0f}: PyTorch's {unit} GEMM does not reach this unit's "
                         f"ceiling, so {unit} work is bounded by a faster unit instead")
    return notes


def _cuda_best_ms(fn: Callable[[], object], iters: int, reps: int = 5) -> float:
    """Best per-call time over ``reps`` batches of ``iters`` calls, by CUDA events."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / iters)
    return best


def _cuda_bandwidth(dev: torch.device, nbytes: int) -> float:
    src = torch.randn(nbytes // 4, device=dev)
    dst = torch.empty_like(src)
    ms = _cuda_best_ms(lambda: dst.copy_(src), iters=10)
    return 2 * src.numel() * 4 / (ms * 1e6)  # read + write, GB/s


def _cuda_gemms(dev: torch.device, shape: tuple[int, int, int], props
                ) -> dict[str, Callable[[], Callable]]:
    """unit -> a function that allocates the operands of an (M, K) x (K, N) GEMM and
    returns the GEMM to time."""
    m, k, n = shape

    def float_gemm(dtype: torch.dtype, precision: str) -> Callable[[], Callable]:
        def make() -> Callable:
            a = torch.randn(m, k, device=dev, dtype=dtype)
            b = torch.randn(k, n, device=dev, dtype=dtype)

            def run() -> torch.Tensor:
                with _fp32_matmul_precision(precision):
                    return a @ b
            return run
        return make

    def fp8() -> Callable:
        if (props.major, props.minor) < (8, 9):
            raise RuntimeError("fp8 tensor cores need compute capability 8.9 or newer")
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()  # column-major operand
        one = torch.ones((), device=dev)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    def int8() -> Callable:
        a = torch.randint(-128, 128, (m, k), device=dev, dtype=torch.int8)
        b = torch.randint(-128, 128, (k, n), device=dev, dtype=torch.int8)
        return lambda: torch._int_mm(a, b)

    return {
        "fp32": float_gemm(torch.float32, "highest"),
        "tf32": float_gemm(torch.float32, "high"),
        "bf16": float_gemm(torch.bfloat16, "highest"),
        "fp16": float_gemm(torch.float16, "highest"),
        "fp8": fp8,
        "int8": int8,
    }


@contextlib.contextmanager
def _fp32_matmul_precision(precision: str) -> Iterator[None]:
    # "highest": fp32 GEMMs on the SIMT units; "high": TF32 tensor cores allowed.
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def _cuda_empty_kernel_ms(dev: torch.device, launches: int = 1000) -> float:
    x = torch.ones(1, device=dev)
    stream = torch.cuda.Stream(dev)
    stream.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(stream):
        for _ in range(3):
            x.add_(1)
    torch.cuda.current_stream(dev).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            x.add_(1)
    return _cuda_best_ms(graph.replay, iters=1) / launches


# ----------------------------------------------------------------------------- CPU

def _calibrate_cpu(quick: bool) -> DeviceProfile:
    threads = torch.get_num_threads()
    budget = 0.25 if quick else 1.5  # seconds per measurement
    notes: list[str] = []
    bandwidth = _cpu_bandwidth((64 if quick else 256) * MiB, budget)
    peaks: dict[str, float] = {}
    for unit, dtype, n in (("fp32", torch.float32, 512 if quick else 1024),
                           ("bf16", torch.bfloat16, 256 if quick else 512)):
        try:
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            peaks[unit] = 2 * n**3 / (_cpu_best_ms(lambda a=a, b=b: a @ b, budget) * 1e9)
        except (RuntimeError, NotImplementedError) as e:
            notes.append(f"{unit}: not measured ({type(e).__name__}: {str(e)[:120]})")

    x = torch.ones(1)
    empty_ms = _cpu_best_ms(lambda: x.add_(1), budget / 4)
    return DeviceProfile(
        name="cpu", source="calibrated", peaks_tflops=peaks, bandwidth_gbs=bandwidth,
        empty_kernel_ms=empty_ms, llc_bytes=_cpu_llc_bytes(),
        measured_at=datetime.now(timezone.utc), torch_version=torch.__version__,
        host=f"{_cpu_model()}, {threads} torch threads", notes=notes,
    )


def _cpu_bandwidth(nbytes: int, budget_s: float) -> float:
    src = torch.randn(nbytes // 4)
    dst = torch.empty_like(src)
    ms = _cpu_best_ms(lambda: dst.copy_(src), budget_s)
    return 2 * src.numel() * 4 / (ms * 1e6)  # read + write, GB/s


def _cpu_best_ms(fn: Callable[[], object], budget_s: float, reps: int = 10) -> float:
    """Best per-call time over ``reps`` batches sized to fill ``budget_s`` together (many
    short batches: on a shared machine the best one is the least disturbed)."""
    t0 = time.perf_counter()
    fn()  # warm-up, and a first estimate of one call
    once = max(time.perf_counter() - t0, 1e-7)
    iters = max(1, int(budget_s / reps / once))
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best * 1e3


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def _cpu_llc_bytes() -> int | None:
    """Size of the highest-level data cache of CPU 0 (Linux sysfs); None elsewhere."""
    best: tuple[int, int] | None = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        with contextlib.suppress(OSError, ValueError):
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            size = _parse_size((index / "size").read_text().strip())
            if best is None or level > best[0]:
                best = (level, size)
    return best[1] if best else None


def _parse_size(text: str) -> int:
    units = {"K": 1024, "M": MiB, "G": GiB}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)
