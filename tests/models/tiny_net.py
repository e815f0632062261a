"""A small model of repeated blocks, for `solforge extract tests.models.tiny_net:build`."""

from __future__ import annotations

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int, scale: float = 1.0) -> None:
        super().__init__()
        self.dim, self.scale = dim, scale
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, scale={self.scale}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.scale * torch.relu(self.proj(self.norm(x)))


class Net(nn.Module):
    def __init__(self, dim: int = 32, depth: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, scale=0.5) for _ in range(depth))
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def build(batch: int = 2):
    return Net(), (torch.randn(batch, 32),)
