"""Correctness: compare a candidate's outputs with the reference's, element by element.

An element passes when ``|out - ref| <= atol + rtol * |ref|`` (tolerances from the
problem's precision class). A problem passes when every output has the reference's
structure, shape and dtype, non-finite values sit exactly where the reference has them
(same kind: NaN for NaN, +inf for +inf), the fraction of failing elements is within the
precision class's allowance, and no element is worse than ``worst_error_factor`` times
its tolerance.

Integer and boolean outputs (indices, masks, counts) must match exactly, except int8/uint8
outputs of an int8-class problem (quantized codes, one step off at ties), and elements a
problem frees (``ignore_where_zero``: an output's elements where another output of the same
shape is exactly zero in both the reference's and the candidate's results, as an expert id
whose routing weight is zero: it contributes nothing, and ``torch.topk`` orders equal
values as its sort happens to); fp8-typed outputs get one fp8 rounding step
(``precision.output_tolerance``).

Reported statistics: max absolute error; max relative error, defined per element as
``|out - ref| / max(|ref|, atol)`` so that elements near zero do not dominate; the
mismatch ratio. Comparison runs in float64 on the outputs' device, in chunks.

Not covered: comparing outputs that are not tensors or Python numbers (they must be
equal), and per-output tolerances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from solforge.bench.records import Status
from solforge.problems.precision import INT_CODE_STEPS, PrecisionClass, output_tolerance

_CHUNK = 1 << 24


@dataclass
class Comparison:
    status: Status
    message: str = ""
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatch_ratio: float = 0.0
    worst_factor: float = 0.0

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
    mism = 0
    max_abs = max_rel = worst = 0.0
    problem = ""
    for lo in range(0, n, _CHUNK):
        x = a[lo:lo + _CHUNK].to(torch.float64)
        r = b[lo:lo + _CHUNK].to(torch.float64)
        fin_r = torch.isfinite(r)
        fin_x = torch.isfinite(x)
        if not bool(fin_r.all()) or not bool(fin_x.all()):
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


def _freed(i: int, outs: list[Any], refs: list[Any], ignore_where_zero: dict[int, int]
           ) -> torch.Tensor | str | None:
    """Where output ``i`` is not compared (a bool mask), None when nowhere, or what is
    wrong with the problem's ``ignore_where_zero`` for these outputs."""
    j = ignore_where_zero.get(i)
    if j is None:
        return None
    o, r = (outs[j], refs[j]) if j < len(refs) else (None, None)
    if not (isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor)
            and o.shape == r.shape == refs[i].shape):
        return (f"the problem's ignore_where_zero pairs output {i} with output {j}, which is "
                f"not a tensor of the same shape in both results")
    return (r == 0) & (o.to(r.device) == 0)


