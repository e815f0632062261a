"""``cumulative``: ``torch.cumsum`` / ``torch.cumprod`` along one dim → the library's
``cumulative`` (``kernels/triton/scan.py``), ATen's CUDA scan arithmetic in its order, so
the result is PyTorch's bit for bit; with the forms around a scan that eager runs as
separate kernels folded into the one pass:

- a product before it (``cumsum(x * mask, d)``): the multiplier is read beside the input,
  where eager writes the product and reads it back (KernelBench ``93_masked_cumsum``);
- a reversed scan (``cumsum(x.flip(d), d).flip(d)``): read and written back to front,
  where eager makes two flipped copies (``91_cumsum_reverse``);
- the exclusive form (``cat((zeros_like(...), cumsum(x.narrow(d, 0, n - 1), d)), d)``): a
  zero, then the scan shifted by one, where eager copies the narrowed view and
  concatenates (``92_cumsum_exclusive``).

Why exactness and not a faster order: torch.compile's scan (Triton's associative scan, a
different tree) ran KernelBench's masked cumsum at 3.4 ms against eager's 8.7 ms on an
H100 and failed the problem's 1e-4 on signed inputs (60,456 of 2**30 elements; session
30). A scan's error grows with the running total, and outputs past the float64
arbitration's bound are judged against the reference alone: only its own order passes.

Matched: ``torch.cumsum(x, dim)`` / ``x.cumsum(dim)`` and the same of ``cumprod``, ``dim``
a number or a module attribute (KernelBench's ``self.dim``) within the rank, ``dtype``
absent or ``x``'s own, ``x`` fp32, fp64, fp16 or bf16 with more than one row (a single
row is CUB's scan in ATen: the kernel would hand it back to PyTorch). The product is
folded when it feeds only the scan and both operands have its shape (either may be the
bool or the same-dtype multiplier); the flips when both flip the scanned dim alone and
each has only the other as its neighbour; the exclusive form when the narrow starts at
0 and drops one element, and the cat puts a ``zeros_like`` of one slice before the scan
along the same dim. Offered on a GPU only (under the interpreter the scan walks its
chunks one at a time).

Not covered: ``cummax`` / ``cummin`` / ``logcumsumexp``; a scan whose ``dtype`` casts;
other prologues (a cast, an add, a product that broadcasts: the scan is still replaced,
the prologue left to PyTorch); a reversed exclusive scan; a one-row input.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from solforge.search.match import LibraryFunction, Match, Pattern, call
from solforge.search.nodes import arg, number, one_dim, only_user, op, operands, tensor
from solforge.search.patterns.common import FLOATS, graph_nodes
from solforge.search.trace import TracedReference

CUMULATIVE = LibraryFunction("cumulative")
KIND = "cumulative"
_SCANNED = (*FLOATS, torch.float64)


def _dim_of(a: Any, rank: int) -> int | None:
    """A dim argument (a number, a module attribute, a one-element list) as 0..rank-1."""
    d = number(one_dim(a))
    if d is None or d != int(d) or not -rank <= d < rank:
        return None
    return int(d) % rank


def _scan(n: fx.Node) -> tuple[Any, Any, int, str] | None:
    """``(input, dim argument, dim, 'sum' | 'prod')`` of a scan this pattern takes."""
    kind = op(n)
    if kind not in ("cumsum", "cumprod") or n.op == "call_module" or len(n.args) > 2 or \
            set(n.kwargs) - {"input", "dim", "dtype"}:
        return None
    x, dim = arg(n, 0, "input"), arg(n, 1, "dim")
    t, out = tensor(x), tensor(n)
    if t is None or out is None or t.dim() == 0 or t.dtype not in _SCANNED or \
            out.dtype != t.dtype or n.kwargs.get("dtype") not in (None, t.dtype):
        return None
    d = _dim_of(dim, t.dim())
    if d is None or t.numel() == t.shape[d]:
        return None
    return x, dim, d, "sum" if kind == "cumsum" else "prod"


def _flip_of(n: Any, d: int) -> Any:
    """The input of ``n`` when ``n`` flips dim ``d`` alone, else None."""
    if op(n) != "flip" or n.op == "call_module" or len(n.args) > 2 or \
            set(n.kwargs) - {"input", "dims"}:
        return None
    x, dims = arg(n, 0, "input"), arg(n, 1, "dims")
    t = tensor(x)
    return x if t is not None and _dim_of(dims, t.dim()) == d else None


def _product(x: Any, reader: fx.Node) -> tuple[Any, Any] | None:
    """``(input, multiplier)`` when ``x`` is a product of two same-shaped tensors that
    only ``reader`` reads; the input is the operand of the product's dtype."""
    if op(x) != "mul" or x.op == "call_module" or only_user(x) is not reader or \
            set(x.kwargs) - {"input", "other"}:
        return None
    a, b = operands(x)
    ta, tb, tp = tensor(a), tensor(b), tensor(x)
    if ta is None or tb is None or tp is None or not ta.shape == tb.shape == tp.shape:
        return None
    if ta.dtype == tp.dtype and tb.dtype in (torch.bool, tp.dtype):
        return a, b
    if tb.dtype == tp.dtype and ta.dtype == torch.bool:
        return b, a
    return None


