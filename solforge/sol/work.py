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
  FLOPs per attention score; and the GEMMs of cuDNN's and oneDNN's fused RNN kernels (LSTM,
  GRU: 2 FLOPs per weight-matrix element per token).

Each tensor FLOP is also attributed to the op that ran it, by op family (matmul, conv, rnn,
attention: ``units.py``) and data type (:class:`TensorPart`): which unit may bound it depends
on both and on PyTorch's settings when the bound is computed, not when it was counted (the
count is cached). FLOPs no part accounts for (an op the FLOP counter knows and this table does
not, or a declared count) are bounded at the fastest unit of the parts there are (``roofline``).

Bytes are the fused bound: every input, every parameter and buffer the forward reads, and
every output, each moved once (``numel * element_size``). A parameter or buffer whose storage
no op touched (an unused mask table, say) is not counted.

Declared counts win. A problem whose reference does more than the task needs (causal or
sliding-window attention computes the masked half; MoE references often run every expert)
declares ``flops``/``bytes``; :meth:`Work.with_declared` replaces the counted figures. The rule
for where declared FLOPs run: if the reference ran any tensor-core-class op, the declared FLOPs
are tensor work, bounded at the fastest unit any of the reference's tensor ops may use (their
parts stay, with no FLOPs, to say which ran); otherwise they are vector work. Declared FLOPs
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
updates and caches written in ``forward`` land in the copies), inputs are copied when the
model writes to them (:func:`count_work`), and the RNG state is restored afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from solforge.sol.units import OpFamily

aten = torch.ops.aten


class TensorPart(BaseModel):
    """Tensor FLOPs of one op family on one data type."""

    model_config = ConfigDict(frozen=True)

    family: OpFamily
    dtype: str = Field(description="the operands' torch dtype without 'torch.', e.g. float32")
    flops: float = Field(0.0, ge=0, description="0 once a declared count replaced the counted "
                         "FLOPs: the part then only says that such an op ran")


class Work(BaseModel):
    """FLOPs and bytes one workload needs. Tensor FLOPs run on matrix units, vector FLOPs on
    the SIMT units; bytes are the fused bound (each input, parameter and output once).
    ``tensor`` attributes the tensor FLOPs to op families and data types; a Work made with
    ``tensor`` alone gets ``tensor_flops`` as their sum."""

    model_config = ConfigDict(frozen=True)

    tensor_flops: float = Field(0.0, ge=0)
    tensor: tuple[TensorPart, ...] = Field((), description="the tensor FLOPs by op family and "
                                           "dtype; what they do not cover is unattributed")
    vector_flops: float = Field(0.0, ge=0)
    bytes: float = Field(0.0, ge=0)
    source: str = Field("counted", description="counted, declared, or counted+declared")

    @model_validator(mode="before")
    @classmethod
    def _total_from_parts(cls, data: Any) -> Any:
        if isinstance(data, dict) and "tensor" in data and "tensor_flops" not in data:
            parts = [p if isinstance(p, TensorPart) else TensorPart.model_validate(p)
                     for p in data["tensor"]]
            data = {**data, "tensor": parts, "tensor_flops": sum(p.flops for p in parts)}
        return data

    @property
    def flops(self) -> float:
        return self.tensor_flops + self.vector_flops

    @property
    def unattributed_flops(self) -> float:
        """Tensor FLOPs no part accounts for (a declared count, an op without a family)."""
        return max(self.tensor_flops - sum(p.flops for p in self.tensor), 0.0)

    def with_declared(self, flops: float | None, bytes: float | None) -> Work:
        """This work with the problem's declared counts in place of the counted ones (either
        may be None: that part stays counted). Declared FLOPs are tensor work when the counted
        reference did tensor work, else vector work (see the module docstring); the counted
        parts stay, with no FLOPs, so the bound knows which ops ran."""
        if flops is None and bytes is None:
            return self
        tensor, vector, nbytes = self.tensor_flops, self.vector_flops, self.bytes
        parts = self.tensor
        if flops is not None:
            tensor, vector = (float(flops), 0.0) if self.tensor_flops > 0 else (0.0, float(flops))
            parts = tuple(p.model_copy(update={"flops": 0.0}) for p in parts)
        if bytes is not None:
            nbytes = float(bytes)
        declared_all = flops is not None and bytes is not None
        source = "declared" if declared_all else "counted+declared"
        return Work(tensor_flops=tensor, tensor=parts, vector_flops=vector, bytes=nbytes,
                    source=source)


