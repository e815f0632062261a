"""Index outputs judged by what they select, and inferred where a file cannot declare them.

Index outputs (``Problem.index_outputs``: top-k, argmax, sort, routing ids) are judged by what
they select: the values the candidate's indices pick from the selected-from tensor (the
reference's own output, an input, or the problem's function of the inputs: never a tensor
the candidate produced) must match those the reference's indices pick, element by element,
within the class's tolerance and matched ratio (``closeness.py``); every index must be in
range, and for top-k/sort forms no index may repeat along the dimension (unless declared
``distinct: False``). Ties and near-ties may so be broken either way (an exact id check
failed an honest router on 2 of 65536 expert ids: benchmarks/results/FINDINGS.md, "index
outputs"). A plain KernelBench file cannot declare them: there an int64 output that is, on
the trial's own inputs, bitwise ``torch.argmax``/``argmin`` of a floating input along one
dim is judged so too (:func:`infer_index_outputs`; the workload's message says so); every
other undeclared integer output stays exact (``compare.py``).

Not covered: index outputs of forms :class:`~solforge.problems.spec.IndexOutput` does not
describe (indices into a flattened tensor, unsorted top-k); inferring any index output
other than a bitwise argmax/argmin of an input.
"""

from __future__ import annotations

from typing import Any

import torch

from solforge.bench.measure.closeness import (
    Comparison,
    _class_message,
    _close,
    _within_class,
    as_list,
)
from solforge.problems.precision import PrecisionClass
from solforge.problems.spec import IndexOutput
from solforge.records.evaluation import Status


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
