"""Correctness: compare a candidate's outputs with the reference's, output by output.

A problem passes when every output has the reference's structure, shape and dtype and
its elements pass under the problem's precision class (``closeness.py``: tolerances,
non-finite values, the allowed fraction of failing elements, the statistics reported).

Integer and boolean outputs (indices, masks, counts) must match exactly, except int8/uint8
outputs of an int8-class problem (quantized codes, one step off at ties), and elements a
problem frees (``ignore_where_zero``: an output's elements where another output of the same
shape is exactly zero in both the reference's and the candidate's results, as an expert id
whose routing weight is zero: it contributes nothing, and ``torch.topk`` orders equal
values as its sort happens to); fp8-typed outputs get one fp8 rounding step
(``precision.output_tolerance``). Index outputs (top-k, argmax, sort, routing ids) are
judged by the values they select instead (``index_outputs.py``).

Not covered: comparing outputs that are not tensors or Python numbers (they must be
equal), per-output tolerances.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from solforge.bench.measure.closeness import (
    Comparison,
    _class_message,
    _close,
    _over_cap,
    _within_class,
    as_list,
)
from solforge.bench.measure.index_outputs import _index_output, infer_index_outputs
from solforge.problems.precision import INT_CODE_STEPS, PrecisionClass
from solforge.problems.spec import IndexOutput, Problem
from solforge.records.evaluation import Status

__all__ = ["Comparison", "as_list", "compare", "compare_outputs", "infer_index_outputs",
           "same_outputs"]

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
            ignore_where_zero: dict[int, int] | None = None,
            index_outputs: dict[int, IndexOutput] | None = None,
            inputs: list[Any] | None = None, reference: Any = None) -> Comparison:
    """Judge ``out`` against ``ref`` under precision class ``pc``; integer outputs named by
    ``ignore_where_zero`` (output -> output) are not compared where the other is zero, and
    those named by ``index_outputs`` are judged by the values they select from the
    reference's outputs (``reference``, default ``ref``) or from ``inputs``."""
    outs, refs = as_list(out), as_list(ref)
    basis = refs if reference is None else as_list(reference)
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
        decl = (index_outputs or {}).get(i)
        if decl is not None:
            if r.is_floating_point() or r.is_complex() or r.dtype == torch.bool:
                return Comparison(Status.INVALID_REFERENCE,
                                  f"{where}: the problem declares it an index output, but the "
                                  f"reference returns {r.dtype} values, not integer indices")
            judged = _index_output(where, o, r, decl, basis, inputs, pc)
            if isinstance(judged, Comparison):
                return judged
            # its own rule decided it (above); its errors still show in the statistics
            max_abs, max_rel, worst = (max(max_abs, judged[0]), max(max_rel, judged[1]),
                                       max(worst, judged[2]))
            continue
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
    ok, _, _ = _within_class(mism, total, worst, pc)
    capped = _over_cap(max_abs, pc)
    c = Comparison(Status.PASSED if ok and not capped else Status.INCORRECT_NUMERICAL, "",
                   max_abs, max_rel, ratio, worst)
    if not ok:
        c.message = _class_message(mism, total, worst, max_abs, pc)
    elif capped:
        c.message = (f"max abs error {max_abs:.3g} is over this workload's cap "
                     f"{pc.max_abs_cap:g} (max_error_cap)")
    return c


def compare_outputs(out: Any, ref: Any, problem: Problem, inputs: list[Any],
                    reference: Any = None) -> Comparison:
    """:func:`compare` under ``problem``'s rules on the outputs for ``inputs``: its precision
    class, ``ignore_where_zero`` and index outputs (declared, or for a plain KernelBench
    file inferred from ``reference``: the reference's own outputs for these inputs, default
    ``ref``; pass it when ``ref`` is something else, a candidate's first answer)."""
    basis = ref if reference is None else reference
    index, note = problem.index_outputs, ""
    if not index and problem.kernelbench_plain:
        index, note = infer_index_outputs(basis, inputs)
    c = compare(out, ref, problem.precision, problem.ignore_where_zero, index, inputs, basis)
    c.note = note
    return c


def same_outputs(a: Any, b: Any) -> bool:
    """Equality of two output structures (reference determinism, inputs left unchanged):
    tensors equal element by element, NaN equal to NaN. The bits are compared first,
    without a copy; only tensors whose bits differ are compared again as values (a NaN
    with another payload, -0.0 and 0.0), on float copies: with two copies of an 8 GB
    input the check of the candidate's inputs was most of the judge's peak
    (benchmarks/results/2026-12-05-h100-s18)."""
    xs, ys = as_list(a), as_list(b)
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if _same_bits(x, y):
                continue
            if not torch.equal(torch.nan_to_num(x.float()) if x.is_floating_point() else x,
                               torch.nan_to_num(y.float()) if y.is_floating_point() else y):
                return False
        elif x != y:
            return False
    return True


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether two tensors of one shape and dtype hold the same bits (False where the
    bits cannot be viewed: the caller then compares values)."""
    if not (x.is_floating_point() or x.is_complex()):
        return torch.equal(x, y)
    bits = _BITS.get(x.element_size())
    if bits is None:
        return False
    try:
        return torch.equal(x.view(bits), y.view(bits))
    except RuntimeError:  # a view of another dtype this layout cannot take
        return False
