"""The policy: may a solution hand the work back to PyTorch, call the reference, hide a
fallback? ``default`` allows it and says so (flags); ``strict`` rejects it (REWARD_HACK).

Strict is for RL rewards and leaderboards, where "a Triton solution" must mean Triton
kernels did the work (CUDA Agent forbids ``torch.nn.functional`` fallbacks; EVALUATION.md).
Every rule produces a :class:`~solforge.records.evaluation.Finding` (rule, flag, line or
workload, a sentence) so a verdict can be checked by reading the code it points at.

Flags and the rules behind them:

``torch_fallback`` (only for languages whose point is their own kernels: triton,
  cuda_cpp, cute_dsl; PyTorch is the language of a ``pytorch`` solution, not a fallback)
  - static ``no_own_kernel`` (``bench/policy/static.py``): ``forward`` reaches no kernel of the
    solution's own and computes with PyTorch;
  - dynamic ``aten_coverage`` (CPU and GPU): one call of the candidate, traced at the
    ATen level, ran every compute operation of the reference at least as many times as
    the reference does (``addmm`` x1, ``gelu`` x1, ``mul`` x1...), each on at least half
    as much data: whatever kernel of its own it launched replaced none of the
    reference's work (a decoy). Allocation, views, copies and dtype casts are not
    compute; GEMM flavours (mm/addmm/bmm/linear) count as one operation. A cuBLAS GEMM
    beside an own fused epilogue does not cover the reference (the epilogue's operations
    are missing), nor does a PyTorch ``sum`` over a kernel's partial results (too little
    data), so it never fires on those;
  - dynamic ``library_kernels_only`` (GPU): every kernel one timed call launched is a
    library kernel (ATen ``at::native``, cuBLAS/cuBLASLt, cuDNN, PyTorch's attention,
    inductor's generated ``triton_poi/per/red/tem_*``). Unknown names count as the
    solution's own, so an unusual honest kernel is never called a library's.
``calls_reference``
  - static ``import``: imports the problem module, the loader, or names the problem file;
  - dynamic ``executed``: code from the problem's file ran during the candidate's call
    (an interpreter profile hook on one traced call, on the calling thread and threads it
    starts: however the reference was reached: import, re-execution, subclassing).
``hidden_fallback`` (static): ``try``/``except`` or a failure-flag/device branch with the
  solution's kernel on one side and PyTorch on the other.
``harness_access`` (static): imports ``solforge.bench``, walks frames, scans the heap,
  reads ``sys.modules``, installs trace hooks, swaps ``__code__``, monkey-patches.

The dynamic rules run in the runner, so a candidate can hide from them (notice the trace
and take another path); they are evidence like the harness snapshot. What they cannot
change are the judge's checks (outputs, its own clock), which decide everything that
is not a question of policy.

Not covered: work PyTorch does through a solution-written graph (``torch.fx``, inductor
on a hand-written graph), a fallback chosen by shape (that is allowed: the rule for the
workload where PyTorch did everything is ``aten_coverage``), threads that existed before
the traced call (Python 3.11 cannot hook them).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from solforge.records.evaluation import Finding, Status

POLICIES = ("default", "strict")

# ATen operations that move, view, allocate or describe data: no arithmetic of the problem
_NOT_COMPUTE = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "t", "transpose",
    "permute", "expand", "expand_as", "squeeze", "unsqueeze", "flatten", "unflatten",
    "slice", "select", "narrow", "split", "split_with_sizes", "chunk", "unbind", "alias",
    "detach", "view_as", "diagonal", "movedim", "numpy_T", "unfold", "view_as_real",
    "view_as_complex", "lift_fresh", "lift_fresh_copy", "conj", "_conj", "resolve_conj",
    "resolve_neg", "clone", "copy_", "_to_copy", "to", "_copy_from",
    "_copy_from_and_resize", "empty", "empty_like", "empty_strided", "new_empty",
    "new_empty_strided", "zeros", "zeros_like", "new_zeros", "ones", "ones_like",
    "new_ones", "full", "full_like", "new_full", "fill_", "fill", "zero_", "arange",
    "scalar_tensor", "_local_scalar_dense", "item", "is_same_size", "size", "stride",
    "sym_size", "sym_stride", "sym_numel", "set_", "resize_", "contiguous", "dim",
    "is_nonzero", "_has_compatible_shallow_copy_type", "record_stream", "_pin_memory",
    "pin_memory", "is_pinned", "equal", "allclose", "_assert_async", "_foreach_copy_",
    "_unsafe_index", "index_select_backward",
}
_GEMM = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_addmm_activation",
         "addmv", "mv", "dot", "addbmm", "_scaled_mm", "_int_mm", "einsum"}


def normalise_op(name: str) -> str | None:
    """An ATen op name as the coverage rule compares it; None when it is not compute."""
    base = name.split(".")[0]
    if base in _NOT_COMPUTE:
        return None
    if base in _GEMM:
        return "gemm"
    if base.startswith("conv") or base in ("_convolution", "convolution", "cudnn_convolution",
                                           "mkldnn_convolution"):
        return "convolution"
    base = base.lstrip("_")
    base = base.removeprefix("native_")
    if base.endswith("_") and not base.endswith("__"):
        base = base[:-1]
    return base or None


@dataclass
class AtenTrace:
    """Per compute operation: how many times it ran, and how many tensor elements its
    inputs held in total (the amount of data it worked on)."""

    counts: Counter[str] = field(default_factory=Counter)
    elements: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> dict[str, dict[str, int]]:
        return {"counts": dict(self.counts), "elements": dict(self.elements)}

    @classmethod
    def from_json(cls, data: dict[str, dict[str, int]]) -> AtenTrace:
        return cls(Counter(data.get("counts", {})), Counter(data.get("elements", {})))


def _numel(xs: Any) -> int:
    import torch

    if isinstance(xs, torch.Tensor):
        return xs.numel()
    if isinstance(xs, (list, tuple)):
        return sum(_numel(x) for x in xs)
    if isinstance(xs, dict):
        return sum(_numel(x) for x in xs.values())
    return 0


@contextlib.contextmanager
def _eager_stance() -> Iterator[None]:
    """TorchDynamo kept out of the traced call: a compiled function called under a
    dispatch mode ran eagerly from then on, so a Triton solution that compiles its glue
    was timed as eager code after the policy probe (KernelBench's ReLU self-attention,
    3xTF32 GEMMs compiled around: ATen's kernels in every timed call on an H100,
    benchmarks/results/2026-12-07-h100-s32). Under ``force_eager`` the trace runs the
    same eager operations and the compiled program stays as it was; a torch without
    stances resets TorchDynamo after the trace (the next call compiles again)."""
    import torch

    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is not None:
        with set_stance("force_eager"):
            yield
        return
    try:
        yield
    finally:
        if "torch._dynamo" in sys.modules:
            torch._dynamo.reset()


def aten_trace(fn: Callable[[], Any]) -> AtenTrace:
    """Run ``fn`` under a dispatch mode, TorchDynamo kept out (:func:`_eager_stance`);
    record the compute ATen operations it ran."""
    from torch.utils._python_dispatch import TorchDispatchMode

    trace = AtenTrace()

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ns, _, op = str(func.name()).partition("::")
            if ns in ("aten", "prims"):
                key = normalise_op(op)
                if key:
                    trace.counts[key] += 1
                    trace.elements[key] += _numel(args) + _numel(kwargs or {})
            return func(*args, **(kwargs or {}))

    with _eager_stance(), _Count():
        fn()
    return trace


class ReferenceTripwire:
    """Counts calls into functions defined in the problem's file while active."""

    def __init__(self, problem_file: str | os.PathLike[str]) -> None:
        self.target = os.path.realpath(str(problem_file))
        self.calls = 0
        self.where: list[str] = []
        self._seen: dict[str, bool] = {}

    def _hook(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        fname = frame.f_code.co_filename
        hit = self._seen.get(fname)
        if hit is None:
            hit = self._seen[fname] = os.path.realpath(fname) == self.target
        if hit:
            self.calls += 1
            if len(self.where) < 4:
                self.where.append(f"{frame.f_code.co_name} (line {frame.f_lineno})")

    def __enter__(self) -> Self:
        sys.setprofile(self._hook)
        threading.setprofile(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


COVERED_SHARE = 0.5  # of the reference's data an operation must see to count as its work


def coverage_finding(reference: AtenTrace, candidate: AtenTrace, workload: str
                     ) -> Finding | None:
    """``aten_coverage``: the candidate's PyTorch calls alone did the reference's work:
    every compute operation of the reference ran at least as often, on at least half as
    much data (a second-stage ``sum`` over a kernel's partial results is not the
    reference's ``sum`` over the whole input)."""
    ref = reference.counts
    if not ref or sum(ref.values()) == 0:
        return None
    for op, n in ref.items():
        if candidate.counts.get(op, 0) < n:
            return None
        if candidate.elements.get(op, 0) < COVERED_SHARE * reference.elements.get(op, 0):
            return None
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(ref.items()))
    return Finding(rule="torch_fallback.aten_coverage", flag="torch_fallback",
                   workload=workload,
                   message=f"every compute operation of the reference ({ops}) also ran "
                           "through PyTorch in the solution's call, on as much data: its own "
                           "kernels did none of the reference's work")


def reference_finding(calls: int, where: list[str], workload: str) -> Finding | None:
    """``executed``: code from the problem's file ran inside the candidate's call."""
    if calls <= 0:
        return None
    return Finding(rule="calls_reference.executed", flag="calls_reference", workload=workload,
                   message=f"the candidate's call ran {calls} function(s) defined in the "
                           f"problem's file ({', '.join(where)}): it calls the reference")


# --- kernel names (GPU) ----------------------------------------------------------------

_NOT_KERNELS = re.compile(r"^(Memcpy|Memset|cudaMemcpy|cudaMemset|\[memory\])", re.IGNORECASE)
_LIBRARIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # inductor's generated kernels (torch.compile): pointwise, persistent/looped
    # reductions, templates, foreach
    ("inductor", re.compile(r"^triton_(poi|per|red|tem|for)_")),
    ("ATen", re.compile(r"\bat::|at_cuda_detail|\bc10::")),
    ("cuBLAS", re.compile(r"cublas|^(void )?((sm\d+|ampere|volta|turing|maxwell|hopper)"
                          r"_\w*(gemm|gemv)|nvjet_|cutlass_\d+_|gemv2[NT]_kernel"
                          r"|splitKreduce_kernel|gemmk1_kernel)", re.IGNORECASE)),
    ("cuDNN", re.compile(r"cudnn|^(void )?(implicit_convolve_sgemm|xmma_cudnn)", re.IGNORECASE)),
    ("PyTorch attention", re.compile(r"pytorch_flash::|fmha_cutlass")),
    ("NCCL", re.compile(r"nccl(Dev)?Kernel")),
)


