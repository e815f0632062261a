"""Arbitration by a float64 run: a candidate that differs from the reference beyond the
tolerance, judged against the exact answer instead.

The reference's own fp32 answer carries rounding error. Where that error is as large as
the tolerance (a 4096-deep fp32 dot product: outputs near zero, where 1e-4 is an absolute
bound), any honest kernel that sums in another order, or more accurately, disagrees with
the reference at a few elements: KernelBench's ``1_Square_matrix_multiplication_`` failed
a 3xTF32 GEMM (about five times closer to float64 than cuBLAS's fp32) on 4 of 16.7 million
elements (benchmarks/results/2026-12-06-h100-s22). Comparing with the reference alone then
punishes the more accurate kernel.

:func:`arbitrate`: when the outputs differ from the reference's by numbers only (same
structure, shapes and dtypes; floating outputs), the reference runs again in float64 (a
deep copy, parameters and floating inputs in float64, the RNG reseeded as for the trial)
and both answers are compared with that one under the problem's precision class. The
candidate passes when it is **at least as close to the float64 answer as the reference
is**, by both measures: no more elements outside the tolerance of it than the reference
has, and a max abs error against it no larger than the reference's (or none outside the
tolerance at all: then it passes the problem's own rule against the exact answer). Each
trial is arbitrated on its own inputs, so a candidate only as accurate as the reference,
rounding differently, passes about half of them and fails the workload; a consistently
more accurate one passes them all.

:func:`compare_or_arbitrate` is what the judge calls in place of ``compare_outputs`` where
a candidate's answer meets the reference's (the correctness trials, the timed calls'
outputs, the back-to-back batch's last output).

Size: outputs of at most ``GOLDEN_MAX_ELEMENTS`` elements (2**26: 512 MiB in float64); the
parameters and floating inputs up to ``ARBITRATION_MAX_ELEMENTS`` (2**31, 16 GiB in
float64) for the arbitration, but only up to ``GOLDEN_MAX_ELEMENTS`` for the record's
error statistics (:func:`golden_errors`), which every first trial asks for: a reduction of
an 8.6 GB input to a small output (KernelBench's 47_Sum: 2.1 billion inputs, 524,160
outputs) is arbitrated when a candidate differs from the reference, and costs nothing
when none does. Admission counts those float64 copies (``admission.phases``, the
``float64`` phase).

Not covered: outputs with integer or index parts (argmax, top-k: no float64 answer to
compare a choice with), outputs above ``GOLDEN_MAX_ELEMENTS`` elements and parameters or
floating inputs above ``ARBITRATION_MAX_ELEMENTS`` (the float64 copies would take tens of
gigabytes), references
that do not run in float64 (a dtype fixed inside ``forward``, a kernel without a float64
version: then the comparison with the reference stands), and references whose forward
draws random numbers (float64 draws differ from float32 ones: the comparison stands).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Any

import torch

from solforge.bench.measure import inputs as I
from solforge.bench.measure.closeness import Comparison, _close, as_list
from solforge.bench.measure.compare import compare_outputs
from solforge.problems.spec import Problem
from solforge.records.evaluation import Status

# the float64 run is skipped when the outputs have more elements than this (512 MiB in
# float64), and the record's error statistics when the parameters or the floating inputs do
GOLDEN_MAX_ELEMENTS = 1 << 26
# the parameters and the floating inputs of an arbitration at most (16 GiB in float64)
ARBITRATION_MAX_ELEMENTS = 1 << 31
# how a comparison's note starts when the float64 run decided it
ARBITRATED = "float64 arbitration:"


def golden_sizes(ref: Any, inputs: list[Any], ref_out: Any) -> tuple[int, int]:
    """(elements of the outputs, the most elements of the parameters or of the floating
    inputs): what a float64 run of the reference would copy."""
    n = sum(r.numel() for r in as_list(ref_out) if isinstance(r, torch.Tensor))
    params = sum(p.numel() for p in ref.parameters()) if isinstance(ref, torch.nn.Module) else 0
    xs = sum(x.numel() for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point())
    return n, max(params, xs)


def float64_outputs(ref: Any, inputs: list[Any], seed: int, ref_out: Any) -> list[Any] | None:
    """The reference's outputs for ``inputs`` computed in float64 (a deep copy of the
    module and of the floating inputs), or None when that is not possible or too large:
    outputs above ``GOLDEN_MAX_ELEMENTS`` elements, parameters or floating inputs above
    ``ARBITRATION_MAX_ELEMENTS`` (see the module docstring). ``ref_out``, the reference's
    own outputs, sizes it."""
    refs = as_list(ref_out)
    n, copied = golden_sizes(ref, inputs, ref_out)
    if n == 0 or n > GOLDEN_MAX_ELEMENTS or copied > ARBITRATION_MAX_ELEMENTS:
        return None
    if any(not isinstance(r, torch.Tensor) or not r.is_floating_point() for r in refs):
        return None
    try:
        g = copy.deepcopy(ref).double()
        x64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
               for x in inputs]
        gold = as_list(I.run_forward(g, x64, seed))
    except Exception:  # a forward that cannot run in float64: no exact answer to offer
        return None
    if len(gold) != len(refs) or any(
            not isinstance(q, torch.Tensor) or tuple(q.shape) != tuple(r.shape)
            for q, r in zip(gold, refs)):
        return None
    return gold


class Float64Run:
    """The reference's answer to one input set, run again in float64 at most once, when
    first asked for (``outputs``: :func:`float64_outputs`): a trial's arbitration and its
    record's error statistics share it."""

    def __init__(self, ref: Any, inputs: list[Any], seed: int, ref_out: Any) -> None:
        self.ref, self.inputs, self.seed, self.ref_out = ref, inputs, seed, ref_out

    @functools.cached_property
    def outputs(self) -> list[Any] | None:
        return float64_outputs(self.ref, self.inputs, self.seed, self.ref_out)

    def statistics_outputs(self) -> list[Any] | None:
        """The float64 outputs for the record's statistics: those of an arbitration that
        already ran, else a run only where the parameters and the floating inputs are at
        most ``GOLDEN_MAX_ELEMENTS`` (a first trial that passed on its own never copies a
        gigabyte input to float64 for its statistics)."""
        if "outputs" in self.__dict__:
            return self.outputs
        if golden_sizes(self.ref, self.inputs, self.ref_out)[1] > GOLDEN_MAX_ELEMENTS:
            return None
        return self.outputs