def count_work(model: torch.nn.Module, inputs: Sequence[Any],
               outputs: Any | None = None) -> Work:
    """Count the work of ``model(*inputs)`` (see the module docstring for the method).

    ``outputs``, if given, are what the bytes of the outputs are counted from (the evaluator
    already holds the reference outputs); the model still runs once to count FLOPs.

    The inputs are left as they were, without being copied first: a write to one of them
    (an in-place op, an ``out=``) stops the run before it happens, and the model runs again
    on copies. A copy for every count took an input set's size more of the evaluator's
    memory, 8 GB for KernelBench's argmax (benchmarks/results/2026-12-05-h100-s18). Not
    covered: a write the dispatcher does not see (through numpy, or a kernel handed a raw
    pointer).
    """
    inputs = list(inputs)
    try:
        return _count(model, inputs, inputs, outputs, guard=True)
    except _WritesInputs:
        copies = tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, inputs)
        return _count(model, copies, inputs, outputs, guard=False)


class _WritesInputs(Exception):
    """The model was about to write to one of its inputs (count again on copies)."""


def _count(model: torch.nn.Module, inputs: list[Any], given: list[Any], outputs: Any | None,
           guard: bool) -> Work:
    """One counting run on ``inputs``; bytes read are those of ``given`` (the caller's
    inputs: a tensor passed twice is moved once, copied or not). ``guard``: raise
    :class:`_WritesInputs` before any op writes to an input's storage."""
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    params = dict(model.named_parameters())
    devices = sorted({t.device.index or 0 for t in _tensors(inputs) if t.device.type == "cuda"})

    protected = {k for k in map(_storage_key, _tensors(inputs)) if k[1]} if guard else set()
    vector = _VectorCounter(protected)
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        with FlopCounterMode(display=False) as flop_counter, vector:
            out = torch.func.functional_call(model, {**params, **buffers}, tuple(inputs))
    tensor_flops = float(flop_counter.get_total_flops()) + vector.extra_tensor_flops
    parts = tuple(TensorPart(family=family, dtype=dtype, flops=float(n))
                  for (family, dtype), n in vector.parts.items())

    read = _unique(_tensors(given))
    state = [t for t in _unique([*params.values(), *buffers.values()])
             if _storage_key(t) in vector.touched]
    written = _unique(_tensors(outputs if outputs is not None else out))
    nbytes = sum(_nbytes(t) for t in [*read, *state, *written])
    return Work(tensor_flops=tensor_flops, tensor=parts, vector_flops=float(vector.flops),
                bytes=float(nbytes))


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
# Tensor-class ops by family (``units.py``). The FLOP counter has formulas for most; the
# ones it lacks (``_int_mm``, the fused RNN kernels, the CPU flash SDPA) are counted here.
_FAMILY_NAMES: dict[OpFamily, tuple[str, ...]] = {
    "matmul": ("mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_int_mm"),
    "conv": ("convolution", "_convolution", "cudnn_convolution", "cudnn_convolution_transpose",
             "_slow_conv2d_forward", "convolution_overrideable", "convolution_backward"),
    "rnn": ("_cudnn_rnn", "miopen_rnn", "mkldnn_rnn_layer"),
    "attention": (*_SDPA_NAMES, "_scaled_dot_product_flash_attention_backward",
                  "_scaled_dot_product_efficient_attention_backward",
                  "_scaled_dot_product_cudnn_attention_backward", "_flash_attention_backward",
                  "_efficient_attention_backward"),
}
_FAMILY = {op: family for family, names in _FAMILY_NAMES.items() for op in _ops(names)}
_INT_MM = set(_ops(("_int_mm",)))
_RNN = set(_ops(_FAMILY_NAMES["rnn"]))
_NOT_ARITHMETIC = {aten.clone}
# PyTorch tags reductions since 2.x; older releases fall back to the common names
_REDUCTION_TAG = getattr(torch.Tag, "reduction", None)
_REDUCTIONS = set(_ops(("sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std",
                        "var_mean", "std_mean", "logsumexp", "argmax", "argmin", "any", "all",
                        "linalg_vector_norm", "norm")))


