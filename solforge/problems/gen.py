"""Input generators that respect what an input means.

Problem files call these from ``get_inputs`` so that indices, lengths, page tables and
masks are built as what they are (never random floats), and so that the evaluator can
draw floating-point data from several distributions without the problem knowing.

The evaluator seeds the global torch RNG before each ``get_inputs`` call and selects the
active distribution with :func:`distribution`. Every function here draws from the global
RNG, so a seed fixes the result.

Distributions (for :func:`randn` and what builds on it: :func:`logits`; the others are
exact by meaning):

- ``normal``: N(0, scale^2), the default.
- ``uniform``: U(-sqrt(3), sqrt(3)) * scale, the same variance with bounded tails.
- ``outliers``: normal, with 0.1% of the entries multiplied by 30, as LLM activations
  have (a kernel that accumulates in too little precision or clamps shows it here).
- ``heavy``: Student's t with 4 degrees of freedom, rescaled to unit variance: every
  entry heavy-tailed (a few per million beyond 10 sigma), as residual streams and
  gradients are, where ``outliers`` has a few fixed spikes.
While ``uniform``, ``outliers`` or ``heavy`` is active, ``torch.randn``/``randn_like``
called by the problem's own code draw from it too (the same shape, dtype, device,
generator), so files that draw with torch itself (synthesized problems, converted rows)
vary with the distribution; this module's generators hold the originals.

- ``signed``: as ``normal`` for :func:`randn`; and while it is active, ``torch.rand``
  and ``torch.rand_like`` called by the problem's own code draw U(-1, 1) instead of
  U(0, 1). It exists for files that do not draw through this module (plain KernelBench
  files, converted rows): their ``torch.rand`` activations are nonnegative, so
  ``relu(x) == x`` and "return the input" would pass a ReLU. This module's own
  generators keep U(0, 1) (they hold the original ``torch.rand``).

A solforge problem runs :data:`DEFAULT_DISTRIBUTIONS` unless it names its own; a plain
KernelBench file or a converted one runs :data:`PLAIN_DISTRIBUTIONS`.

Value-range helpers that mean something: :func:`logits` (the scale of a trained LM's
logits), :func:`probs` (rows that sum to one: a softmax of logits, or Dirichlet),
:func:`positive` (scales, variances), :func:`padding_mask` (right-padded batches).

Not covered: distributions for integer data, sparsity patterns, ``torch.rand`` variants
other than ``rand``/``rand_like`` under ``signed`` (``Tensor.uniform_``, ``torch.randint``
keep their ranges; ``Tensor.normal_`` keeps N(0, 1)), and threads: the distributions swap
the ``torch`` module's attributes for the block, so another thread drawing with
``torch.rand``/``torch.randn`` meanwhile gets their values too (the evaluator draws inputs
on one thread).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch

DISTRIBUTIONS = ("normal", "uniform", "outliers", "heavy", "signed")
# a solforge problem that names none: every float-valued draw through this module varies
DEFAULT_DISTRIBUTIONS = ("normal", "uniform", "outliers", "heavy")
# a file that draws with torch itself: its own draw, then its torch.rand made signed
PLAIN_DISTRIBUTIONS = ("normal", "signed")
_active = ["normal"]
_torch_rand = torch.rand
_torch_rand_like = torch.rand_like
_torch_randn = torch.randn
_torch_randn_like = torch.randn_like


def _signed(fn):  # U(0, 1) -> U(-1, 1), same shape, dtype, device and generator
    def draw(*args, **kwargs):
        if kwargs.get("out") is not None:  # writes into a caller's buffer: left as is
            return fn(*args, **kwargs)
        grad = bool(kwargs.pop("requires_grad", False))
        x = fn(*args, **kwargs).mul_(2).sub_(1)
        return x.requires_grad_() if grad else x
    return draw


def _reshaped(fn, name: str):
    """``torch.randn``/``randn_like`` drawing from distribution ``name`` instead of N(0, 1):
    the same shape, dtype, device and generator; the variance stays one."""
    def draw(*args, **kwargs):
        if kwargs.get("out") is not None:  # writes into a caller's buffer: left as is
            return fn(*args, **kwargs)
        grad = bool(kwargs.pop("requires_grad", False))
        x = fn(*args, **kwargs)
        if x.is_floating_point() and x.numel():
            with torch.no_grad():
                x.copy_(_shaped(x.float(), name))
        return x.requires_grad_() if grad else x
    return draw


def _shaped(z: torch.Tensor, name: str) -> torch.Tensor:
    """Standard-normal draws ``z`` (fp32) turned into distribution ``name``'s."""
    if name == "uniform":
        return (_torch_rand(z.shape, device=z.device) * 2 - 1) * math.sqrt(3.0)
    if name == "heavy":
        return _student_t(tuple(z.shape), z.device, first=z)
    mask = _torch_rand(z.shape, device=z.device) < 1e-3  # outliers
    return torch.where(mask, z * 30.0, z)


