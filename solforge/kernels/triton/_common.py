"""What the kernel modules share: the autotune space, row views, casts, fp32 activations.

Every kernel autotunes over a few GPU configs. Under ``TRITON_INTERPRET=1`` (Triton's CPU
interpreter, how solforge runs Triton on a machine without a GPU) the autotuner would run
every config through the interpreter, slowly, so there it gets one config instead; that
config uses small tiles on purpose, so CPU runs go through the multi-tile and masked
paths that the GPU's large tiles can skip on small shapes.

The flag is read once, at import: set the variable before importing this package.
"""

from __future__ import annotations

import functools
import math
import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
_INTERPRET = tl.constexpr(INTERPRET)


def autotune_configs(gpu: list[triton.Config], interpret: triton.Config) -> list[triton.Config]:
    """``gpu`` on a GPU, only ``interpret`` under the interpreter (see the module docstring)."""
    return [interpret] if INTERPRET else gpu


def elementwise_configs() -> list[triton.Config]:
    """Column-tile configs shared by the elementwise row kernels (activations, GLUs)."""
    return autotune_configs(
        [triton.Config({"BLOCK_N": 1024}, num_warps=4),
         triton.Config({"BLOCK_N": 2048}, num_warps=4),
         triton.Config({"BLOCK_N": 2048}, num_warps=8),
         triton.Config({"BLOCK_N": 4096}, num_warps=8)],
        triton.Config({"BLOCK_N": 128}, num_warps=4),
    )


# Row tiles: a kernel that walks its rows BLOCK_M at a time, each tile BLOCK_M whole rows
# of a power-of-two BLOCK_N. A tile of ~1K-16K elements keeps enough loads in flight
# without spilling the registers that hold it (several live values of that size).
ROW_TILE_ELEMENTS = (1024, 16384)
# and a thread's share of one such value: 4 elements (one 16-byte fp32 vector) up to 64
ROW_TILE_PER_THREAD = (4, 64)
# the autotuner's choices on a GPU (pruned per row length by fitting_row_tiles)
ROW_TILE_BLOCK_M = (1, 2, 4, 8, 16, 32)
ROW_TILE_WARPS = (4, 8, 16)


def row_tile_configs() -> list[triton.Config]:
    """``BLOCK_M`` (rows per tile) x ``num_warps`` for a row-tile kernel (prune them with
    :func:`fitting_row_tiles`); under the interpreter one config of 2 rows, so CPU runs
    cross tile ends inside a program's rows."""
    return autotune_configs(
        [triton.Config({"BLOCK_M": m}, num_warps=w)
         for m in ROW_TILE_BLOCK_M for w in ROW_TILE_WARPS],
        triton.Config({"BLOCK_M": 2}, num_warps=4),
    )


def _outside(x: float, bounds: tuple[int, int]) -> float:
    """How far ``x`` lies outside ``bounds``, as a ratio (1.0: inside)."""
    lo, hi = bounds
    return lo / x if x < lo else x / hi if x > hi else 1.0


def fitting_row_tiles(configs: list[triton.Config], named_args: dict,
                      **kwargs) -> list[triton.Config]:
    """The row-tile configs that suit rows of ``named_args["N"]`` (the kernel's tile is
    ``BLOCK_M`` x ``next_power_of_2(N)``): a tile within ``ROW_TILE_ELEMENTS`` and a
    thread's share of it within ``ROW_TILE_PER_THREAD``; where none is within, the
    nearest (rows of 2 take the most rows, rows of 64K one row on the most warps).

    Triton's autotuner calls it as ``(configs, named_args, **kwargs)`` (3.x; the
    meta-parameters passed by keyword arrive in ``kwargs``): only ``N``, which the
    kernels take positionally, is read, so it works wherever ``N`` is in ``named_args``."""
    block_n = triton.next_power_of_2(max(int(named_args["N"]), 1))
    tile = {c: c.kwargs["BLOCK_M"] * block_n for c in configs}
    best = min(_outside(t, ROW_TILE_ELEMENTS) for t in tile.values())
    kept = [c for c in configs if _outside(tile[c], ROW_TILE_ELEMENTS) == best]
    share = {c: tile[c] / (32 * c.num_warps) for c in kept}
    best = min(_outside(x, ROW_TILE_PER_THREAD) for x in share.values())
    return [c for c in kept if _outside(share[c], ROW_TILE_PER_THREAD) == best]


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as [rows, last dim] with unit column stride: a view when the layout allows,
    else a contiguous copy (the kernels address rows by one stride)."""
    rows = x.reshape(-1, x.shape[-1])
    return rows if rows.stride(-1) == 1 or rows.shape[-1] == 1 else rows.contiguous()


# Long rows split over several programs (``row_splits``): each program's share of a row
# is at least this long; under the interpreter a short one, so CPU runs split too.
SPLIT_MIN = 128 if INTERPRET else 4096
# and the programs of a launch aim at this many per SM (a fake count of 4 SMs under the
# interpreter), so that a few long rows still spread over the whole device
SPLIT_PER_SM = 4


@functools.lru_cache(maxsize=None)
def sm_count(device: str) -> int:
    """The device's SM count; 4 under the interpreter or off a GPU."""
    if INTERPRET or not device.startswith("cuda"):
        return 4
    return torch.cuda.get_device_properties(torch.device(device)).multi_processor_count


