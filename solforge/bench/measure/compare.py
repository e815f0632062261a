"""Correctness: compare a candidate's outputs with the reference's, element by element.

An element passes when ``|out - ref| <= atol + rtol * |ref|`` (tolerances from the
problem's precision class; a gradient class adds ``rms_atol`` times the reference output's
root-mean-square over its finite elements to atol). A problem passes when every output has the reference's
structure, shape and dtype, non-finite values sit exactly where the reference has them
(same kind: NaN for NaN, +inf for +inf), the fraction of failing elements is within the
precision class's allowance, and no element is worse than ``worst_error_factor`` times
its tolerance. A workload's own class (SOL-ExecBench tolerances) may also cap the absolute
error (``max_abs_cap``) and reject every non-finite value (``reject_nonfinite``, with
matching ``-inf`` allowed under ``allow_negative_inf``).

Integer and boolean outputs (indices, masks, counts) must match exactly, except int8/uint8
outputs of an int8-class problem (quantized codes, one step off at ties), and elements a
problem frees (``ignore_where_zero``: an output's elements where another output of the same
shape is exactly zero in both the reference's and the candidate's results, as an expert id
whose routing weight is zero: it contributes nothing, and ``torch.topk`` orders equal
values as its sort happens to); fp8-typed outputs get one fp8 rounding step
(``precision.output_tolerance``).

Index outputs (``Problem.index_outputs``: top-k, argmax, sort, routing ids) are judged by what
they select: the values the candidate's indices pick from the selected-from tensor (the
reference's own output, an input, or the problem's function of the inputs: never a tensor
the candidate produced) must match those the reference's indices pick, element by element,
within the class's tolerance and matched ratio; every index must be in range, and for
top-k/sort forms no index may repeat along the dimension (unless declared ``distinct:
False``). Ties and near-ties may so be broken either way (an exact id check failed an
honest router on 2 of 65536 expert ids: benchmarks/results/FINDINGS.md, "index outputs").
A plain KernelBench file cannot declare them: there an int64 output that is, on the
trial's own inputs, bitwise ``torch.argmax``/``argmin`` of a floating input along one dim is
judged so too (:func:`infer_index_outputs`; the workload's message says so); every other
undeclared integer output stays exact.

Reported statistics: max absolute error; max relative error, defined per element as
``|out - ref| / max(|ref|, atol)`` so that elements near zero do not dominate; the
mismatch ratio. Comparison runs in float64 on the outputs' device, in chunks.

Not covered: comparing outputs that are not tensors or Python numbers (they must be
equal), per-output tolerances, and index outputs of forms :class:`~solforge.problems.spec.
IndexOutput` does not describe (indices into a flattened tensor, unsorted top-k).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from solforge.problems.precision import INT_CODE_STEPS, PrecisionClass, output_tolerance
from solforge.problems.spec import IndexOutput, Problem
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


def infer_index_outputs(ref: Any, inputs: list[Any] | None) -> tuple[dict[int, IndexOutput], str]:
    """Index outputs of a file that cannot declare them (plain KernelBench), and a note
    saying which: an int64 output whose shape is a floating input's without one dim and
    that equals, bitwise, ``torch.argmax`` or ``torch.argmin`` of that input along that dim
    on these very inputs. Anything else (counts, masks, an argmax of a transformed input)
    is not inferred and stays exact."""
    refs = as_list(ref)
    sources = [(k, x) for k, x in enumerate(inputs or [])
               if isinstance(x, torch.Tensor) and x.is_floating_point() and x.ndim >= 1]
    found: dict[int, IndexOutput] = {}
    said: list[str] = []
    for i, r in enumerate(refs):
        if not isinstance(r, torch.Tensor) or r.dtype != torch.int64 or r.numel() == 0:
            continue
        for k, x in sources:
            hit = _arg_along(x, r)
            if hit is not None:
                d, how = hit
                found[i] = IndexOutput(input=k, dim=d, distinct=False)
                name = f"output {i}" if len(refs) > 1 else "the output"
                said.append(f"{name} is input {k}'s {how} along dim {d}")
                break
    if not said:
        return {}, ""
    return found, ("judged by the values its indices select, so ties may go either way: "
                   f"{'; '.join(said)} on the trials' inputs (inferred for a plain "
                   "KernelBench file)")


def _arg_along(x: torch.Tensor, r: torch.Tensor) -> tuple[int, str] | None:
    for d in range(x.ndim):
        if x.shape[d] == 0 or tuple(x.shape[:d] + x.shape[d + 1:]) != tuple(r.shape):
            continue
        for how in ("argmax", "argmin"):
            if torch.equal(getattr(torch, how)(x, dim=d), r.to(x.device)):
                return d, how
    return None


def _selected_from(decl: IndexOutput, basis: list[Any], inputs: list[Any] | None
                   ) -> torch.Tensor | str:
    """The tensor the indices select from, or what is wrong with the declaration."""
    if decl.values is not None:
        j = decl.values
        if j >= len(basis) or not isinstance(basis[j], torch.Tensor):
            return f"the problem declares indices into output {j}, not a tensor output"
        return basis[j]
    if inputs is None:
        return "the index outputs of this problem need the inputs, and none were given"
    if decl.input is not None:
        k = decl.input
        if k >= len(inputs) or not isinstance(inputs[k], torch.Tensor):
            return f"the problem declares indices into input {k}, not a tensor input"
        return inputs[k]
    assert decl.from_inputs is not None
    try:
        with torch.no_grad():
            src = decl.from_inputs(*inputs)
    except Exception as e:
        return f"the problem's index_outputs function failed: {type(e).__name__}: {e}"
    if not isinstance(src, torch.Tensor):
        return (f"the problem's index_outputs function returned {type(src).__name__}, "
                "not a tensor")
    return src


def _repeats(idx: torch.Tensor, d: int) -> tuple[int, int]:
    """(rows along ``d`` in which some index repeats, rows)."""
    s = idx.sort(dim=d).values
    k = s.shape[d]
    same = (s.narrow(d, 1, k - 1) == s.narrow(d, 0, k - 1)).any(dim=d)
    return int(same.sum()), same.numel()


def _index_output(where: str, o: torch.Tensor, r: torch.Tensor, decl: IndexOutput,
                  basis: list[Any], inputs: list[Any] | None, pc: PrecisionClass
                  ) -> Comparison | tuple[float, float, float]:
    """An index output judged by what it selects: a failing :class:`Comparison`, or the
    (max abs, max rel, worst factor) of the selected values when it passes."""
    src = _selected_from(decl, basis, inputs)
    if isinstance(src, str):
        return Comparison(Status.INVALID_REFERENCE, f"{where}: {src}")
    declared = f"the problem declares indices along dim {decl.dim} of {decl.source()}"
    if src.ndim == 0 or not -src.ndim <= decl.dim < src.ndim:
        return Comparison(Status.INVALID_REFERENCE,
                          f"{where}: {declared}, which has {src.ndim} dims")
    d = decl.dim % src.ndim
    rest = tuple(src.shape[:d] + src.shape[d + 1:])
    if r.ndim == src.ndim - 1 and tuple(r.shape) == rest:
        cut = True  # argmax form: one index per row, the dim gone
    elif (r.ndim == src.ndim and tuple(r.shape[:d] + r.shape[d + 1:]) == rest
          and r.shape[d] <= src.shape[d]):
        cut = False  # top-k / sort form: k indices per row
    else:
        return Comparison(Status.INVALID_REFERENCE,
                          f"{where}: {declared} (shape {tuple(src.shape)}), but the "
                          f"reference's indices have shape {tuple(r.shape)}: neither that "
                          f"shape with dim {d} cut to k entries nor that shape without it")
    size = src.shape[d]
    oi, ri = o.to(src.device, torch.int64), r.to(src.device, torch.int64)
    if bool(((ri < 0) | (ri >= size)).any()):
        return Comparison(Status.INVALID_REFERENCE,
                          f"{where}: {declared}, but the reference's own indices fall "
                          f"outside [0, {size})")
    outside = int(((oi < 0) | (oi >= size)).sum())
    if outside:
        return Comparison(Status.INCORRECT_NUMERICAL,
                          f"{where}: {outside} of {oi.numel()} indices outside [0, {size}) "
                          f"(indices along dim {decl.dim} of {decl.source()})",
                          mismatch_ratio=outside / max(oi.numel(), 1))
    if decl.distinct and not cut and r.shape[d] > 1:
        if _repeats(ri, d)[0]:
            return Comparison(Status.INVALID_REFERENCE,
                              f"{where}: {declared} with no index repeated in a row, but the "
                              "reference's own indices repeat (declare 'distinct': False)")
        rep, rows = _repeats(oi, d)
        if rep:
            return Comparison(Status.INCORRECT_NUMERICAL,
                              f"{where}: {rep} of {rows} rows repeat an index along dim "
                              f"{decl.dim} (top-k/sort indices must be distinct)",
                              mismatch_ratio=rep / max(rows, 1))
    if cut:
        got = src.gather(d, oi.unsqueeze(d)).squeeze(d)
        want = src.gather(d, ri.unsqueeze(d)).squeeze(d)
    else:
        got, want = src.gather(d, oi), src.gather(d, ri)
    what = (f"the values its indices select from {decl.source()} differ from those the "
            "reference's select")
    if not (want.is_floating_point() or want.is_complex()):
        differ = int((got != want).sum())
        if differ:
            return Comparison(Status.INCORRECT_NUMERICAL,
                              f"{where}: {what} ({differ} of {want.numel()}; must be "
                              "exact)",
                              mismatch_ratio=differ / max(want.numel(), 1))
        return 0.0, 0.0, 0.0
    if want.is_complex():
        got, want = torch.view_as_real(got), torch.view_as_real(want)
    n, m, a, rel, w, problem = _close(got, want, pc)
    if problem:
        return Comparison(Status.INCORRECT_NUMERICAL,
                          f"{where}: the values its indices select from {decl.source()}: "
                          f"{problem}", max_abs_error=a, max_rel_error=rel)
    if not _within_class(m, n, w, pc)[0]:
        return Comparison(Status.INCORRECT_NUMERICAL,
                          f"{where}: {what}: "
                          f"{_class_message(m, n, w, a, pc, what='selected values')}",
                          max_abs_error=a, max_rel_error=rel, mismatch_ratio=m / max(n, 1),
                          worst_factor=w)
    return a, rel, w


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