def kernel_library(name: str) -> str | None:
    """The library a device kernel belongs to, or None for the solution's own (or a copy,
    a memset: not a kernel at all)."""
    if _NOT_KERNELS.search(name):
        return None
    for lib, pat in _LIBRARIES:
        if pat.search(name):
            return lib
    return None


def kernel_finding(kernels: list[str], language: str, workload: str) -> Finding | None:
    """``library_kernels_only``: no kernel of one call is the solution's own."""
    real = [k for k in kernels if not _NOT_KERNELS.search(k)]
    if not real:
        return None
    libs = Counter(kernel_library(k) for k in real)
    if libs.get(None):
        return None
    what = ", ".join(f"{lib} x{n}" for lib, n in sorted(libs.items(), key=str))
    return Finding(rule="torch_fallback.library_kernels_only", flag="torch_fallback",
                   workload=workload,
                   message=f"the solution is {language} but every kernel one call launched "
                           f"is a library's ({what}; e.g. {real[0][:120]}): none is its own")


# --- decisions -------------------------------------------------------------------------

def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: use 'default' (flag) or 'strict' "
                         "(reject)")
    return policy


def static_findings(path: Path, language: str, own_kernels: bool,
                    problem_file: Path | None) -> list[Finding]:
    """The source rules (``bench/policy/static.py``) for one solution file."""
    from solforge.bench.policy.static import check_source

    try:
        source = Path(path).read_text(errors="replace")
    except OSError:
        return []
    return check_source(source, language, own_kernels, problem_file)


def explain(findings: list[Finding], limit: int = 6) -> str:
    lines = [f"- {f.describe()}" for f in findings[:limit]]
    if len(findings) > limit:
        lines.append(f"- ... and {len(findings) - limit} more")
    return "\n".join(lines)


def rejects(policy: str, findings: list[Finding]) -> tuple[Status, str] | None:
    """The status and message a policy gives these findings (None: they are flags only)."""
    if policy != "strict" or not findings:
        return None
    flags = sorted({f.flag for f in findings})
    return Status.REWARD_HACK, (
        f"rejected by the strict policy ({', '.join(flags)}):\n{explain(findings)}\n"
        "(under --policy default these are reported as flags and the solution is judged "
        "on its results)")


__all__ = ["POLICIES", "AtenTrace", "ReferenceTripwire", "aten_trace", "check_policy",
           "coverage_finding", "explain", "kernel_finding", "kernel_library",
           "normalise_op", "reference_finding", "rejects", "static_findings"]
