"""``f32x3_gemm``: an fp32 GEMM (and the bias and activation right after it) → one
3xTF32 Triton GEMM with the epilogue fused (``kernels/triton/gemm_f32x3.py``).

An fp32 problem held to a tolerance TF32 cannot meet (KernelBench's 1e-4) runs its GEMMs
on the fp32 SIMT units in PyTorch, eager or compiled: cuBLAS and Inductor's templates
honour ``allow_tf32=False``. Three TF32 products per fp32 product keep the products'
accuracy at about fp32's and run on the tensor cores, at a third of the TF32 rate (on an
H100 about 139 TFLOP/s against 54 for the fp32 units). The SOL bound counts that unit for
fp32 tensor work (``sol/roofline.py``), so a kernel that uses it is scored against it.

Matched, every operand and the result fp32 and the product large enough to be worth a
tensor-core kernel (``MIN_MACS`` multiply-adds, ``MIN_DIM`` in M, N and K, and
``MIN_TILES`` output tiles to spread over the SMs):

- ``nn.Linear`` modules and ``F.linear(x, W[, b])``: the weight read in place as
  ``W.t()``; the module's bias fused;
- ``torch.matmul`` / ``@`` / ``torch.mm`` / ``torch.bmm`` / ``Tensor.matmul``: ``a``
  [..., M, K] with ``b`` [K, N], or both with the same batch dims;
- ``torch.einsum`` of two operands that is one such GEMM (``bijl,lk->bijk``,
  ``...k,nk->...n`` with ``b`` read as a weight, ``bmk,bkn->bmn``);
- then, each only where the one before is its sole user: ``+ bias`` of a [N] fp32
  parameter or buffer (when the GEMM has none), then up to ``MAX_STEPS`` epilogue steps:
  ReLU, GELU (erf or tanh), SiLU, sigmoid, tanh, leaky ReLU, clamp / hardtanh, ``+ - * /``
  a number, and one ``+`` of a tensor of the output's shape (a residual), as functions,
  methods or modules (KernelBench level 2's ``Gemm_Multiply_LeakyReLU``,
  ``Matmul_Subtract_Multiply_ReLU``, ...).

Offered on a GPU only (``Pattern.gpu_only``: on a CPU the kernel would run under Triton's
interpreter), and as a ``variant`` (``Pattern.variant``): the ``library`` family offers it
as candidates of its own, ``f32x3`` alone or ``<base>+f32x3`` on top of the other patterns'
rewrite, never inside the base candidate. The evaluator decides whether it beats cuBLAS's
fp32 GEMM on each problem; where it loses, the other patterns' candidates stand as before.

Not covered: 16-bit and FP8 GEMMs (their own tensor cores; ``lowp_gemm`` for upcast
ones), ``addmm``/``baddbmm`` with ``beta``/``alpha``, batch dims broadcast between the
operands (other than a 2-D ``b``), epilogue steps past the first that is not one of those
(it and what follows stay in the graph after the call: a tensor scale, a reduction, a
broadcast bias), convolutions, other ``einsum``
equations (ellipses, several contractions, a transposed output), GEMMs with fewer than
``MIN_TILES`` output tiles whatever their K: the kernel can split a long K over the SMs
(``kernels/triton/gemm_f32x3._split_k``), but on KernelBench's
``6_Matmul_with_large_K_dimension_`` (256x256, K = 524288) it ran at 0.80x of cuBLAS's
fp32 GEMM on an H100 (1.65 ms against 1.32: cuBLAS splits K too, at the fp32 units' peak;
benchmarks/results/2026-12-06-h100-s25), so such GEMMs are not matched.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from solforge.search.match import LibraryFunction, Match, Pattern, call
from solforge.search.nodes import arg, number, op, operands, shape, tensor
from solforge.search.patterns.common import graph_nodes
from solforge.search.patterns.pointwise import _activation
from solforge.search.trace import AttrRef, TracedReference

MATMUL_F32X3 = LibraryFunction("matmul_f32x3")
LINEAR_F32X3 = LibraryFunction("linear_f32x3")
KIND = "f32x3_gemm"
MIN_MACS = 1 << 27   # 134M multiply-adds: ~5 us on an H100's fp32 units, launch-bound below
MIN_DIM = 64
MAX_STEPS = 4  # kernels/triton/gemm_f32x3.MAX_STEPS (not imported: no Triton needed here)
# output tiles of 64x64 the GEMM must fill: fewer leave most SMs idle (the kernel's
# split-K lost to cuBLAS on a long K: see the module docstring); the kernel's
# SPLIT_BELOW_TILES
MIN_TILES = 128


def _fp32(*xs: Any) -> bool:
    return all((t := tensor(x)) is not None and t.dtype == torch.float32 for x in xs)


def _big(m: int, n: int, k: int, batch: int = 1) -> bool:
    return (min(m, n, k) >= MIN_DIM and batch * m * n * k >= MIN_MACS
            and batch * -(-m // 64) * -(-n // 64) >= MIN_TILES)


def _einsum(n: fx.Node) -> tuple[Any, Any, Any, bool] | None:
    """An ``einsum`` of two fp32 operands that is one GEMM: ``...k,kn->...n`` (``b`` as
    given), ``...k,nk->...n`` (``b`` a weight read transposed), or a batched
    ``...mk,...kn->...mn`` with the same batch letters on both sides."""
    eq, *ops = n.args
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = list(ops[0])
    if not isinstance(eq, str) or len(ops) != 2 or n.kwargs or "..." in eq or "->" not in eq:
        return None
    lhs, out = eq.replace(" ", "").split("->")
    terms = lhs.split(",")
    if len(terms) != 2:
        return None
    ta, tb = terms
    a, b = ops
    sa, sb = shape(a), shape(b)
    if not _fp32(a, b, n) or sa is None or sb is None or len(sa) != len(ta) or \
            len(sb) != len(tb) or any(len(set(t)) != len(t) for t in (ta, tb, out)):
        return None
    rows = 1
    for d in sa[:-1]:
        rows *= d
    if len(tb) == 2 and ta[-1] in tb and set(ta) & set(tb) == {ta[-1]}:
        weight = tb[1] == ta[-1]  # "nk": contracted over b's last dim
        n_letter = tb[0] if weight else tb[1]
        if out != ta[:-1] + n_letter:
            return None
        width = sb[0] if weight else sb[1]
        return (a, b, None, weight) if _big(rows, width, sa[-1]) else None
    if len(ta) == len(tb) == len(out) >= 3 and ta[:-2] == tb[:-2] == out[:-2] and \
            ta[-1] == tb[-2] and out[-2:] == ta[-2] + tb[-1] and ta[-2] != tb[-1] and \
            sa[:-2] == sb[:-2]:
        batch = rows // sa[-2] if sa[-2] else 0
        return (a, b, None, False) if _big(sa[-2], sb[-1], sa[-1], batch) else None
    return None


def _gemm(n: fx.Node) -> tuple[Any, Any, Any, bool] | None:
    """(a, b, bias, b is a linear weight [N, K]) for a GEMM node this pattern takes."""
    if n.op == "call_function" and n.target is torch.einsum:
        return _einsum(n)
    kind = op(n)
    if kind == "linear":
        if n.op == "call_module":
            mod = n.meta.get("module")
            if mod is None or mod.weight.dtype != torch.float32:
                return None
            t = str(n.target)
            bias = AttrRef(f"{t}.bias", mod.bias) if mod.bias is not None else None
            x, w = arg(n, 0), AttrRef(f"{t}.weight", mod.weight)
            wv = mod.weight
        else:
            x, w, bias = arg(n, 0, "input"), arg(n, 1, "weight"), arg(n, 2, "bias")
            wv = tensor(w)
            if wv is None or (bias is not None and not _fp32(bias)):
                return None
        xs = shape(x)
        if not _fp32(x, n) or wv.dtype != torch.float32 or wv.dim() != 2 or xs is None:
            return None
        rows = 1
        for d in xs[:-1]:
            rows *= d
        if not _big(rows, wv.shape[0], wv.shape[1]):
            return None
        return x, w, bias, True
    if kind != "matmul" or n.op == "call_module":
        return None
    a, b = operands(n)
    sa, sb = shape(a), shape(b)
    if not _fp32(a, b, n) or sa is None or sb is None or len(sa) < 2 or len(sb) < 2:
        return None
    if len(sb) != 2 and sa[:-2] != sb[:-2]:
        return None  # broadcast batch dims
    rows, batch = 1, 1
    for d in sa[:-1]:
        rows *= d
    if len(sb) > 2:  # the batch dims apart: each batch is its own [M, N] output
        batch, rows = rows // sa[-2] if sa[-2] else 0, sa[-2]
    if not _big(rows, sb[-1], sb[-2], batch):
        return None
    return a, b, None, False


def _bias_after(n: fx.Node, width: int) -> tuple[fx.Node, Any] | None:
    """(the add node, the bias) when ``n``'s sole user adds a [width] fp32 parameter."""
    user = next(iter(n.users)) if len(n.users) == 1 else None
    if user is None or op(user) != "add" or user.op == "call_module" or "alpha" in user.kwargs:
        return None
    for t, b in (operands(user), operands(user)[::-1]):
        if t is n and isinstance(b, fx.Node) and b.op == "get_attr" and \
                shape(b) == (width,) and _fp32(b) and shape(user) == shape(n):
            return user, b
    return None


