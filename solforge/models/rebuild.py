"""How a captured module is built again inside a problem file: a recipe read from the live
module, checked by building it.

A problem's ``Model`` subclasses the captured module's own class (so its parameter names
are the live module's, and ``apply`` loads the live weights into a kept solution by name)
and calls the class's constructor with arguments read from the module: an attribute of the
parameter's name (``in_features``, ``eps``; a one-element tensor, an embedding's scale, as
its value), ``bias as whether the module has one, the
model's config (or one of its sub-configs) for a ``config`` parameter, the layer number of
the module's path for ``layer_idx``, the weight's last dimension for ``hidden_size``-like
names, an ``*eps*`` attribute for ``eps``. A recipe counts only when the module it builds
has the live module's ``repr``, parameter and buffer names and shapes and (small buffers of
modules under ten million parameters, built on the CPU; larger ones are built on the meta
device) values; otherwise the module is skipped and the reason recorded.

Parameters get fresh values of the live tensors' mean and standard deviation (a norm's
weight of ones stays ones): random-weight models have nothing more to keep, and weights a
user trained reach the kept solution through ``apply``, not through the problem.

Not covered: classes defined in ``__main__`` or a file that is not importable, constructors
whose arguments are not readable from the module (the reason names the parameter), and
modules whose behaviour depends on a constructor argument the ``repr`` does not show.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

_SIZE_NAMES = {"hidden_size", "dim", "embed_dim", "num_features", "d_model", "normalized_shape",
               "hidden_dim", "n_embd", "features"}
_SKIP_PARAMS = {"device", "dtype"}
_BUFFER_CHECK_NUMEL = 1 << 16
_META_NUMEL = 10_000_000
CONFIG = "__config__"  # the init argument that stands for the model's config


class RebuildError(ValueError):
    """The module cannot be rebuilt from what it exposes; the message says why."""


@dataclass
class Recipe:
    """How to build one module again."""

    module: str                                # the class's module, imported by the file
    qualname: str
    args: dict[str, Any] = field(default_factory=dict)   # init keyword -> literal or CONFIG
    config_cls: tuple[str, str] | None = None  # (module, class name) of the config
    config: dict[str, Any] | None = None
    # what the source model's config ran that ``to_dict`` leaves out: transformers' kernel
    # choices (``_attn_implementation`` "sdpa", ``_experts_implementation`` "grouped_mm"),
    # set again on the rebuilt config; without them a Mixtral MoE block rebuilt from its
    # dict loops over its experts in eager PyTorch, another computation than the model's
    implementations: dict[str, str] = field(default_factory=dict)
    param_stats: dict[str, tuple[float, float]] = field(default_factory=dict)

    def key(self) -> str:
        """What makes two modules the same problem (the layer number aside)."""
        args = {k: v for k, v in self.args.items() if k not in ("layer_idx", "layer_id")}
        return repr((self.module, self.qualname, sorted(args.items()), self.config,
                     sorted(self.implementations.items())))


def implementations(config: Any) -> dict[str, str]:
    """The kernel choices a transformers config holds outside its dict: each
    ``_<x>_implementation`` with a value (kept in ``_<x>_implementation_internal`` by
    transformers 5, set through the public-looking property of the same name)."""
    out = {}
    for attr, v in sorted(vars(config).items()):
        m = re.fullmatch(r"(_\w+_implementation)(?:_internal)?", attr)
        if m and isinstance(v, str) and v:
            out[m.group(1)] = v
    return out


def _literal(v: Any) -> bool:
    try:
        return ast.literal_eval(repr(v)) == v
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _configs(root: nn.Module) -> list[Any]:
    cfg = getattr(root, "config", None)
    if cfg is None:
        return []
    out = [cfg]
    for name in ("text_config", "vision_config", "audio_config", "encoder", "decoder"):
        sub = getattr(cfg, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            out.append(sub)
    return out


def _arg_candidates(name: str, p: inspect.Parameter, module: nn.Module, path: str,
                    root: nn.Module) -> list[Any]:
    """Values worth trying for constructor parameter ``name``; [] means leave it out."""
    if name == "config":
        return _configs(root)
    if name in ("layer_idx", "layer_id", "layer_number"):
        m = re.search(r"\.(\d+)(\.|$)", path)
        return [int(m.group(1))] if m else [0]
    if name == "bias" and isinstance(getattr(module, "bias", None), (nn.Parameter, type(None))):
        return [getattr(module, "bias", None) is not None]
    if hasattr(module, name) and _literal(getattr(module, name)):
        return [getattr(module, name)]
    value = getattr(module, name, None)
    if isinstance(value, torch.Tensor) and value.numel() == 1:  # a scale kept as a buffer
        return [value.item()]
    weight = getattr(module, "weight", None)
    if name in _SIZE_NAMES and isinstance(weight, torch.Tensor):
        last = int(weight.shape[-1])
        return [(last,) if name == "normalized_shape" else last]
    if "eps" in name:
        return [v for k, v in vars(module).items() if "eps" in k and isinstance(v, float)]
    return []


def _float_dtype(module: nn.Module) -> torch.dtype:
    """The dtype the module was cast to: its first floating parameter's or buffer's (a
    rotary embedding has only buffers)."""
    for t in (*module.parameters(), *module.buffers()):
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def _matches(built: nn.Module, live: nn.Module, values: bool = True) -> bool:
    if repr(built) != repr(live):
        return False
    a, b = dict(built.state_dict()), dict(live.state_dict())
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        return False
    live_buffers = dict(live.named_buffers())
    for k, buf in built.named_buffers():
        other = live_buffers.get(k)
        if other is None or other.shape != buf.shape:
            return False
        if values and buf.numel() <= _BUFFER_CHECK_NUMEL and not torch.allclose(
                buf.double().cpu(), other.double().cpu(), rtol=1e-5, atol=1e-6):
            return False
    return True


def recipe_for(module: nn.Module, path: str, root: nn.Module) -> Recipe:
    """A checked recipe for ``module`` (found at ``path`` in ``root``), or RebuildError."""
    cls = type(module)
    try:
        found = importlib.import_module(cls.__module__)
        for part in cls.__qualname__.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        found = None
    if found is not cls or "<locals>" in cls.__qualname__ or cls.__module__ == "__main__":
        raise RebuildError(f"{cls.__module__}.{cls.__qualname__} is not importable by its "
                           "name (define it in an importable module)")
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        raise RebuildError(f"{cls.__qualname__}.__init__ has no signature") from None
    options: list[tuple[str, list[Any]]] = []
    for name, p in list(sig.parameters.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or name in _SKIP_PARAMS:
            continue
        cands = _arg_candidates(name, p, module, path, root)
        if not cands:
            if p.default is p.empty:
                raise RebuildError(f"{cls.__qualname__}(...): no value for its argument "
                                   f"{name!r} can be read from the module")
            continue
        options.append((name, cands))
    # a large module (an MoE layer's experts: billions of values) is built on the meta
    # device: no memory, no init; its buffers' values are then not compared
    big = sum(p.numel() for p in module.parameters()) > _META_NUMEL
    for args in _combinations(options):
        try:
            with torch.device("meta" if big else "cpu"):
                built = cls(**args)
        except Exception:
            continue
        built = built.to(_float_dtype(module))
        if _matches(built.eval(), module, values=not big):
            return _recipe(cls, args, module)
    raise RebuildError(f"{cls.__qualname__}: no constructor call read from the module "
                       f"builds one like it (tried arguments {[n for n, _ in options]})")


def _combinations(options: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{}]
    for name, cands in options:
        out = [{**o, name: c} for o in out for c in cands[:4]]
    return out[:16]


def _recipe(cls: type, args: dict[str, Any], module: nn.Module) -> Recipe:
    r = Recipe(module=cls.__module__, qualname=cls.__qualname__)
    for k, v in args.items():
        if hasattr(v, "to_dict") and hasattr(type(v), "from_dict"):
            d = v.to_dict()
            if not _literal(d):
                raise RebuildError(f"{cls.__qualname__}: its config is not plain data")
            r.config, r.config_cls = d, (type(v).__module__, type(v).__name__)
            r.implementations = implementations(v)
            r.args[k] = CONFIG
        else:
            r.args[k] = v
    for n, p in module.named_parameters():
        x = p.detach().float()
        r.param_stats[n] = (round(float(x.mean()), 6),
                            round(float(x.std()) if x.numel() > 1 else 0.0, 6))
    return r
