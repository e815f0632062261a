"""Input generators that respect what an input means.

Problem files call these from ``get_inputs`` so that indices, lengths, page tables and
masks are built as what they are (never random floats), and so that the evaluator can
draw floating-point data from several distributions without the problem knowing.

The evaluator seeds the global torch RNG before each ``get_inputs`` call and selects the
active distribution with :func:`distribution`. Every function here draws from the global
RNG, so a seed fixes the result.

Distributions (for :func:`randn` only; the others are exact by meaning):

- ``normal``: N(0, scale^2), the default.
- ``uniform``: U(-sqrt(3), sqrt(3)) * scale, the same variance with bounded tails.
- ``outliers``: normal, with 0.1% of the entries multiplied by 30, as LLM activations
  have (a kernel that accumulates in too little precision or clamps shows it here).

Not covered: distributions for integer data, and sparsity patterns.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch

DISTRIBUTIONS = ("normal", "uniform", "outliers")
_active = ["normal"]


@contextlib.contextmanager
def distribution(name: str) -> Iterator[None]:
    """Make ``name`` the distribution :func:`randn` draws from inside the block."""
    if name not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {name!r}; use one of {DISTRIBUTIONS}")
    _active.append(name)
    try:
        yield
    finally:
        _active.pop()


def active_distribution() -> str:
    return _active[-1]


def _shape(shape: Sequence[int] | tuple) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


def randn(*shape, dtype: torch.dtype = torch.float32, scale: float = 1.0,
          device: str | torch.device | None = None) -> torch.Tensor:
    """Floating data with the active distribution, cast to ``dtype`` at the end."""
    shape_t = _shape(shape)
    dist = active_distribution()
    if dist == "uniform":
        x = (torch.rand(shape_t, device=device) * 2 - 1) * math.sqrt(3.0)
    else:
        x = torch.randn(shape_t, device=device)
        if dist == "outliers" and x.numel() > 0:
            mask = torch.rand(shape_t, device=device) < 1e-3
            x = torch.where(mask, x * 30.0, x)
    return (x * scale).to(dtype)


def uniform(*shape, low: float = 0.0, high: float = 1.0, dtype: torch.dtype = torch.float32,
            device: str | torch.device | None = None) -> torch.Tensor:
    """U(low, high); for inputs whose range is part of their meaning (probabilities, scales)."""
    return (torch.rand(_shape(shape), device=device) * (high - low) + low).to(dtype)


def positive(*shape, low: float = 0.5, high: float = 2.0, dtype: torch.dtype = torch.float32,
             device: str | torch.device | None = None) -> torch.Tensor:
    """Strictly positive values: quantization scales, norms' weights, variances."""
    return uniform(*shape, low=low, high=high, dtype=dtype, device=device)


def indices(high: int, *shape, dtype: torch.dtype = torch.int64,
            device: str | torch.device | None = None) -> torch.Tensor:
    """Integer indices in [0, high): token ids, expert ids, gather positions."""
    return torch.randint(0, int(high), _shape(shape), dtype=dtype, device=device)


def permutation(n: int, dtype: torch.dtype = torch.int64,
                device: str | torch.device | None = None) -> torch.Tensor:
    """A random permutation of range(n) (distinct indices)."""
    return torch.randperm(int(n), device=device).to(dtype)


def lengths(batch: int, max_len: int, min_len: int = 1, *, include_max: bool = True,
            dtype: torch.dtype = torch.int32,
            device: str | torch.device | None = None) -> torch.Tensor:
    """Sequence lengths in [min_len, max_len]; with ``include_max`` one sequence is full."""
    out = torch.randint(int(min_len), int(max_len) + 1, (int(batch),), dtype=dtype)
    if include_max and batch > 0:
        out[torch.randint(0, int(batch), (1,))] = int(max_len)
    return out.to(device) if device is not None else out


def page_table(seq_lens: torch.Tensor, page_size: int, num_pages: int | None = None,
               dtype: torch.dtype = torch.int32) -> tuple[torch.Tensor, int]:
    """A block table for paged KV caches: distinct physical pages per sequence, shuffled.

    Returns ``(table, num_pages)``; ``table[b, i]`` is the physical page of sequence b's
    i-th logical page, padded with 0 past each sequence's last page (never read, since the
    lengths say where each sequence ends).
    """
    pages_per_seq = [(int(n) + page_size - 1) // page_size for n in seq_lens.tolist()]
    need = sum(pages_per_seq)
    total = max(need, num_pages or 0, 1)
    phys = torch.randperm(total)
    width = max(pages_per_seq + [1])
    table = torch.zeros(len(pages_per_seq), width, dtype=dtype)
    at = 0
    for b, n in enumerate(pages_per_seq):
        table[b, :n] = phys[at:at + n].to(dtype)
        at += n
    return table, total


def causal_mask(q_len: int, kv_len: int | None = None, *, dtype: torch.dtype = torch.bool,
                device: str | torch.device | None = None) -> torch.Tensor:
    """True where a query may attend (bottom-right aligned when kv_len > q_len)."""
    kv_len = q_len if kv_len is None else kv_len
    q = torch.arange(q_len, device=device).unsqueeze(1) + (kv_len - q_len)
    k = torch.arange(kv_len, device=device).unsqueeze(0)
    allowed = k <= q
    if dtype == torch.bool:
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(
        ~allowed, float("-inf"))


def sliding_window_mask(q_len: int, window: int, *, device: str | torch.device | None = None
                        ) -> torch.Tensor:
    """True where a query may attend: causal and at most ``window - 1`` positions back."""
    q = torch.arange(q_len, device=device).unsqueeze(1)
    k = torch.arange(q_len, device=device).unsqueeze(0)
    return (k <= q) & (k > q - window)


def routing_ids(tokens: int, num_experts: int, top_k: int, dtype: torch.dtype = torch.int64,
                device: str | torch.device | None = None) -> torch.Tensor:
    """Distinct expert ids per token (what a top-k router produces)."""
    scores = torch.rand(int(tokens), int(num_experts))
    return scores.topk(int(top_k), dim=-1).indices.to(dtype=dtype, device=device)


__all__ = [
    "DISTRIBUTIONS", "distribution", "active_distribution", "randn", "uniform", "positive",
    "indices", "permutation", "lengths", "page_table", "causal_mask", "sliding_window_mask",
    "routing_ids",
]
