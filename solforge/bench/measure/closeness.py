"""Element-wise closeness of a candidate's tensor to the reference's, under a precision class.

An element passes when ``|out - ref| <= atol + rtol * |ref|`` (tolerances from the
problem's precision class; a gradient class adds ``rms_atol`` times the reference output's
root-mean-square over its finite elements to atol). Non-finite values must sit exactly
where the reference has them (same kind: NaN for NaN, +inf for +inf); a tensor passes when
the fraction of failing elements is within the precision class's allowance and no element
is worse than ``worst_error_factor`` times its tolerance. A workload's own class
(SOL-ExecBench tolerances) may also cap the absolute error (``max_abs_cap``) and reject
every non-finite value (``reject_nonfinite``, with matching ``-inf`` allowed under
``allow_negative_inf``).

Reported statistics: max absolute error; max relative error, defined per element as
``|out - ref| / max(|ref|, atol)`` so that elements near zero do not dominate; the
mismatch ratio. Comparison runs in float64 on the outputs' device, in chunks. Also here:
:class:`Comparison`, the verdict every comparison returns, and :func:`as_list`, outputs
as a flat list.

Not covered: walking a result's outputs, their structure, shapes and dtypes, and integer
outputs (``compare.py``); index outputs (``index_outputs.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from solforge.problems.precision import PrecisionClass, output_tolerance
from solforge.records.evaluation import Status

_CHUNK = 1 << 24


@dataclass
class Comparison:
    status: Status
    message: str = ""
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatch_ratio: float = 0.0
    worst_factor: float = 0.0
    note: str = ""  # how the outputs were judged, when a reader could not guess it

    @property
    def ok(self) -> bool:
        return self.status is Status.PASSED


def as_list(out: Any) -> list[Any]:
    """Outputs as a flat list: a tensor is ``[tensor]``, tuples/lists are flattened."""
    if isinstance(out, (tuple, list)):
        flat: list[Any] = []
        for o in out:
            flat.extend(as_list(o))
        return flat
    return [out]


def _close(a: torch.Tensor, b: torch.Tensor, pc: PrecisionClass) -> tuple[int, int, float,
                                                                             float, float, str]:
    """(elements, mismatches, max_abs, max_rel, worst_factor, nonfinite_problem)."""
    atol, rtol = output_tolerance(pc, b.dtype)
    a = a.reshape(-1)
    b = b.reshape(-1)
    n = a.numel()
    if pc.rms_atol and n:
        atol += pc.rms_atol * _rms(b)
    mism = 0
    max_abs = max_rel = worst = 0.0
    problem = ""
    for lo in range(0, n, _CHUNK):
        x = a[lo:lo + _CHUNK].to(torch.float64)
        r = b[lo:lo + _CHUNK].to(torch.float64)
        if pc.allow_negative_inf:  # both -inf: a match, left out of the error statistics
            both_neg = (r == -math.inf) & (x == -math.inf)
            r, x = torch.where(both_neg, 0.0, r), torch.where(both_neg, 0.0, x)
        fin_r = torch.isfinite(r)
        fin_x = torch.isfinite(x)
        if pc.reject_nonfinite and not (bool(fin_r.all()) and bool(fin_x.all())):
            where = "the reference's" if not bool(fin_r.all()) else "the candidate's"
            problem = problem or (f"{where} result has NaN or infinity (this workload's "
                                  "tolerance rejects non-finite values)")
        elif not bool(fin_r.all()) or not bool(fin_x.all()):
            nan_r, nan_x = torch.isnan(r), torch.isnan(x)
            if not torch.equal(nan_r, nan_x):
                problem = "NaN where the reference has none" if bool((nan_x & ~nan_r).any()) \
                    else "a finite value where the reference has NaN"
            inf_r = torch.isinf(r)
            if not torch.equal(inf_r, torch.isinf(x)) or not torch.equal(
                    torch.where(inf_r, r, 0.0), torch.where(inf_r, x.nan_to_num(0.0), 0.0)):
                problem = problem or "infinities differ from the reference's"
        both = fin_r & fin_x
        diff = torch.where(both, (x - r).abs(), 0.0)
        tol = atol + rtol * r.abs()
        bad = both & (diff > tol)
        mism += int(bad.sum())
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
            rel = diff / torch.clamp(r.abs(), min=max(atol, 1e-30))
            max_rel = max(max_rel, float(torch.where(both, rel, 0.0).max()))
            worst = max(worst, float((diff / tol).max()))
    return n, mism, max_abs, max_rel, worst, problem


def _rms(b: torch.Tensor) -> float:
    """Root-mean-square of ``b``'s finite elements (in float64, chunk by chunk)."""
    total, count = 0.0, 0
    for lo in range(0, b.numel(), _CHUNK):
        r = b[lo:lo + _CHUNK].to(torch.float64)
        fin = torch.isfinite(r)
        total += float(torch.where(fin, r, 0.0).square().sum())
        count += int(fin.sum())
    return math.sqrt(total / count) if count else 0.0


def _within_class(mism: int, total: int, worst: float, pc: PrecisionClass
                  ) -> tuple[bool, float, float]:
    """(passes, allowed fraction, allowed count) for ``mism`` of ``total`` elements."""
    allowed = 1.0 - pc.matched_ratio
    # a class that tolerates mismatches at all tolerates one on a small output (640 bf16
    # elements at 99.9% would otherwise allow none: a single rounding tie fails a trial);
    # the worst-error cap still bounds how far off it may be
    allowed_count = max(allowed * total, 1.0) if allowed > 0 else 0.0
    ok = mism <= allowed_count + 1e-9 and (mism == 0 or worst <= pc.worst_error_factor)
    return ok, allowed, allowed_count


def _over_cap(max_abs: float, pc: PrecisionClass) -> bool:
    return pc.max_abs_cap is not None and max_abs > pc.max_abs_cap


def _class_message(mism: int, total: int, worst: float, max_abs: float, pc: PrecisionClass,
                   what: str = "elements") -> str:
    _, allowed, allowed_count = _within_class(mism, total, worst, pc)
    if mism > allowed_count:
        return (f"{mism} of {total} {what} ({mism / max(total, 1):.2%}) outside "
                f"atol={pc.atol:g}, rtol={pc.rtol:g}"
                f"{f', rms_atol={pc.rms_atol:g}' if pc.rms_atol else ''} "
                f"(allowed {allowed:.2%}); max abs error "
                f"{max_abs:.3g}")
    return (f"an element is {worst:.1f}x over its tolerance (cap {pc.worst_error_factor:g}x); "
            f"max abs error {max_abs:.3g}")
