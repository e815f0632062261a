"""GroupNorm and InstanceNorm with fp32 statistics, weight and bias optional, any float
dtype in, the input's dtype out: rows of ``row_norm``.

A group (GroupNorm) is ``C / groups`` contiguous channels of one sample, spatial dims
included: one row of ``C / groups * H * W`` elements (KernelBench's GroupNorm(8, 64) on
[112, 64, 512, 512]: 896 rows of 2M elements). InstanceNorm is GroupNorm with a group per
channel: a row per (sample, channel) plane (KernelBench's InstanceNorm2d(64): 7168 rows of
262144). The weight and bias are per channel, applied per element (``row_norm``'s
``PER_CHANNEL``). Long rows take the one-read cooperative path when they fill the GPU.

Matches ``F.group_norm`` (biased variance, ``(x - mean) * rstd * w + b`` in fp32, rounded
once) and ``F.instance_norm`` with ``use_input_stats=True``: the statistics are always the
instance's own (``nn.InstanceNorm*d`` with ``track_running_stats=False``, its default, in
training or eval mode).

Not covered: running statistics (InstanceNorm with ``track_running_stats=True`` updates
them in training and normalises with them in eval); channels-last inputs are copied to
contiguous first; a weight or bias in another dtype than the input's (read and promoted to
fp32 here; the search patterns refuse them); returning the mean and rstd for a backward.
"""

from __future__ import annotations

import math

import torch

from solforge.kernels.triton import row_norm


def group_norm(x: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5, *,
               cooperative: bool = True) -> torch.Tensor:
    """``F.group_norm(x, num_groups, weight, bias, eps)`` of ``x`` [N, C, *spatial];
    ``cooperative`` as for ``row_norm.norm_rows``."""
    if x.dim() < 2:
        raise ValueError(f"group_norm of an input of shape {tuple(x.shape)}: expected "
                         "[N, C, *spatial]")
    n, c = x.shape[:2]
    if num_groups <= 0 or c % num_groups:
        raise ValueError(f"group_norm: {c} channels do not split into {num_groups} groups")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected ({c},)")
    spatial = math.prod(x.shape[2:])
    per_group = c // num_groups
    rows = x.contiguous().view(n * num_groups, per_group * spatial)
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    affine = row_norm.NO_AFFINE if weight is None and bias is None else row_norm.PER_CHANNEL
    row_norm.norm_rows(rows, y, row_norm.MEAN_VAR, eps,
                       weight.contiguous() if weight is not None else None,
                       bias.contiguous() if bias is not None else None, affine,
                       groups=num_groups, per_group=per_group, spatial=spatial,
                       cooperative=cooperative)
    return y.view(x.shape)


def instance_norm(x: torch.Tensor, weight: torch.Tensor | None = None,
                  bias: torch.Tensor | None = None, eps: float = 1e-5, *,
                  cooperative: bool = True) -> torch.Tensor:
    """``F.instance_norm(x, None, None, weight, bias, use_input_stats=True, eps=eps)`` of
    ``x`` [N, C, *spatial]: GroupNorm with a group per channel."""
    if x.dim() < 3 or math.prod(x.shape[2:]) < 2:
        raise ValueError(f"instance_norm of an input of shape {tuple(x.shape)}: expected "
                         "[N, C, *spatial] with more than one spatial element")
    return group_norm(x, x.shape[1], weight, bias, eps, cooperative=cooperative)