def row_splits(rows: int, n: int, device: torch.device, tile: int,
               min_chunk: int = SPLIT_MIN) -> tuple[int, int]:
    """(programs per row, elements per program) for a reduction over rows of ``n``: one
    program per row when the rows alone fill the device ``SPLIT_PER_SM`` times over or a
    row is short; else as many as fill it, each with a multiple of ``tile`` elements and
    at least ``min_chunk`` of them. Batch-1 decoding over a 128k vocabulary is one row:
    on one program it runs on one SM of 132."""
    target = SPLIT_PER_SM * sm_count(str(device))
    splits = min(-(-target // max(rows, 1)), n // min_chunk)
    if splits <= 1:
        return 1, n
    chunk = -(-n // splits)
    chunk = -(-chunk // tile) * tile
    return -(-n // chunk), chunk


def around_dim(shape: torch.Size | tuple[int, ...], d: int) -> tuple[int, int, int]:
    """``(A, K, B)``: the sizes before dim ``d`` multiplied, ``d``'s own, those after it."""
    return math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:])


def reads_as_akb(x: torch.Tensor, d: int) -> bool:
    """Whether ``x`` reads as ``[A, K, B]`` (``around_dim``) by strides: the dims after
    ``d`` one contiguous block, those before it one stride (a slice such as ``x[:, 1:]``
    needs no copy). The kernels over a middle dim then address ``x`` by ``x.stride(d)``
    and ``x.stride(d - 1)``."""
    shape, stride = x.shape, x.stride()
    inner = 1
    for i in range(x.dim() - 1, d, -1):
        if shape[i] != 1 and stride[i] != inner:
            return False
        inner *= shape[i]
    return all(shape[i] == 1 or stride[i] == stride[i + 1] * shape[i + 1]
               for i in range(d - 1))


def as_akb(x: torch.Tensor, d: int) -> tuple[torch.Tensor, int]:
    """``x`` as the middle-dim kernels read it: itself when it reads as ``[A, K, B]``
    (``reads_as_akb``), else a contiguous copy; and the stride from one ``a`` to the next
    (0 when ``d`` is the first dim)."""
    if not reads_as_akb(x, d):
        x = x.contiguous()
    return x, (x.stride(d - 1) if d else 0)


@triton.jit
def piece_of_row(x_ptr, stride_x, CHUNK):
    """For program (row, piece) of a split launch: (row, piece, the piece's first column,
    the row's start in ``x``)."""
    row = tl.program_id(0).to(tl.int64)
    piece = tl.program_id(1)
    return row, piece, piece.to(tl.int64) * CHUNK, x_ptr + row * stride_x


def row_block(n: int, limit: int = 65536) -> int:
    """The power-of-two tile that holds a whole row of ``n`` elements in registers."""
    if n > limit:
        raise ValueError(f"rows of {n} elements exceed this kernel's limit of {limit} "
                         "(it keeps a whole row in registers)")
    return triton.next_power_of_2(n)


@triton.jit
def cast_rne(x, dtype: tl.constexpr):
    """``x.to(dtype)`` rounding to nearest even, as a GPU's cast and PyTorch's do.

    The interpreter's casts to bf16 and e4m3 do not: bf16 truncates (a bias that sums up
    in a following GEMM) and e4m3 can drop a carry (a 2x error). Under the interpreter those
    two are rounded on the bits first, so its cast only meets representable values; the
    branch is compiled out on a GPU. For e4m3, ``x`` must already be within [-448, 448].
    """
    if _INTERPRET:
        if dtype == tl.bfloat16:
            x = _round_mantissa(x.to(tl.float32), 7)
        elif dtype == tl.float8e4nv:
            x = _round_to_e4m3(x.to(tl.float32))
    return x.to(dtype)


@triton.jit
def _round_mantissa(x, BITS: tl.constexpr):
    """fp32 ``x`` rounded half to even to ``BITS`` mantissa bits, on the integer bits (a
    carry out of the mantissa correctly bumps the exponent)."""
    DROP: tl.constexpr = 23 - BITS
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + ((1 << (DROP - 1)) - 1) + ((bits >> DROP) & 1)) & -(1 << DROP)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _round_to_e4m3(x):
    normal = _round_mantissa(x, 3)
    # below 2^-6 e4m3 is subnormal with a fixed step of 2^-9: adding 1.5 * 2^14 makes fp32's
    # own round-half-to-even drop exactly the bits below that step; done on |x| and the
    # sign put back, so values that round to zero keep theirs (-0.0, as torch's cast)
    tiny = (tl.abs(x) + 24576.0) - 24576.0
    subnormal = tl.where(x.to(tl.int32, bitcast=True) < 0, -tiny, tiny)
    return tl.where(tl.abs(x) < 0.015625, subnormal, normal)


# Activations on fp32 values, shared by the bias+activation and gated-unit kernels.
# Triton has no tanh in its core math, so the tanh GELU goes through exp: for large |z|
# exp overflows to inf and 1 - 2 / (inf + 1) is exactly 1, as tanh saturates.

@triton.jit
def gelu_erf(x):
    return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))


@triton.jit
def gelu_tanh(x):
    z = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = 1.0 - 2.0 / (tl.exp(2.0 * z) + 1.0)
    return 0.5 * x * (1.0 + t)


@triton.jit
def silu(x):
    return x * tl.sigmoid(x)


@triton.jit
def apply_activation(x, ACT: tl.constexpr):
    """``ACT`` is one of ACTIVATIONS' codes; 0 is the identity."""
    if ACT == 1:
        x = gelu_erf(x)
    elif ACT == 2:
        x = gelu_tanh(x)
    elif ACT == 3:
        x = silu(x)
    return x


ACTIVATIONS = {None: 0, "none": 0, "gelu": 1, "gelu_tanh": 2, "silu": 3}


def activation_code(name: str | None) -> int:
    try:
        return ACTIVATIONS[name]
    except KeyError:
        names = ", ".join(repr(k) for k in ACTIVATIONS if k)
        raise ValueError(f"unknown activation {name!r}; use one of {names} or None") from None
