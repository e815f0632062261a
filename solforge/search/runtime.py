"""Small runtime pieces the generated solutions import: backend flags, channels-last
inputs and 3-D conv weights, CUDA-graph replay (a class and a ``forward`` decorator), the
low-precision GEMMs of ``patterns/lowp_gemm.py`` (on TF32, or on the FP8/int8 units with
a TF32 fallback), the masked attention of ``patterns/attention.py`` (:func:`masked_sdpa`),
the biased attention of ``patterns/attention_bias.py`` (:func:`biased_sdpa`) and the rows
``nn.MultiheadAttention`` leaves without keys (:func:`nan_where_no_key`,
``patterns/mha.py``). Kept here so a generated file stays a page of readable code.

Not covered: CUDA graphs of a forward that synchronises with the host, allocates with
data-dependent sizes or reads a tensor's values in Python (capture fails with PyTorch's
error, and the candidate fails with it; :func:`masked_sdpa` reads a buffer mask once per
buffer version, before capture, in the warm-up calls); several devices in one forward.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_map
from torch.utils.weak import WeakIdKeyDictionary


@contextmanager
def backend_flags(*, tf32: bool | None = None, cudnn_benchmark: bool | None = None,
                  blas: str | None = None) -> Iterator[None]:
    """Set the TF32 and cuDNN-autotuning switches, and the preferred BLAS library
    (``blas``: ``"cublas"`` or ``"cublaslt"``, ``torch.backends.cuda.preferred_blas_library``),
    for the duration of a call, then put back what was there (the flags are process-wide).
    Without CUDA the BLAS choice is left alone (it applies to CUDA GEMMs only)."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.benchmark)
    if not torch.cuda.is_available():
        blas = None
    saved_blas = torch.backends.cuda.preferred_blas_library() if blas is not None else None
    try:
        if tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
        if cudnn_benchmark is not None:
            torch.backends.cudnn.benchmark = cudnn_benchmark
        if blas is not None:
            torch.backends.cuda.preferred_blas_library(blas)
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
         torch.backends.cudnn.benchmark) = saved
        if saved_blas is not None:
            torch.backends.cuda.preferred_blas_library(saved_blas)


def exact_lowp_matmul(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor | None = None,
                      b_scale: torch.Tensor | None = None) -> torch.Tensor:
    """``(a.float() * a_scale) @ (b.float() * b_scale).t()`` for FP8, int8, bf16 or fp16
    ``a`` [M, K] and ``b`` [N, K] with fp32 scales of shape [1] or [rows, 1]: the product
    on TF32 tensor cores (exact for these operands, accumulated in fp32), the scales after
    it (``patterns/lowp_gemm.py`` says why that is the reference's result). On a CPU the
    TF32 switch changes nothing: fp32."""
    with backend_flags(tf32=True):
        out = torch.matmul(a.to(torch.float32), b.to(torch.float32).t())
    if a_scale is not None:
        out = out * a_scale
    if b_scale is not None:
        out = out * b_scale.reshape(1, -1)
    return out


# signatures (shapes, strides, dtypes, device) on which PyTorch refused a native low-
# precision GEMM: they go straight to exact_lowp_matmul from then on
_NATIVE_REFUSED: set[tuple[Any, ...]] = set()
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_WIDE = (torch.bfloat16, torch.float16)
_INT8_MIN_ROWS = 32  # torch._int_mm's M must exceed 16; a multiple of 8 as its K and N


