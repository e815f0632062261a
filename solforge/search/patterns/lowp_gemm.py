"""``lowp_gemm``: a GEMM of FP8, int8, bf16 or fp16 operands upcast to fp32 → the same GEMM
on TF32 tensor cores with the scales applied after it (``runtime.exact_lowp_matmul``).

Quantized references (vLLM's W8A8-FP8 linear, SmoothQuant's int8 GEMM) and fp32 logits of
16-bit activations (DeepSeek-V3's router: ``linear(h.float(), W.float())``) cast both
operands to fp32, scale them per tensor or per row, and multiply on the fp32 units (51
TFLOP/s on an H200, against 409 for TF32). An e4m3 value has a 4-bit significand, int8 7
bits, bf16 8 and fp16 11, all exact in TF32's 11: the products are exact and accumulate in
fp32, as the reference's do. Per-tensor and per-row scales commute with the product, so
they multiply the fp32 result instead of the operands. The one difference from the
reference is the rounding of the scaled operands, which the reference rounds to fp32
before the product: a relative 2^-24 per term, far below the output's bf16 rounding.

Matched: ``mm``/``matmul(A, B.t())`` and ``F.linear(A, B)`` without a bias, with ``A``
[M, K] and ``B`` [N, K] each a cast to fp32 of a ``float8_e4m3fn``/``float8_e5m2``/
``int8``/``bfloat16``/``float16`` tensor, optionally times an fp32 scale of shape [1] or
[rows, 1]; every intermediate used only there.

With ``native=True`` the same matches call ``runtime.native_lowp_matmul`` instead: the
GEMM on the low-precision tensor cores themselves (``torch._scaled_mm``, ``torch._int_mm``,
a 16-bit GEMM with fp32 output), falling back to the TF32 product where their shape rules
exclude an input. The ``library`` family offers it on a GPU as a candidate of its own
(``library:lowp_tensor_cores``), so the evaluator decides between the two.

Not covered: block scales (DeepSeek's 128x128, ``repeat_interleave``d: they do not
commute with the product), operands of more than two dims, ``nn.Linear`` modules (their
weight is a parameter, not a cast).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from solforge.search.match import LibraryFunction, Match, Pattern, call
from solforge.search.nodes import arg, cast_source, op, tensor
from solforge.search.patterns.common import graph_nodes
from solforge.search.trace import TracedReference

EXACT_LOWP_MATMUL = LibraryFunction("exact_lowp_matmul", module="solforge.search.runtime")
NATIVE_LOWP_MATMUL = LibraryFunction("native_lowp_matmul", module="solforge.search.runtime")
# operands whose every value TF32 holds exactly (significands of 4, 3, 8, 11 and 7 bits,
# against TF32's 11): their products on TF32 tensor cores are the fp32 products
LOWP = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, torch.bfloat16, torch.float16)


def _target(n: Any) -> str:
    if not isinstance(n, fx.Node):
        return ""
    return n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")


def _only_here(n: Any) -> bool:
    return isinstance(n, fx.Node) and len(n.users) == 1


def _operand(a: Any) -> tuple[fx.Node, Any, set[fx.Node]] | None:
    """(the low-precision tensor, its scale or None, the nodes between) for a 2-D fp32
    ``cast(q)`` or ``cast(q) * s`` (either order), s [1] or [rows, 1] in fp32."""
    t = tensor(a)
    if t is None or t.dim() != 2 or t.dtype != torch.float32 or not _only_here(a):
        return None
    scale, nodes, x = None, {a}, a
    if op(a) == "mul":
        l, r = arg(a, 0), arg(a, 1)
        for c, s in ((l, r), (r, l)):
            ts = tensor(s)
            if cast_source(c, torch.float32) is not None and _only_here(c) and ts is not None \
                    and ts.dtype == torch.float32 and tuple(ts.shape) in ((1,), (t.shape[0], 1)):
                scale, x = s, c
                nodes.add(c)
                break
        else:
            return None
    q = cast_source(x, torch.float32)
    tq = tensor(q)
    if q is None or tq is None or tq.dtype not in LOWP or tuple(tq.shape) != tuple(t.shape):
        return None
    return q, scale, nodes


def find_lowp_gemm(tr: TracedReference, native: bool = False) -> list[Match]:
    fn = NATIVE_LOWP_MATMUL if native else EXACT_LOWP_MATMUL
    units, levers = (("the FP8/int8/16-bit tensor cores", ("lowp_tensor_cores",)) if native
                     else ("TF32 tensor cores (exact products)", ("tf32",)))
    found = []
    for n in graph_nodes(tr):
        if _target(n) in ("mm", "matmul") and len(n.args) == 2 and not n.kwargs:
            bt = arg(n, 1)
            if _target(bt) != "t" or not _only_here(bt):
                continue
            between, w = {bt}, arg(bt, 0)
        elif _target(n) == "linear" and n.op == "call_function" and \
                arg(n, 2, "bias") is None and len(n.args) <= 2:
            between, w = set(), arg(n, 1, "weight")  # linear(x, w) is x @ w.t()
        else:
            continue
        a, b = _operand(arg(n, 0, "input")), _operand(w)
        if a is None or b is None:
            continue
        (qa, sa, na), (qb, sb, nb) = a, b

        def build(g, m, qa=qa, qb=qb, sa=sa, sb=sb):
            return [call(g, fn, (m(qa), m(qb), m(sa) if sa is not None else None,
                                 m(sb) if sb is not None else None), {},
                         f"the low-precision GEMM on {units}, scales after", "acc")]

        found.append(Match("lowp_gemm", {n} | between | na | nb, [n], build,
                           f"{tensor(qa).dtype} x {tensor(qb).dtype} GEMM dequantized to "
                           f"fp32 → runtime.{fn.name} ({units})", levers, set(), (fn,)))
    return found


LOWP_GEMM_PATTERN = Pattern("lowp_gemm", find_lowp_gemm,
                            "FP8/int8/16-bit GEMM upcast to fp32 → TF32, scales after")