def _exclusive(n: fx.Node, x: Any, d: int) -> tuple[Any, fx.Node, set[fx.Node],
                                                      set[fx.Node]] | None:
    """``(input, cat, nodes, optional)`` when ``n`` scans ``x.narrow(d, 0, size - 1)`` and
    its only reader puts a ``zeros_like`` of one slice before it along ``d``."""
    if op(x) != "narrow" or x.op == "call_module" or only_user(x) is not n:
        return None
    src = arg(x, 0, "input")
    ts, tn = tensor(src), tensor(x)
    if ts is None or tn is None or _dim_of(arg(x, 1, "dim"), ts.dim()) != d or \
            number(arg(x, 2, "start")) != 0 or tn.shape[d] != ts.shape[d] - 1:
        return None
    cat = only_user(n)
    if op(cat) != "cat" or cat.op == "call_module" or set(cat.kwargs) - {"tensors", "dim"}:
        return None
    parts, cat_dim = arg(cat, 0, "tensors"), arg(cat, 1, "dim", 0)
    if not isinstance(parts, (list, tuple)) or len(parts) != 2 or parts[1] is not n or \
            _dim_of(cat_dim, ts.dim()) != d:
        return None
    z = parts[0]
    tz, out = tensor(z), tensor(cat)
    if op(z) != "zeros_like" or z.op == "call_module" or z.kwargs or len(z.args) != 1 or \
            only_user(z) is not cat or tz is None or out is None or \
            tz.dtype != ts.dtype or tuple(out.shape) != tuple(ts.shape):
        return None
    # the narrow's length (``x.size(d) - 1``) and the slice zeros_like copies the shape of
    optional = {a for a in (*x.all_input_nodes, *z.all_input_nodes)
                if isinstance(a, fx.Node) and a is not src and a.op != "placeholder"}
    for a in list(optional):
        optional |= {b for b in a.all_input_nodes if b is not src and b.op != "placeholder"}
    return src, cat, {x, n, z, cat}, optional


def find_cumulative(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        scan = _scan(n)
        if scan is None:
            continue
        x, dim, d, kind = scan
        nodes, optional, out, form = {n}, set(), n, []
        kw: dict[str, Any] = {}
        reader = n  # the node that reads x (the product's only reader, when folded)
        inner, outer = _flip_of(x, d), only_user(n)
        ex = _exclusive(n, x, d)
        if inner is not None and only_user(x) is n and outer is not None and \
                _flip_of(outer, d) is n:
            nodes |= {x, outer}
            reader, x, out, kw["reverse"] = x, inner, outer, True
            form.append("reversed (both flips folded)")
        elif ex is not None:
            reader = x  # the narrow
            x, out, more, optional = ex
            nodes |= more
            kw["exclusive"] = True
            form.append("exclusive (the narrow and the cat folded)")
        prod = _product(x, reader)
        if prod is not None:
            nodes.add(x)
            x, kw["multiplier"] = prod
            form.append("the product before it read in the same pass")
        what = (f"{'cumsum' if kind == 'sum' else 'cumprod'} over dim {d} of "
                f"{tuple(tensor(n).shape)} {str(tensor(n).dtype)[6:]}"
                + (f", {'; '.join(form)}" if form else "") + " → cumulative (ATen's order)")

        def build(g, m, x=x, dim=dim, kind=kind, kw=kw):
            args = {k: (m(v) if k == "multiplier" else v) for k, v in kw.items()}
            return [call(g, CUMULATIVE, (m(x), dim, kind), args,
                         "scan in ATen's order (its chunks and Sklansky steps), one read "
                         "and one write", "scanned")]

        levers = ("library_kernel", "fusion") if form else ("library_kernel",)
        found.append(Match(KIND, nodes, [out], build, what, levers, optional, (CUMULATIVE,)))
    return found


CUMULATIVE_PATTERN = Pattern(KIND, find_cumulative,
                             "cumsum/cumprod along a dim, with a product, flips or the "
                             "exclusive form folded", gpu_only=True)