_UNARY = {torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh", F.tanh: "tanh",
          torch.relu: "relu", F.relu: "relu"}
_UNARY_METHODS = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu"}
_UNARY_MODULES = {nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.ReLU: "relu"}


def _step(user: fx.Node, x: fx.Node, taken: set[fx.Node]) -> list[tuple] | None:
    """The epilogue steps ``user`` is, applied to ``x`` (the chain so far): a list of
    ``(name, number)`` / ``("residual", node)``, or None where it is none of them."""
    if shape(user) != shape(x) or not _fp32(user):
        return None
    mod = user.meta.get("module") if user.op == "call_module" else None
    if mod is not None:
        if type(mod) in _UNARY_MODULES:
            return [(_UNARY_MODULES[type(mod)], None)]
        if isinstance(mod, nn.LeakyReLU):
            return [("leaky_relu", float(mod.negative_slope))]
        if isinstance(mod, nn.Hardtanh):
            return [("clamp_min", float(mod.min_val)), ("clamp_max", float(mod.max_val))]
        act = _activation(user)
        return [(act, None)] if act else None
    left, right = operands(user)
    kind = op(user)
    if not (left is x or (right is x and kind in ("add", "sub", "mul"))):
        return None
    extra = [a for a in (*user.args[1:], *user.kwargs.values()) if a is not None]
    if user.op == "call_function" and user.target in _UNARY or \
            user.op == "call_method" and user.target in _UNARY_METHODS:
        name = _UNARY.get(user.target) or _UNARY_METHODS.get(user.target)
        return [(name, None)] if not extra or extra == [False] else None
    act = _activation(user)
    if act is not None and len(user.args) == 1 and set(user.kwargs) <= {"approximate"}:
        return [(act, None)]
    if user.op == "call_function" and user.target is F.leaky_relu:
        slope = number(arg(user, 1, "negative_slope", 0.01))
        return [("leaky_relu", slope)] if slope is not None else None
    if user.op == "call_function" and user.target in (F.hardtanh, torch.clamp) or \
            user.op == "call_method" and user.target == "clamp":
        lo_name, hi_name = ("min_val", "max_val") if user.target is F.hardtanh else ("min", "max")
        defaults = (-1.0, 1.0) if user.target is F.hardtanh else (None, None)
        lo = arg(user, 1, lo_name, defaults[0])
        hi = arg(user, 2, hi_name, defaults[1])
        steps = []
        for name, v in (("clamp_min", lo), ("clamp_max", hi)):
            if v is None:
                continue
            if number(v) is None:
                return None
            steps.append((name, number(v)))
        return steps or None
    if kind not in ("add", "sub", "mul", "div") or "alpha" in user.kwargs or \
            user.op == "call_module":
        return None
    first = left is x
    other = right if first else left
    c = number(other)
    if c is not None:
        if kind == "add":
            return [("add", c)]
        if kind == "mul":
            return [("mul", c)]
        if kind == "sub":
            return [("add", -c)] if first else [("rsub", c)]
        return [("div", c)] if first else None
    if kind == "add" and isinstance(other, fx.Node) and other not in taken and \
            shape(other) == shape(user) and _fp32(other):
        return [("residual", other)]
    return None


