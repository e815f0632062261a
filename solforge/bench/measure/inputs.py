"""Building models and inputs the way KernelBench does, so its files and ours agree.

- Models: the RNG is seeded (42) right before ``Model(*init)`` and again right before
  ``ModelNew(*init)`` (both built under the evaluation device as default device, so their
  random weights come from that device's generator), so a solution that creates the same parameters in the same order
  gets the same weights under any names; then the reference's state dict is copied into
  the solution where keys and shapes match. Models go to eval mode unless the problem says
  otherwise (plain KernelBench files keep KernelBench's behaviour: no ``.eval()``).
- Inputs: ``get_inputs(**params)`` under a seeded RNG and an input distribution, with the
  evaluation device as torch's default device, so tensors created without an explicit
  device are drawn there directly (KernelBench builds them on the CPU and moves them; the
  values differ, the distribution does not). Tensors a problem builds on the CPU on
  purpose are moved afterwards; a ``get_inputs`` that accepts ``device`` is given it.
- Before every forward the RNG is reseeded, so a reference that draws random numbers
  inside ``forward`` is deterministic per input when it can be.

Not covered: models whose constructor needs a GPU-only operation on a CPU machine.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import torch
import torch.nn as nn

from solforge.problems import gen
from solforge.problems.spec import call_with_params

MODEL_SEED = 42


def init_args(module: ModuleType, params: dict[str, Any]) -> list[Any]:
    args = call_with_params(module.get_init_inputs, dict(params))
    return list(args) if isinstance(args, (list, tuple)) else [args]


def build_model(cls: type, args: list[Any], device: torch.device, eval_mode: bool,
                state_dict: dict[str, torch.Tensor] | None = None) -> nn.Module:
    """Seed, construct, copy matching weights, move to ``device``."""
    torch.manual_seed(MODEL_SEED)
    # built directly on the device: a 128k-vocab table takes ~15 s to fill on a CPU
    with torch.device(device):
        model = cls(*args)
    if state_dict is not None and isinstance(model, nn.Module):
        own = model.state_dict()
        matching = {k: v for k, v in state_dict.items()
                    if k in own and tuple(own[k].shape) == tuple(v.shape)}
        if matching:
            model.load_state_dict(matching, strict=False)
    if isinstance(model, nn.Module):
        model = model.to(device)
        if eval_mode:
            model.eval()
    return model


def make_inputs(module: ModuleType, params: dict[str, Any], seed: int, distribution: str,
                device: torch.device) -> list[Any]:
    """``get_inputs(**params)`` under ``seed`` and ``distribution``, on ``device``."""
    torch.manual_seed(seed)
    p = dict(params)
    if "device" in _parameters(module.get_inputs):
        p["device"] = device
    # drawn on the device itself: a CPU fills a 1 GB tensor with randn in seconds
    with gen.distribution(distribution), torch.device(device):
        inputs = call_with_params(module.get_inputs, p)
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def _parameters(fn: Any) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def clone_all(xs: list[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


def run_forward(model: Any, inputs: list[Any], seed: int) -> Any:
    """One inference call, RNG reseeded first (KernelBench's convention for randomness)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        return model(*inputs)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