def compare(out: Any, ref: Any, pc: PrecisionClass,
            ignore_where_zero: dict[int, int] | None = None) -> Comparison:
    """Judge ``out`` against ``ref`` under precision class ``pc``; integer outputs named by
    ``ignore_where_zero`` (output -> output) are not compared where the other is zero."""
    outs, refs = as_list(out), as_list(ref)
    if len(outs) != len(refs):
        return Comparison(Status.INCORRECT_SHAPE,
                          f"returned {len(outs)} output(s), the reference returns {len(refs)}")
    total = mism = 0
    max_abs = max_rel = worst = 0.0
    for i, (o, r) in enumerate(zip(outs, refs)):
        where = f"output {i}" if len(refs) > 1 else "output"
        if not isinstance(r, torch.Tensor):
            if isinstance(o, torch.Tensor):
                return Comparison(Status.INCORRECT_SHAPE,
                                  f"{where}: a tensor where the reference returns {type(r).__name__}")
            if isinstance(r, (int, float)) and isinstance(o, (int, float)):
                d = abs(float(o) - float(r))
                if not (d <= pc.atol + pc.rtol * abs(float(r)) or (math.isnan(o) and math.isnan(r))):
                    return Comparison(Status.INCORRECT_NUMERICAL, f"{where}: {o} != {r}",
                                      max_abs_error=d)
                continue
            if o != r:
                return Comparison(Status.INCORRECT_NUMERICAL, f"{where}: {o!r} != {r!r}")
            continue
        if not isinstance(o, torch.Tensor):
            return Comparison(Status.INCORRECT_SHAPE,
                              f"{where}: got {type(o).__name__}, expected a tensor")
        if tuple(o.shape) != tuple(r.shape):
            return Comparison(Status.INCORRECT_SHAPE,
                              f"{where}: shape {tuple(o.shape)}, expected {tuple(r.shape)}")
        if o.dtype != r.dtype:
            return Comparison(Status.INCORRECT_DTYPE,
                              f"{where}: dtype {o.dtype}, expected {r.dtype}")
        if o.device != r.device:
            o = o.to(r.device)
        if not (r.is_floating_point() or r.is_complex()):
            loose = r.dtype in (torch.int8, torch.uint8) and pc.unit == "int8"
            if loose:
                d = (o.to(torch.int64) - r.to(torch.int64)).abs()
                bad = int((d > INT_CODE_STEPS).sum())
                total += r.numel()
                mism += bad
                m = float(d.max()) if d.numel() else 0.0
                max_abs = max(max_abs, m)
                worst = max(worst, m / INT_CODE_STEPS)
            else:
                freed = _freed(i, outs, refs, ignore_where_zero or {})
                if isinstance(freed, str):
                    return Comparison(Status.INCORRECT_SHAPE, f"{where}: {freed}")
                wrong = o != r
                bad = int((wrong if freed is None else wrong & ~freed).sum())
                if bad:
                    return Comparison(
                        Status.INCORRECT_NUMERICAL,
                        f"{where}: {bad} of {r.numel()} {r.dtype} values differ (must be exact)",
                        mismatch_ratio=bad / max(r.numel(), 1))
                total += r.numel()
            continue
        if r.is_complex():
            o, r = torch.view_as_real(o), torch.view_as_real(r)
        n, m, a, rel, w, problem = _close(o, r, pc)
        if problem:
            return Comparison(Status.INCORRECT_NUMERICAL, f"{where}: {problem}",
                              max_abs_error=a, max_rel_error=rel)
        total += n
        mism += m
        max_abs, max_rel, worst = max(max_abs, a), max(max_rel, rel), max(worst, w)
    ratio = mism / total if total else 0.0
    allowed = 1.0 - pc.matched_ratio
    # a class that tolerates mismatches at all tolerates one on a small output (640 bf16
    # elements at 99.9% would otherwise allow none: a single rounding tie fails a trial);
    # the worst-error cap still bounds how far off it may be
    allowed_count = max(allowed * total, 1.0) if allowed > 0 else 0.0
    ok = mism <= allowed_count + 1e-9 and (mism == 0 or worst <= pc.worst_error_factor)
    c = Comparison(Status.PASSED if ok else Status.INCORRECT_NUMERICAL, "", max_abs, max_rel,
                   ratio, worst)
    if not ok:
        if mism > allowed_count:
            c.message = (f"{mism} of {total} elements ({ratio:.2%}) outside atol={pc.atol:g}, "
                         f"rtol={pc.rtol:g} (allowed {allowed:.2%}); max abs error {max_abs:.3g}")
        else:
            c.message = (f"an element is {worst:.1f}x over its tolerance (cap "
                         f"{pc.worst_error_factor:g}x); max abs error {max_abs:.3g}")
    return c


def same_outputs(a: Any, b: Any) -> bool:
    """Bitwise equality of two output structures (reference determinism)."""
    xs, ys = as_list(a), as_list(b)
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if not torch.equal(torch.nan_to_num(x.float()) if x.is_floating_point() else x,
                               torch.nan_to_num(y.float()) if y.is_floating_point() else y):
                return False
        elif x != y:
            return False
    return True