def _native_shape(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """Which native GEMM takes ``a`` [M, K] @ ``b`` [N, K]^T ("fp8", "int8"), or None
    when its documented shape rules exclude it: cuBLASLt's FP8 GEMM wants K and N in
    multiples of 16 and no e5m2 x e5m2; ``torch._int_mm`` wants M above 16 and K and N in
    multiples of 8 (a smaller M, decode's, is padded with zero rows: "int8_padded"); bf16
    and fp16 pairs go to ``torch.mm(..., out_dtype=torch.float32)``, on a GPU only (the CPU
    build has no kernel for it). All want ``a`` and ``b`` row-major (``b.t()`` is then the
    column-major second operand they expect)."""
    if a.dim() != 2 or b.dim() != 2 or not a.is_contiguous() or not b.is_contiguous():
        return None
    (m, k), (n, _) = a.shape, b.shape
    if a.dtype in _FP8 and b.dtype in _FP8:
        both_e5m2 = a.dtype == b.dtype == torch.float8_e5m2
        return "fp8" if k % 16 == 0 and n % 16 == 0 and not both_e5m2 else None
    if a.dtype == b.dtype == torch.int8:
        if k % 8 or n % 8:
            return None
        return "int8" if m > 16 else "int8_padded"
    if a.dtype == b.dtype and a.dtype in _WIDE and a.is_cuda:
        return "16-bit"  # PyTorch's CPU build has no mm with an fp32 out_dtype
    return None


def native_lowp_matmul(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor | None = None,
                       b_scale: torch.Tensor | None = None) -> torch.Tensor:
    """The same result as :func:`exact_lowp_matmul`, on the operands' own tensor cores:
    ``torch._scaled_mm`` (FP8, fp32 accumulation and output, no fast accumulation),
    ``torch._int_mm`` (int8, int32 accumulation: exact, where the reference's fp32 sum
    rounds past 2^24) or ``torch.mm`` with an fp32 ``out_dtype`` (bf16, fp16: no fp32 copy
    of the operands). Per-tensor FP8 scales go into the GEMM's epilogue; per-row scales
    multiply the fp32 result after it.

    An int8 ``a`` of at most 16 rows (decoding) is copied into a zero-padded one of 32, so
    the native GEMM applies: the TF32 fallback is slower than torch.compile's fp32 GEMM at
    M=1 (0.451 against 0.274 ms, benchmarks/results/2026-12-02-h200-s10).

    Where the shape rules exclude the native GEMM (:func:`_native_shape`: a K or N off
    the alignment) or PyTorch refuses it (a GPU without FP8 units, a
    rule of a newer version), the call is :func:`exact_lowp_matmul`'s (TF32), with a warning
    the first time PyTorch refused that signature. Not covered: block scales, batched
    operands, FP8 output."""
    kind = _native_shape(a, b)
    key = _signature((a, b))
    if kind is not None and key not in _NATIVE_REFUSED:
        try:
            out = _native_product(kind, a, b, a_scale, b_scale)
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:
            # an argument check before any launch, or an op this PyTorch lacks
            _NATIVE_REFUSED.add(key)
            warnings.warn(f"native_lowp_matmul: PyTorch refused the {kind} GEMM on "
                          f"{tuple(a.shape)} x {tuple(b.shape)} ({str(e)[:200]}); "
                          "using TF32 (exact_lowp_matmul)", RuntimeWarning, stacklevel=2)
        else:
            return out
    return exact_lowp_matmul(a, b, a_scale, b_scale)


def _native_product(kind: str, a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor | None,
                    b_scale: torch.Tensor | None) -> torch.Tensor:
    if kind in ("int8", "int8_padded"):
        m = a.shape[0]
        if kind == "int8_padded":  # _int_mm wants more than 16 rows: zero rows, dropped after
            a = torch.nn.functional.pad(a, (0, 0, 0, _INT8_MIN_ROWS - m))
        out = torch._int_mm(a, b.t())[:m].to(torch.float32)
    elif kind == "16-bit":  # exact products, fp32 accumulation and output
        out = torch.mm(a, b.t(), out_dtype=torch.float32)
    else:
        fused = [s is None or s.numel() == 1 for s in (a_scale, b_scale)]
        one = torch.ones((), dtype=torch.float32, device=a.device)
        sa = a_scale.reshape(()) if a_scale is not None and fused[0] else one
        sb = b_scale.reshape(()) if b_scale is not None and fused[1] else one
        out = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
        # only the per-row scales are left to apply
        a_scale = None if fused[0] else a_scale
        b_scale = None if fused[1] else b_scale
    if a_scale is not None:
        out = out * a_scale
    if b_scale is not None:
        out = out * b_scale.reshape(1, -1)
    return out


def channels_last(x: Any) -> Any:
    """A 4-D tensor in NHWC memory order (a copy when it is not already); anything else
    as it is."""
    if isinstance(x, torch.Tensor) and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x


def channels_last_3d(x: Any) -> Any:
    """A 5-D tensor in NDHWC memory order (a copy when it is not already); anything else
    as it is."""
    if isinstance(x, torch.Tensor) and x.dim() == 5:
        return x.contiguous(memory_format=torch.channels_last_3d)
    return x


def channels_last_3d_weights(module: torch.nn.Module) -> None:
    """Every 5-D parameter and buffer of ``module`` in NDHWC memory order, in place; other
    ranks as they are (``Module.to(memory_format=torch.channels_last_3d)`` refuses a
    module that also holds 4-D ones). A state-dict copy into them keeps the order."""
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            if t.dim() == 5:
                t.data = t.data.contiguous(memory_format=torch.channels_last_3d)


def _signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    # shapes, strides, dtypes and devices: never addresses or values
    return tuple((tuple(a.shape), a.stride(), a.dtype, str(a.device))
                 if isinstance(a, torch.Tensor) else ("value", repr(a)) for a in args)


class CudaGraphed:
    """Calls ``fn`` through one CUDA graph per input signature.

    A call whose tensors are all off the GPU (a problem's CPU workload) runs ``fn``
    directly: capture needs device tensors, and there is no launch to save.

    The first call with a new signature warms ``fn`` up twice (autotuning, lazy
    initialisation) and captures it on copies of the inputs, which become the graph's
    static input buffers. Every call copies its inputs into those buffers, replays the
    graph and returns clones of the static outputs, so an output handed out earlier is
    never overwritten by a later replay. The copies in and out are device work and are
    timed as such.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.graphs: dict[tuple[Any, ...], tuple[torch.cuda.CUDAGraph, tuple[Any, ...], Any]] = {}

    def __call__(self, *args: Any) -> Any:
        if not any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            return self.fn(*args)
        key = _signature(args)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = self._capture(args)
        graph, static_in, static_out = entry
        for buf, a in zip(static_in, args):
            if isinstance(buf, torch.Tensor):
                buf.copy_(a)
        graph.replay()
        return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, static_out)

    def _capture(self, args: tuple[Any, ...]) -> tuple[torch.cuda.CUDAGraph, tuple[Any, ...], Any]:
        static_in = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        for _ in range(2):
            self.fn(*static_in)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self.fn(*static_in)
        return graph, static_in, static_out


def cuda_graphed(method: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a module's ``forward``: each instance replays it through its own
    :class:`CudaGraphed` (its graphs and static buffers live on the instance)."""
    key = f"_cuda_graphed_{method.__name__}"

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any) -> Any:
        graphed = self.__dict__.get(key)
        if graphed is None:
            graphed = self.__dict__[key] = CudaGraphed(functools.partial(method, self))
        return graphed(*args)

    return wrapper


