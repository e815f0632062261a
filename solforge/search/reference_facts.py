"""What a reference contains, as the candidate families ask it: an fp32 matmul or
convolution (TF32 applies), the ranks of its convolutions (cuDNN and channels-last apply),
a forward that reads tensor values on the host (no CUDA-graph candidate). Read from the
traced graph when there is one, else from the source.

Not covered: what a helper in another module does (a host read there goes unseen), and
operators the tables below do not name.
"""

from __future__ import annotations

import inspect
import re

import torch.fx as fx
import torch.nn as nn

from solforge.search.candidates import SearchContext

_MATMUL_OPS = {"matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "linear", "conv1d",
               "conv2d", "conv3d"}
_MATMUL_SRC = re.compile(r"\b(matmul|bmm|mm|addmm|baddbmm|einsum|linear|Linear|conv[123]d|"
                         r"Conv[123]d)\b|@")


def _graph_ops(ctx: SearchContext) -> list[tuple[str, fx.Node]]:
    out = []
    for n in ctx.traced.graph.nodes if ctx.traced else []:
        if n.op == "call_module":
            out.append((type(n.meta.get("module")).__name__.lower(), n))
        elif n.op in ("call_function", "call_method"):
            out.append((getattr(n.target, "__name__", str(n.target)).lower(), n))
    return out


def _source(ctx: SearchContext) -> str:
    return ctx.problem.path.read_text()


def has_fp32_matmul(ctx: SearchContext) -> bool:
    """An fp32 matmul, linear or convolution in the reference (graph, else source)."""
    return has_matmul(ctx, dtype="torch.float32")


def has_matmul(ctx: SearchContext, dtype: str | None = None) -> bool:
    """A matmul, linear or convolution in the reference (graph, else source; ``dtype``:
    of that dtype only, read from the graph)."""
    if ctx.traced is None:
        return bool(_MATMUL_SRC.search(_source(ctx)))
    for name, n in _graph_ops(ctx):
        val = n.meta.get("val")
        if name in _MATMUL_OPS and getattr(val, "dtype", None) is not None \
                and (dtype is None or str(val.dtype) == dtype):
            return True
    return False


def conv_kinds(ctx: SearchContext) -> set[int]:
    """The spatial ranks (1, 2, 3) of the reference's convolutions."""
    kinds: set[int] = set()
    if ctx.traced is None:
        return {int(d) for d in re.findall(r"[Cc]onv(?:Transpose)?([123])d", _source(ctx))}
    for name, n in _graph_ops(ctx):
        m = re.fullmatch(r"conv(?:_?transpose)?([123])d", name)
        if m:
            kinds.add(int(m.group(1)))
        mod = n.meta.get("module") if n.op == "call_module" else None
        if isinstance(mod, nn.modules.conv._ConvNd):
            kinds.add(len(mod.kernel_size))
    return kinds


# seconds max-autotune spent benchmarking its choices per distinct shape, after the plain
# compile had run (an H100, benchmarks/results/2026-12-07-h100-s32/call3, kb_probe's
# first_call_s): one 1024x8192x8192 fp32 GEMM 55 s, an attention block's three GEMMs 114 s,
# one convolution 7-22 s
AUTOTUNE_S = {"gemm": 55.0, "conv": 20.0}
_GEMM_OPS = {"matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "linear"}


def _shape_key(n: fx.Node) -> tuple:
    shapes = tuple(tuple(a.meta["val"].shape) for a in n.all_input_nodes
                   if hasattr(a.meta.get("val"), "shape"))
    mod = n.meta.get("module") if n.op == "call_module" else None
    weight = getattr(mod, "weight", None)
    return shapes + ((tuple(weight.shape),) if weight is not None else ())


def autotune_seconds(ctx: SearchContext) -> float | None:
    """What max-autotune's benchmarking is expected to add to a plain compile of this
    reference: :data:`AUTOTUNE_S` per distinct GEMM or convolution (its kind and input
    shapes; Inductor's autotune cache serves a repeated shape). None without a traced
    graph. Not covered: the Triton configurations of reductions and pointwise kernels
    (coordinate descent, seconds), a host slower than the one measured."""
    if ctx.traced is None:
        return None
    seen: dict[tuple, str] = {}
    for name, n in _graph_ops(ctx):
        mod = n.meta.get("module") if n.op == "call_module" else None
        if re.fullmatch(r"conv(?:_?transpose)?([123])d", name) or \
                isinstance(mod, nn.modules.conv._ConvNd):
            seen[(name, _shape_key(n))] = "conv"
        elif name in _GEMM_OPS:
            seen[(name, _shape_key(n))] = "gemm"
    return sum(AUTOTUNE_S[k] for k in seen.values())


# a forward that reads tensor values on the host (a loop over ``lengths.tolist()``): a
# graph would bake in the values seen at capture, and capture refuses the copy anyway
_HOST_READS = re.compile(r"\.(tolist|item|cpu|numpy)\(\)|\.nonzero\(")


def reads_values_on_host(ctx: SearchContext) -> bool:
    """The reference's forward (its source; the whole file when that cannot be read)
    copies tensor values to the host. Not covered: a host read in a helper the forward
    calls from another module."""
    try:
        src = inspect.getsource(ctx.module.Model.forward)
    except (OSError, TypeError, AttributeError):
        src = _source(ctx)
    return bool(_HOST_READS.search(src))