class _VectorCounter(TorchDispatchMode):
    """Counts SIMT work, the tensor work the FLOP counter misses, the tensor FLOPs of each op
    family and dtype, and touched storages."""

    def __init__(self, protected: set[tuple[torch.device, int]] | None = None) -> None:
        super().__init__()
        self.protected = protected or set()  # storages no op may write to (the inputs)
        self.flops = 0
        self.extra_tensor_flops = 0.0
        self.parts: dict[tuple[OpFamily, str], float] = {}
        self.touched: set[tuple[torch.device, int]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in _tensors((args, kwargs)):
            self.touched.add(_storage_key(t))
        if self.protected and _writes(func, args, kwargs, self.protected):
            raise _WritesInputs(str(func))
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        if packet in _SDPA:
            self._attention(packet, args, kwargs, out)
        elif packet in _FAMILY:
            self._tensor(packet, args, kwargs, out)
        elif packet in flop_registry or packet in _NOT_ARITHMETIC:
            pass
        elif packet in _PER_ELEMENT:
            self.flops += _PER_ELEMENT[packet](args) * args[0].numel()
        elif _REDUCTION_TAG in func.tags or packet in _REDUCTIONS:
            self.flops += sum(t.numel() for t in _tensors(args))
        elif torch.Tag.pointwise in func.tags:
            self.flops += sum(t.numel() for t in _tensors(out))
        return out

    def _tensor(self, packet, args, kwargs, out) -> None:
        if packet in flop_registry:  # the FLOP counter counts it too: attribute only
            flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
        elif packet in _INT_MM or packet in _RNN:
            flops = _int_mm_flops(args) if packet in _INT_MM else _rnn_flops(args)
            self.extra_tensor_flops += flops
        else:  # no formula in this PyTorch (a backward op): it ran, uncounted
            flops = 0.0
        self._attribute(_FAMILY[packet], args, flops)

    def _attention(self, packet, args, kwargs, out) -> None:
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
        if packet in flop_registry:
            flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
        else:
            # QK^T and PV: 2 FLOPs per multiply-add (the FLOP counter's own sdpa formula)
            flops = 2.0 * scores * (d_qk + d_v)
            self.extra_tensor_flops += flops
        self._attribute("attention", args, flops)
        self.flops += 5 * scores

    def _attribute(self, family: OpFamily, args: tuple, flops: float) -> None:
        operands = _tensors(args)
        dtype = str(operands[0].dtype).removeprefix("torch.") if operands else "float32"
        self.parts[(family, dtype)] = self.parts.get((family, dtype), 0.0) + flops


def _writes(func: Any, args: tuple, kwargs: dict, storages: set) -> bool:
    """Whether ``func`` writes (its schema says ``Tensor(a!)``) to one of ``storages``."""
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(a.name)
        if any(_storage_key(t) in storages for t in _tensors(value)):
            return True
    return False


def _int_mm_flops(args: tuple) -> float:
    (m, k), n = args[0].shape, args[1].shape[1]
    return 2.0 * m * n * k


def _rnn_flops(args: tuple) -> float:
    """A fused RNN kernel applies each weight matrix (input-hidden, hidden-hidden, projection;
    every layer and direction) to every token: 2 FLOPs per matrix element per token. The gates'
    pointwise work is not counted (a lower bound)."""
    x = args[0]
    tokens = x.numel() // x.shape[-1] if x.dim() else 0  # (seq, batch, in), or packed (n, in)
    # _cudnn_rnn and miopen_rnn take a weight list; mkldnn_rnn_layer one layer's 4 tensors
    weights = args[1] if isinstance(args[1], (list, tuple)) else args[1:5]
    return 2.0 * tokens * sum(w.numel() for w in weights
                              if isinstance(w, torch.Tensor) and w.dim() == 2)


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