@contextlib.contextmanager
def distribution(name: str) -> Iterator[None]:
    """Make ``name`` the distribution :func:`randn` draws from inside the block; for
    ``signed``, make ``torch.rand``/``torch.rand_like`` draw U(-1, 1) inside it, and for
    ``uniform``, ``outliers`` and ``heavy``, make ``torch.randn``/``torch.randn_like`` draw
    from that distribution (files that draw with torch itself vary as well)."""
    if name not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {name!r}; use one of {DISTRIBUTIONS}")
    _active.append(name)
    signed = name == "signed" and torch.rand is _torch_rand
    shaped = name in ("uniform", "outliers", "heavy") and torch.randn is _torch_randn
    if signed:
        torch.rand, torch.rand_like = _signed(_torch_rand), _signed(_torch_rand_like)
    if shaped:
        torch.randn = _reshaped(_torch_randn, name)
        torch.randn_like = _reshaped(_torch_randn_like, name)
    try:
        yield
    finally:
        if signed:
            torch.rand, torch.rand_like = _torch_rand, _torch_rand_like
        if shaped:
            torch.randn, torch.randn_like = _torch_randn, _torch_randn_like
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
        x = (_torch_rand(shape_t, device=device) * 2 - 1) * math.sqrt(3.0)
    elif dist == "heavy":
        x = _student_t(shape_t, device)
    else:
        x = _torch_randn(shape_t, device=device)
        if dist == "outliers" and x.numel() > 0:
            mask = _torch_rand(shape_t, device=device) < 1e-3
            x = torch.where(mask, x * 30.0, x)
    return (x * scale).to(dtype)


HEAVY_DOF = 4


def _student_t(shape: tuple[int, ...], device: str | torch.device | None,
               first: torch.Tensor | None = None) -> torch.Tensor:
    """Student's t (HEAVY_DOF degrees of freedom) over unit variance: normal / sqrt(chi2/dof),
    the chi-square drawn as a sum of squared normals so only randn's generator is used
    (``first``: the normal numerator, already drawn)."""
    z = _torch_randn(shape, device=device) if first is None else first
    chi2 = torch.zeros(shape, device=device)
    for _ in range(HEAVY_DOF):
        chi2 += _torch_randn(shape, device=device).square()
    t = z / torch.sqrt(chi2 / HEAVY_DOF).clamp_min(1e-3)
    return t / math.sqrt(HEAVY_DOF / (HEAVY_DOF - 2))


# A trained LM's next-token logits spread over several units (a std of a few; the corpus's
# cross-entropy problems draw 3), where a std of 1 makes softmax nearly flat over 128k
# entries and hides a kernel that loses the max-subtraction. An order of magnitude, not a
# measurement of one model.
LOGIT_STD = 3.0


def logits(*shape, scale: float = LOGIT_STD, dtype: torch.dtype = torch.float32,
           device: str | torch.device | None = None) -> torch.Tensor:
    """Logits with a trained model's spread: the active distribution times ``scale`` (its
    std), so ``softmax`` is neither flat nor one-hot and a cross-entropy's terms vary."""
    return randn(*shape, dtype=dtype, scale=scale, device=device)


def probs(*shape, dim: int = -1, scale: float = LOGIT_STD, alpha: float | None = None,
          dtype: torch.dtype = torch.float32,
          device: str | torch.device | None = None) -> torch.Tensor:
    """Nonnegative rows summing to one along ``dim`` (computed in fp32, then cast): the
    softmax of :func:`logits` with std ``scale``, or, given ``alpha``, a symmetric
    Dirichlet(alpha) (small alpha: peaked rows, alpha 1: uniform over the simplex)."""
    shape_t = _shape(shape)
    if alpha is None:
        p = torch.softmax(logits(*shape_t, scale=scale, device=device), dim=dim)
    else:
        conc = torch.full(shape_t, float(alpha), device=device)
        g = torch.distributions.Gamma(conc, torch.ones_like(conc)).sample()
        p = g / g.sum(dim=dim, keepdim=True).clamp_min(1e-30)
    return p.to(dtype)


def variance(*shape, low: float = 0.05, high: float = 4.0, dtype: torch.dtype = torch.float32,
             device: str | torch.device | None = None) -> torch.Tensor:
    """Positive variances spread over two orders of magnitude (log-uniform in [low, high]):
    a norm's running variance, a saved 1/rstd^2."""
    u = _torch_rand(_shape(shape), device=device)
    return torch.exp(math.log(low) + u * (math.log(high) - math.log(low))).to(dtype)


def padding_mask(lengths_: torch.Tensor, max_len: int | None = None, *,
                 dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """(batch, max_len) True on each sequence's first ``lengths_[b]`` positions (a right-
    padded batch's attention mask, BERT's and Whisper's); for a float dtype, 0 where kept
    and -inf where masked (an additive mask)."""
    n = int(lengths_.max()) if max_len is None else int(max_len)
    keep = torch.arange(n, device=lengths_.device).unsqueeze(0) < lengths_.unsqueeze(1)
    if dtype == torch.bool:
        return keep
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(
        ~keep, float("-inf"))


def uniform(*shape, low: float = 0.0, high: float = 1.0, dtype: torch.dtype = torch.float32,
            device: str | torch.device | None = None) -> torch.Tensor:
    """U(low, high); for inputs whose range is part of their meaning (probabilities, scales)."""
    return (_torch_rand(_shape(shape), device=device) * (high - low) + low).to(dtype)


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
    scores = _torch_rand(int(tokens), int(num_experts))
    return scores.topk(int(top_k), dim=-1).indices.to(dtype=dtype, device=device)


__all__ = [
    "DISTRIBUTIONS", "DEFAULT_DISTRIBUTIONS", "PLAIN_DISTRIBUTIONS", "LOGIT_STD", "logits",
    "probs", "variance", "padding_mask",
    "distribution", "active_distribution", "randn", "uniform", "positive",
    "indices", "permutation", "lengths", "page_table", "causal_mask", "sliding_window_mask",
    "routing_ids",
]
