"""The judge's own device memory: let go of it after every evaluation, measure what is left,
and say when the process must be replaced because it cannot return to its idle level.

One judge serves many evaluations; an evaluation that leaves memory behind becomes the
next candidate's out-of-memory verdict (on KernelBench at its real sizes, a judge that
kept what follows ran every later evaluation out of memory: benchmarks/results/FINDINGS.md,
"judge memory"; fixed and measured in ``benchmarks/results/2026-12-03-h200-s12``). What a
judge can hold:

- blocks it sent to a runner over CUDA IPC: PyTorch keeps a sent block alive (in its
  "limbo") until the receiving process drops its view and this process collects
  (``torch.cuda.ipc_collect``); a runner killed while it still holds a view never drops
  it, and the block is never freed;
- compiled baselines (dynamo's caches, CUDA graph pools), the caching allocator's free
  blocks, cuBLAS workspaces, Python cycles that keep tensors alive;
- anything a library or a problem file stashes in a module that outlives the evaluation.

:func:`release` lets go of all it can; :func:`snapshot` measures what is left
(``JudgeMemory``): the caching allocator's reserved bytes on a GPU, and on every device the
bytes of tensors still reachable from Python. :class:`MemoryWatch` keeps the judge's idle
floor (its level when it started) and says when the level after a release stays above it
by more than :func:`slack_mb`: the judge is then replaced before the next evaluation.

Not covered: memory a native library allocates outside PyTorch's allocator and its
tensors (a CUDA extension's own ``cudaMalloc``) is not measured; host memory of the
judge is not a criterion (only tensors are counted on a CPU).
"""

from __future__ import annotations

import gc
import os
from typing import Any

import torch

from solforge import env
from solforge.records.evaluation import JudgeMemory

MB = float(1 << 20)
SLACK_ENV = env.JUDGE_SLACK_MB
# the module names ``problems.loader.import_file`` gives the judge's problem imports
PROBLEM_MODULE_PREFIXES = ("solforge_reference_", "solforge_problem_")


def is_out_of_memory(exc_or_text: BaseException | str) -> bool:
    """True for device out-of-memory errors (PyTorch's ``OutOfMemoryError`` and CUDA's
    ``out of memory`` from a kernel launch or a library), not host memory errors."""
    if isinstance(exc_or_text, BaseException):
        if type(exc_or_text).__name__ == "OutOfMemoryError":
            return True
        exc_or_text = f"{type(exc_or_text).__name__}: {exc_or_text}"
    text = str(exc_or_text)
    return ("OutOfMemoryError" in text or "CUDA out of memory" in text
            or "CUDA error: out of memory" in text or "CUBLAS_STATUS_ALLOC_FAILED" in text
            or "CUDNN_STATUS_ALLOC_FAILED" in text or "GPU out of memory" in text)


def release_workload(device: str) -> None:
    """Between two workloads of one evaluation: give the freed GPU memory back to the
    driver (PyTorch's caching allocator keeps it reserved otherwise). Several evaluators
    share a GPU, and processes that each keep their largest workload's blocks leave an
    honest reference too little (``benchmarks/results/2026-12-01-h200-s6``). :func:`release` does this and more after a whole evaluation."""
    if device.startswith("cuda") and torch.cuda.is_initialized():
        gc.collect()
        torch.cuda.empty_cache()


def hand_over(device: str) -> None:
    """Before a request whose memory is the runner's (its timing loop, its batch): the
    judge's free cached blocks back to the driver, for the runner to take. The caching
    allocator keeps what the judge's trials freed reserved for the judge: on KernelBench's
    8 GB argmax the judge kept its trials' peak, 51 GB, while its runner asked for 8 GB
    more on an 80 GB H100 (benchmarks/results/2026-12-05-h100-s18). A few milliseconds;
    the collection of Python cycles is left to :func:`release`."""
    if device.startswith("cuda") and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def release(device: str) -> None:
    """Let go of everything the judge holds between evaluations: compiled graphs, Python
    cycles, blocks sent over CUDA IPC whose receivers are done, free cached blocks and
    cuBLAS workspaces. Costs about 0.1-0.3 s (a full garbage collection)."""
    import sys

    # problem files are imported afresh by every evaluation: the last one's module (and
    # any tensor it keeps at module level) is not needed any more
    for name in [n for n in sys.modules if n.startswith(PROBLEM_MODULE_PREFIXES)]:
        del sys.modules[name]
    if "torch._dynamo" in sys.modules:
        # the compile baselines' graphs (and any CUDA graph pool) die with their caches
        sys.modules["torch._dynamo"].reset()
    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.ipc_collect()
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        torch.cuda.empty_cache()


_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)


def _subclasses() -> set[type]:
    """Every tensor subclass defined so far (buffers, FakeTensor, a library's own)."""
    out: set[type] = set()
    todo = list(torch.Tensor.__subclasses__())
    while todo:
        c = todo.pop()
        if c not in out:
            out.add(c)
            todo += c.__subclasses__()
    return out