def golden_errors(run: Float64Run, out: list[Any]) -> tuple[float | None, float | None]:
    """Max abs error of the reference and of the candidate against the float64 run (None,
    None where there is none, or where only an arbitration's larger bound would allow one
    and no arbitration ran: :meth:`Float64Run.statistics_outputs`): the statistics a
    workload's record reports."""
    gold = run.statistics_outputs()
    if gold is None:
        return None, None
    try:
        e_ref = max(float((r.double() - q).abs().max())
                    for r, q in zip(as_list(run.ref_out), gold))
        e_out = max(float((o.double() - q).abs().max()) for o, q in zip(as_list(out), gold))
    except Exception:
        return None, None
    return e_ref, e_out


@dataclass
class Arbitration:
    """The float64 comparison of one trial: both answers' distance to the exact one."""

    ok: bool
    candidate_mismatches: int
    reference_mismatches: int
    candidate_max_abs: float
    reference_max_abs: float
    elements: int

    def message(self) -> str:
        verdict = ("at least as close to it as the reference" if self.ok
                   else "further from it than the reference")
        return (f"against a float64 run of the reference: the candidate has "
                f"{self.candidate_mismatches} of {self.elements} elements outside the "
                f"tolerance (max abs error {self.candidate_max_abs:.3g}), the reference "
                f"{self.reference_mismatches} (max abs error {self.reference_max_abs:.3g}): "
                f"{verdict}")


def arbitrate(out: Any, run: Float64Run, problem: Problem) -> Arbitration | None:
    """Both answers against the float64 run (see the module docstring), or None when the
    outputs cannot be arbitrated."""
    outs, refs = as_list(out), as_list(run.ref_out)
    if len(outs) != len(refs) or not all(
            isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor)
            and r.is_floating_point() and o.dtype == r.dtype and o.shape == r.shape
            for o, r in zip(outs, refs)):
        return None
    gold = run.outputs  # None where the run failed, out of memory included
    if gold is None:
        return None
    pc = problem.precision
    n = bad_c = bad_r = 0
    max_c = max_r = 0.0
    for o, r, q in zip(outs, refs, gold):
        exact = q.to(r.dtype).to(r.device)  # the exact answer, rounded once to the output's type
        nc, mc, ac, _, _, problem_c = _close(o.to(r.device), exact, pc)
        _, mr, ar, _, _, problem_r = _close(r, exact, pc)
        if problem_r:  # non-finite where float64 is not, or the reverse: no arbitration
            return None
        if problem_c:
            mc, ac = nc, float("inf")
        n, bad_c, bad_r = n + nc, bad_c + mc, bad_r + mr
        max_c, max_r = max(max_c, ac), max(max_r, ar)
    ok = bad_c <= bad_r and (bad_c == 0 or max_c <= max_r)
    return Arbitration(ok, bad_c, bad_r, max_c, max_r, n)


def compare_or_arbitrate(out: Any, run: Float64Run, problem: Problem) -> Comparison:
    """``compare_outputs(out, run.ref_out, problem, run.inputs)``; where that fails on
    numbers alone, :func:`arbitrate` decides: a PASSED comparison whose ``note`` says so
    (the error statistics stay those against the reference), or the failure with the
    float64 comparison added to its message."""
    cmp = compare_outputs(out, run.ref_out, problem, run.inputs)
    if cmp.ok or cmp.status is not Status.INCORRECT_NUMERICAL:
        return cmp
    verdict = arbitrate(out, run, problem)
    if verdict is None:
        return cmp
    if not verdict.ok:
        cmp.message = f"{cmp.message}; {verdict.message()}"
        return cmp
    note = (f"{ARBITRATED} differs from the reference beyond the tolerance "
            f"({cmp.message}), but {verdict.message()}")
    return Comparison(Status.PASSED, "", cmp.max_abs_error, cmp.max_rel_error,
                      cmp.mismatch_ratio, cmp.worst_factor, note=note)


__all__ = ["ARBITRATED", "ARBITRATION_MAX_ELEMENTS", "Arbitration", "Float64Run",
           "GOLDEN_MAX_ELEMENTS", "arbitrate", "compare_or_arbitrate", "float64_outputs",
           "golden_errors", "golden_sizes"]
