"""The dispatcher a patched module gets: its fast positional path, its keyword path, the
fallback for an unverified signature, and a solution module's own hooks."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from solforge.models.apply import Kept, Patch, _Dispatch


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, hidden_states: torch.Tensor, bias: float = 0.0) -> torch.Tensor:
        return hidden_states * self.factor + bias


def _patch(new: nn.Module) -> tuple[nn.Module, Patch]:
    live = Scale(1.0)
    kept = Kept(problem="p", problem_path=Path("p.py"), solution_path=Path("s.py"),
                record={}, extracted={}, device_type="cpu",
                signatures={(("hidden_states", (2, 3), "float32"),)})
    patch = Patch(model=live)
    live.forward = _Dispatch(patch, "", live, new, kept)
    patch.modules[""] = live.forward
    return live, patch


def test_verified_calls_run_the_solution_by_position_and_by_keyword():
    live, patch = _patch(Scale(2.0))
    x = torch.ones(2, 3)
    assert torch.equal(live(x), 2 * x)                      # positional: the fast path
    assert torch.equal(live(hidden_states=x), 2 * x)        # keyword: the general path
    assert torch.equal(live(x, bias=0.0), 2 * x)            # a default given is a default
    assert patch.stats()[""]["patched"] == 3
    assert torch.equal(live(x, 1.0), x + 1)                 # a non-default: the original
    assert torch.equal(live(torch.ones(4, 3)), torch.ones(4, 3))  # a shape never verified
    assert torch.equal(live(x.double()), x.double())        # a dtype never verified
    stats = patch.stats()[""]
    assert (stats["patched"], stats["fallback"]) == (3, 3)
    assert "hidden_states: [4, 3] float32 cpu" in stats["fallback_signatures"]
    patch.enabled = False
    assert torch.equal(live(x), x)
    assert patch.stats()[""]["patched"] == 3


def test_a_solution_modules_own_hooks_still_run():
    new = Scale(2.0)
    seen: list[tuple] = []
    new.register_forward_hook(lambda m, args, out: seen.append(tuple(out.shape)))
    live, patch = _patch(new)
    assert torch.equal(live(torch.ones(2, 3)), torch.full((2, 3), 2.0))
    assert seen == [(2, 3)]
    plain, _ = _patch(Scale(2.0))
    assert plain.forward.run == plain.forward.new.forward  # no hooks: called directly