# -- attention ------------------------------------------------------------------------------
# per mask buffer, by identity (a buffer replaced by .to() or a new module is a new key;
# tensors compare elementwise, so not a WeakKeyDictionary): for each (version, view,
# masked value), whether the view's kept entries are tril(ones(L, S))
_CAUSAL: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _keep(source: torch.Tensor, masked: Any) -> torch.Tensor:
    """SDPA's boolean mask (True: the key takes part) of ``masked_fill(source == masked)``."""
    if source.dtype == torch.bool and isinstance(masked, bool):
        return source if masked is False else ~source
    return source != masked


@torch.compiler.disable  # a host read, once per buffer version: not for a compiled graph
def _is_causal(source: torch.Tensor, masked: Any, lq: int, lk: int) -> bool:
    """Whether the keys ``source`` keeps are exactly ``tril(ones(lq, lk))`` (SDPA's
    ``is_causal``) in every leading index. Cached per buffer, version (every in-place
    write, ``load_state_dict``'s copy included, bumps it) and view; the first call of each
    reads the values on the host."""
    if tuple(source.shape[-2:]) != (lq, lk):
        return False
    base = source._base if source._base is not None else source
    key = (source._version, source.storage_offset(), tuple(source.shape), source.stride(),
           type(masked), masked)
    seen = _CAUSAL.setdefault(base, {})
    if key not in seen:
        tril = torch.ones(lq, lk, dtype=torch.bool, device=source.device).tril()
        seen[key] = bool(torch.equal(_keep(source, masked), tril.expand(source.shape)))
    return seen[key]


def masked_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                source: torch.Tensor, masked: Any, *, fill: float, scale: float | None = None,
                dropout_p: float = 0.0, buffer: bool = False) -> torch.Tensor:
    """``softmax(masked_fill(query @ key^T * scale, source == masked, fill)) @ value`` as
    one ``F.scaled_dot_product_attention`` call (``patterns/attention.py`` matches it).

    ``source == masked`` is the reference's mask: ``source`` itself for a boolean mask
    (``masked=True``), its negation (``False``), or a comparison (``bias == 0``). ``fill``
    is ``-inf`` or a large negative number (a masked key's weight ``exp(fill - max)`` is
    then 0 in fp32). With ``buffer`` (``source`` is a slice of a module buffer), a mask
    that keeps exactly ``tril(ones(L, S))`` runs SDPA's causal kernel, no mask read; that
    is checked on the values (:func:`_is_causal`), never assumed from a name.

    A row whose every key is masked has no SDPA equivalent (the backends give 0 or NaN
    there): its output is set to the reference's, NaN for a ``-inf`` fill (softmax of
    only ``-inf``), the mean of ``value`` over the keys for a finite one (uniform weights).
    Not covered: that mean with dropout active (``dropout_p > 0``: the reference drops
    some of those uniform weights at random); a buffer rewritten after a CUDA graph was
    captured (the replay repeats the choice made at capture, as it repeats all Python).
    """
    lq, lk = query.shape[-2], key.shape[-2]
    if buffer and _is_causal(source, masked, lq, lk):
        return F.scaled_dot_product_attention(query, key, value, dropout_p=dropout_p,
                                              is_causal=True, scale=scale)
    keep = _keep(source, masked)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=keep,
                                         dropout_p=dropout_p, scale=scale)
    some = keep.any(-1, keepdim=True)
    if math.isinf(fill):
        return out.masked_fill(~some, math.nan)
    return torch.where(some, out, value.mean(-2, keepdim=True))