def live_tensor_mb(device: str) -> float:
    """MiB of tensor storage on ``device`` still reachable from Python (each storage once):
    what a leak of tensors looks like, on a CPU as on a GPU (IPC views included)."""
    want = torch.device(device).type
    seen: set[tuple[int, int]] = set()
    total = 0
    # by exact type: isinstance on torch.Tensor goes through a slow metaclass check
    kinds = set(_TENSOR_TYPES) | _subclasses()
    for o in gc.get_objects():
        if type(o) not in kinds:
            continue
        try:
            if o.device.type != want or o.is_meta:
                continue
            st = o.untyped_storage()
            key = (st.data_ptr(), st.nbytes())
        except Exception:  # noqa: BLE001 - sparse, nested or otherwise exotic tensors
            continue
        if key in seen or key[0] == 0:
            continue
        seen.add(key)
        total += key[1]
    return total / MB


def snapshot(device: str) -> dict[str, float | None]:
    """What the judge holds now: reserved and allocated (GPU allocator) and live tensors."""
    out: dict[str, float | None] = {"reserved_mb": None, "allocated_mb": None,
                                    "live_tensors_mb": round(live_tensor_mb(device), 1)}
    if device.startswith("cuda") and torch.cuda.is_initialized():
        out["reserved_mb"] = round(torch.cuda.memory_reserved() / MB, 1)
        out["allocated_mb"] = round(torch.cuda.memory_allocated() / MB, 1)
    return out


def level(snap: dict[str, float | None]) -> float:
    """The one figure the idle floor is compared on: the allocator's reserved bytes on a
    GPU (tensors, fragmentation and pools alike), else the live tensors."""
    r = snap.get("reserved_mb")
    live = snap.get("live_tensors_mb") or 0.0
    return max(float(r), live) if r is not None else float(live)


def slack_mb(device: str) -> float:
    """How far above its floor a judge's idle level may stay: ``SOLFORGE_JUDGE_SLACK_MB``,
    else 1 GiB on a GPU (a library's lazily created handles and workspaces are tens of
    MiB; a leaked KernelBench input set is gigabytes) and 256 MiB on a CPU."""
    given = env.judge_slack_mb()
    if given is not None:
        return given
    return 1024.0 if device.startswith("cuda") else 256.0


class MemoryWatch:
    """The judge's memory across its evaluations: its floor, the last idle level, and
    whether it is still fit to serve."""

    def __init__(self, device: str) -> None:
        self.device = device
        release(device)
        self.floor = level(snapshot(device))
        self.idle: dict[str, float | None] = snapshot(device)
        self.unfit: str | None = None
        self.peak = 0.0

    def _gpu(self) -> bool:
        return self.device.startswith("cuda") and torch.cuda.is_initialized()

    def begin(self) -> None:
        """An evaluation starts: its peak is counted from here."""
        self.peak = 0.0
        if self._gpu():
            torch.cuda.reset_peak_memory_stats()

    def workload_peak(self, reset: bool = False) -> float | None:
        """MiB the judge allocated at most since the last reset (GPU only); ``reset``
        starts a new window (a workload's), keeping the evaluation's peak."""
        if not self._gpu():
            return None
        got = torch.cuda.max_memory_allocated() / MB
        self.peak = max(self.peak, torch.cuda.max_memory_reserved() / MB)
        if reset:
            torch.cuda.reset_peak_memory_stats()
        return got

    def figures(self) -> JudgeMemory:
        """This evaluation's figures: the idle level it started from, and its peak."""
        peak = None
        if self._gpu():
            peak = round(max(self.peak, torch.cuda.max_memory_reserved() / MB), 1)
        return JudgeMemory(pid=os.getpid(), floor_mb=round(self.floor, 1),
                           idle_before_mb=round(level(self.idle), 1),
                           live_tensors_before_mb=self.idle.get("live_tensors_mb"),
                           peak_mb=peak, **device_totals())

    def settle(self) -> str | None:
        """After an evaluation: release, measure; a reason to replace the judge, or None."""
        release(self.device)
        self.idle = snapshot(self.device)
        now = level(self.idle)
        self.floor = min(self.floor, now)
        if now > self.floor + slack_mb(self.device):
            self.unfit = (f"the judge still held {now:.0f} MiB after releasing everything "
                          f"it could (its idle level is {self.floor:.0f} MiB, live tensors "
                          f"{self.idle.get('live_tensors_mb')} MiB): replaced before the "
                          "next evaluation")
        return self.unfit


def device_totals() -> dict[str, Any]:
    """Device-wide used and total MiB of the current GPU (every process), for records."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"device_used_mb": round((total - free) / MB, 1),
            "device_total_mb": round(total / MB, 1)}
