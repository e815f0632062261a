"""The necessary work of one workload: FLOPs (tensor-core and vector) and bytes moved.

Method. The reference runs once, forward only, under ``torch.no_grad``, inside two PyTorch
dispatch modes:

- ``torch.utils.flop_counter.FlopCounterMode`` counts GEMM-class work (mm, addmm, bmm,
  baddbmm, convolution, ``_scaled_mm``, the fused SDPA kernels): the **tensor** FLOPs.
- ``_VectorCounter`` (below) counts what runs on the SIMT units, the **vector** FLOPs: one
  FLOP per output element of each pointwise op (ops PyTorch tags ``pointwise``; ``clone`` is
  data movement and counts nothing), one per input element of each reduction (ops tagged
  ``reduction``), and a fixed cost per element for the fused normalisations that have no tag,
  equal to what their decomposition would count under the same rules (softmax 5: max, sub,
  exp, sum, div; layer/group norm 5 plus 1 per affine term; RMS norm 4; batch norm 2 in
  inference and 5 in training, plus affine terms; scans 1). It also counts, as tensor work,
  what the FLOP counter has no formula for: the CPU flash SDPA kernel and ``torch._int_mm``
  (int8 operations count as FLOPs); and the softmax of every fused SDPA kernel as 5 vector
  FLOPs per attention score.

Bytes are the fused bound: every input, every parameter and buffer the forward reads, and
every output, each moved once (``numel * element_size``). A parameter or buffer whose storage
no op touched (an unused mask table, say) is not counted.

Declared counts win. A problem whose reference does more than the task needs (causal or
sliding-window attention computes the masked half; MoE references often run every expert)
declares ``flops``/``bytes``; :meth:`Work.with_declared` replaces the counted figures. The rule
for where declared FLOPs run: if the reference ran any tensor-core-class op, the declared FLOPs
are tensor work (computed at the rate of the unit the precision class admits, which for an
exact-fp32 class is the SIMT rate anyway); otherwise they are vector work. Declared FLOPs
replace both counted parts: the SOL is a max of its terms, so dropping the vector part can
only lower it and the bound stays a lower bound.

Known limits. These make the bound lower than the truth (safe: SOL stays a lower bound):

- 1 FLOP per pointwise element whatever the op (``exp``, ``erf`` and ``gelu`` cost more on real
  hardware); dtype casts (``_to_copy``) and data movement (cat, gather, index, sort, topk,
  embedding) count 0 FLOPs.
- Intermediate tensors are assumed to stay on chip (the fused bound); a workload that cannot
  be fused (a global sort, say) moves more than this.
- Only what dispatches through ATen is seen: a reference that calls a custom kernel, a Triton
  kernel or leaves PyTorch counts nothing for that part (declare it).

These make it higher than the truth, so such problems must declare their counts, or honest
kernels may score above 1 or be flagged as faster than light:

- A reference that computes more than needed (masked attention, every MoE expert, an unused
  branch) is counted as it runs.
- A parameter or buffer read in part (an embedding table gathered by a few ids, a RoPE cache
  sliced to the sequence) counts in full; strided or broadcast (expanded) inputs count their
  logical size, not their storage.
- Data-dependent work (MoE routing, early exits) is counted for the inputs given.

The model is not modified: buffers are swapped for copies during the run (so running-stat
updates and caches written in ``forward`` land in the copies), inputs are cloned, and the RNG
state is restored afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.flop_counter import FlopCounterMode, flop_registry

aten = torch.ops.aten


class Work(BaseModel):
    """FLOPs and bytes one workload needs. Tensor FLOPs run on matrix units, vector FLOPs on
    the SIMT units; bytes are the fused bound (each input, parameter and output once)."""

    model_config = ConfigDict(frozen=True)

    tensor_flops: float = Field(0.0, ge=0)
    vector_flops: float = Field(0.0, ge=0)
    bytes: float = Field(0.0, ge=0)
    source: str = Field("counted", description="counted, declared, or counted+declared")

    @property
    def flops(self) -> float:
        return self.tensor_flops + self.vector_flops

    def with_declared(self, flops: float | None, bytes: float | None) -> Work:
        """This work with the problem's declared counts in place of the counted ones (either
        may be None: that part stays counted). Declared FLOPs are tensor work when the counted
        reference did tensor work, else vector work (see the module docstring)."""
        if flops is None and bytes is None:
            return self
        tensor, vector, nbytes = self.tensor_flops, self.vector_flops, self.bytes
        if flops is not None:
            tensor, vector = (float(flops), 0.0) if self.tensor_flops > 0 else (0.0, float(flops))
        if bytes is not None:
            nbytes = float(bytes)
        declared_all = flops is not None and bytes is not None
        source = "declared" if declared_all else "counted+declared"
        return Work(tensor_flops=tensor, vector_flops=vector, bytes=nbytes, source=source)


def count_work(model: torch.nn.Module, inputs: Sequence[Any],
               outputs: Any | None = None) -> Work:
    """Count the work of ``model(*inputs)`` (see the module docstring for the method).

    ``outputs``, if given, are what the bytes of the outputs are counted from (the evaluator
    already holds the reference outputs); the model still runs once to count FLOPs.
    """
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    params = dict(model.named_parameters())
    inputs = tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, list(inputs))
    devices = sorted({t.device.index or 0 for t in _tensors(inputs) if t.device.type == "cuda"})

    vector = _VectorCounter()
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        with FlopCounterMode(display=False) as flop_counter, vector:
            out = torch.func.functional_call(model, {**params, **buffers}, tuple(inputs))
    tensor_flops = float(flop_counter.get_total_flops()) + vector.extra_tensor_flops

    read = _unique(_tensors(inputs))
    state = [t for t in _unique([*params.values(), *buffers.values()])
             if _storage_key(t) in vector.touched]
    written = _unique(_tensors(outputs if outputs is not None else out))
    nbytes = sum(_nbytes(t) for t in [*read, *state, *written])
    return Work(tensor_flops=tensor_flops, vector_flops=float(vector.flops), bytes=float(nbytes))


# Fused normalisations and scans: vector FLOPs per input element (module docstring).
def _norm_cost(base: int, args: tuple, affine_at: Iterable[int]) -> int:
    return base + sum(1 for i in affine_at if i < len(args) and args[i] is not None)


def _training(args: tuple) -> bool:
    # batch norm's ``training`` flag is its first bool argument after (input, weight, bias)
    return next((a for a in args[3:] if isinstance(a, bool)), False)


_PER_ELEMENT_COST: dict[str, Any] = {
    "_softmax": lambda args: 5,
    "_log_softmax": lambda args: 5,
    "_safe_softmax": lambda args: 5,
    "native_layer_norm": lambda args: _norm_cost(5, args, (2, 3)),
    "native_group_norm": lambda args: _norm_cost(5, args, (1, 2)),
    "_fused_rms_norm": lambda args: 4,
    "native_batch_norm": lambda args: _norm_cost(5 if _training(args) else 2, args, (1, 2)),
    "_native_batch_norm_legit": lambda args: _norm_cost(5 if _training(args) else 2, args,
                                                        (1, 2)),
    "_native_batch_norm_legit_no_training": lambda args: _norm_cost(2, args, (1, 2)),
    "cumsum": lambda args: 1,
    "cumprod": lambda args: 1,
    "logcumsumexp": lambda args: 1,
}
# Fused attention kernels: (query, key, value) are the first three arguments.
_SDPA_NAMES = (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_flash_attention_forward",
    "_efficient_attention_forward",
)
_BSHD = ("_flash_attention_forward", "_efficient_attention_forward")  # (batch, seq, heads, dim)


def _ops(names: Iterable[str]) -> list[Any]:
    # an op this PyTorch lacks (older releases) is simply never seen
    return [getattr(aten, n) for n in names if hasattr(aten, n)]


_PER_ELEMENT = {getattr(aten, n): f for n, f in _PER_ELEMENT_COST.items() if hasattr(aten, n)}
_SDPA = set(_ops(_SDPA_NAMES))
_SDPA_BSHD = set(_ops(_BSHD))
_INT_MM = set(_ops(("_int_mm",)))  # int8 GEMM; the FLOP counter has no formula for it
_NOT_ARITHMETIC = {aten.clone}
# PyTorch tags reductions since 2.x; older releases fall back to the common names
_REDUCTION_TAG = getattr(torch.Tag, "reduction", None)
_REDUCTIONS = set(_ops(("sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std",
                        "var_mean", "std_mean", "logsumexp", "argmax", "argmin", "any", "all",
                        "linalg_vector_norm", "norm")))


class _VectorCounter(TorchDispatchMode):
    """Counts SIMT work, fused-attention work the FLOP counter misses, and touched storages."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.extra_tensor_flops = 0.0
        self.touched: set[tuple[torch.device, int]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in _tensors((args, kwargs)):
            self.touched.add(_storage_key(t))
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        if packet in _SDPA:
            self._attention(packet, args)
        elif packet in _INT_MM and packet not in flop_registry:
            (m, k), n = args[0].shape, args[1].shape[1]
            self.extra_tensor_flops += 2.0 * m * n * k
        elif packet in flop_registry or packet in _NOT_ARITHMETIC:
            pass
        elif packet in _PER_ELEMENT:
            self.flops += _PER_ELEMENT[packet](args) * args[0].numel()
        elif _REDUCTION_TAG in func.tags or packet in _REDUCTIONS:
            self.flops += sum(t.numel() for t in _tensors(args))
        elif torch.Tag.pointwise in func.tags:
            self.flops += sum(t.numel() for t in _tensors(out))
        return out

    def _attention(self, packet, args) -> None:
        q, k, v = args[:3]
        *batch, s_q, d_qk = q.shape
        s_k, d_v = k.shape[-2], v.shape[-1]
        if packet in _SDPA_BSHD:
            b, s_q, h, d_qk = q.shape
            s_k, d_v = k.shape[1], v.shape[-1]
            batch = [b, h]
        scores = s_q * s_k
        for n in batch:
            scores *= n
        if packet not in flop_registry:
            # QK^T and PV: 2 FLOPs per multiply-add (the FLOP counter's own sdpa formula)
            self.extra_tensor_flops += 2.0 * scores * (d_qk + d_v)
        self.flops += 5 * scores


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [x for x in tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _storage_key(t: torch.Tensor) -> tuple[torch.device, int]:
    with contextlib.suppress(RuntimeError, NotImplementedError):
        return (t.device, t.untyped_storage().data_ptr())
    return (t.device, id(t))


def _unique(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """Tensors without repeats of the same view (a tensor passed twice is moved once)."""
    seen, out = set(), []
    for t in tensors:
        key = (_storage_key(t), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()