def biased_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                bias: torch.Tensor, source: torch.Tensor | None = None, masked: Any = True,
                *, fill: float = -math.inf, scale: float | None = None,
                dropout_p: float = 0.0) -> torch.Tensor:
    """``softmax(query @ key^T * scale + bias) @ value``, with ``.masked_fill(source ==
    masked, fill)`` after the add when ``source`` is given, as one
    ``F.scaled_dot_product_attention`` call whose float ``attn_mask`` is the bias (``-inf``
    where the boolean mask masks); ``patterns/attention_bias.py`` matches it. ``source`` and
    ``masked`` read as in :func:`masked_sdpa`; ``bias`` has the query's dtype.

    A row whose every score is ``-inf`` is NaN, as softmax of only ``-inf`` is (SDPA's CPU
    kernels give 0 there, PyTorch 2.13); a row the boolean mask covers whole with a finite
    ``fill`` is the mean of ``value`` (every score is the fill: uniform weights). Not
    covered: that mean with dropout active (``dropout_p > 0``); a row whose kept keys all
    score at or below ``fill + 104`` beside a finite fill (the reference weighs the filled
    keys there; the patterns' docstrings state that limit).
    """
    mask, keep = bias, None
    if source is not None:
        keep = _keep(source, masked)
        mask = torch.where(keep, bias, -math.inf)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask,
                                         dropout_p=dropout_p, scale=scale)
    out = out.masked_fill((mask == -math.inf).all(-1, keepdim=True), math.nan)
    if keep is not None and not math.isinf(fill):
        return torch.where(keep.any(-1, keepdim=True), out, value.mean(-2, keepdim=True))
    return out


def _masked_entries(mask: torch.Tensor) -> torch.Tensor:
    # nn.MultiheadAttention's masks: boolean True or float -inf masks an entry
    return mask if mask.dtype == torch.bool else mask == -math.inf


def nan_where_no_key(mha: torch.nn.MultiheadAttention, out: torch.Tensor,
                     key_padding_mask: torch.Tensor | None = None,
                     attn_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``out`` (the attention output ``mha`` computed with ``need_weights=False``) with NaN
    in every query row that some head lets attend to no key (``key_padding_mask`` and
    ``attn_mask`` merged): what ``mha`` computes with ``need_weights=True``, a softmax of
    only ``-inf``, where the SDPA path gives 0 or NaN by backend. ``add_zero_attn`` and
    ``bias_k`` add a key no mask covers: no such row then. Not covered: a float mask that
    masks with a finite value (no row is "empty" then, in either path)."""
    if key_padding_mask is None and attn_mask is None or mha.add_zero_attn or \
            mha.bias_k is not None:
        return out
    batched = out.dim() == 3
    b = (out.shape[0] if mha.batch_first else out.shape[1]) if batched else 1
    masked = torch.zeros((), dtype=torch.bool, device=out.device)
    if key_padding_mask is not None:
        masked = masked | _masked_entries(key_padding_mask).reshape(b, 1, 1, -1)
    if attn_mask is not None:
        a = _masked_entries(attn_mask)
        heads = 1 if a.dim() == 2 or a.shape[0] == 1 else mha.num_heads
        masked = masked | a.reshape(-1 if heads > 1 else 1, heads, *a.shape[-2:])
    no_key = masked.all(-1).any(1)  # (batch, query) or broadcastable to it
    if not batched:
        return out.masked_fill(no_key[0].unsqueeze(-1), math.nan)
    rows = no_key if mha.batch_first else no_key.transpose(0, 1)
    return out.masked_fill(rows.unsqueeze(-1), math.nan)