def find_f32x3_gemm(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        got = _gemm(n)
        if got is None:
            continue
        a, b, bias, is_weight = got
        width = shape(n)[-1]
        nodes, last = {n}, n
        if bias is None and (after := _bias_after(n, width)) is not None:
            last, bias = after
            nodes.add(last)
        steps: list[tuple] = []
        while len(last.users) == 1:
            user = next(iter(last.users))
            more = _step(user, last, nodes)
            if more is None or len(steps) + len(more) > MAX_STEPS or \
                    sum(s[0] == "residual" for s in (*steps, *more)) > 1:
                break
            steps += more
            nodes.add(user)
            last = user

        def build(g, m, a=a, b=b, bias=bias, steps=tuple(steps), is_weight=is_weight):
            fn = LINEAR_F32X3 if is_weight else MATMUL_F32X3
            program = [s if v is None or s == "residual" else (s, v) for s, v in steps]
            kwargs = {"epilogue": program} if steps else {}
            residual = [v for s, v in steps if s == "residual"]
            if residual:
                kwargs["residual"] = m(residual[0])
            what = ("the linear layer" if is_weight else "the matmul") + " at fp32 accuracy " \
                "on the tensor cores (3xTF32)" + (", bias" if bias is not None else "") + \
                (" and its epilogue fused" if steps else "")
            return [call(g, fn, (m(a), m(b), m(bias) if bias is not None else None),
                         kwargs, what, "gemm")]

        what = ("linear" if is_weight else "matmul") + (" + bias" if bias is not None else "")
        what += "".join(f" + {s}" for s, _ in steps)
        fn = LINEAR_F32X3 if is_weight else MATMUL_F32X3
        found.append(Match(KIND, nodes, [last], build,
                           f"fp32 {what} → {fn.name} (3xTF32 tensor cores)",
                           ("library_kernel", "fusion") if len(nodes) > 1 else ("library_kernel",),
                           set(), (fn,)))
    return found


F32X3_GEMM_PATTERN = Pattern(KIND, find_f32x3_gemm,
                             "fp32 GEMM (+ bias, activation) on the tensor cores at fp32 "
                             "accuracy (3xTF32)", gpu_only=True, variant=True)
