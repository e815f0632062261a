"""One extracted group's problem file: the KernelBench ``Model``/``get_inputs``/
``get_init_inputs`` of a captured module, rebuilt from its recipe (``rebuild.py``), with
``SOLFORGE`` metadata naming the source model, the module paths, the calls and the share of
the model's time per workload; with ``backward``, the module's backward problem
(``<name>_bwd``: the gradients of the floating inputs and the parameters, computed by
autograd through the module itself). ``extract.py`` decides what is written; this module
only writes one file's text.

Not covered: modules whose constructor arguments ``rebuild.py`` cannot recover (they never
reach here), and inputs other than tensors (the captured calls hold tensors only).
"""

from __future__ import annotations

import re
from pathlib import Path
from pprint import pformat
from typing import Any

import torch

from solforge.models.capture import dtype_name
from solforge.models.rebuild import CONFIG
from solforge.models.source import BuiltModel

PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
GRAD_PRECISION = {"fp32": "fp32_grad", "bf16": "bf16_grad"}


def _dtype(built: BuiltModel) -> torch.dtype:
    p = next(built.model.parameters(), None)
    return p.dtype if p is not None else torch.float32


def fraction(part_ms: float, whole_ms: float) -> float:
    """``part_ms / whole_ms`` at most 1: a module that is nearly all of a step (a MoE's
    experts on a CPU) can time above the step's median by noise, since each is the median of
    its own repeats; a share above 1 would make the problem file invalid."""
    return min(1.0, part_ms / whole_ms) if whole_ms > 0 else 0.0


def _train(workload: str) -> str:
    """A prefill workload's name as its backward problem's (``train_b1_s128``)."""
    return "train" + workload.removeprefix("prefill")


def _paths_summary(paths: list[str]) -> str:
    pattern = sorted({re.sub(r"\.\d+(?=\.|$)", ".*", p) for p in paths})
    return ", ".join(pattern)


def _family(built: BuiltModel) -> str:
    cfg = getattr(built.model, "config", None)
    return str(getattr(cfg, "model_type", "") or Path(built.name).name)


_FLOATS = ("float32", "float16", "bfloat16", "float64")


def problem_source(g: Any, built: BuiltModel, share: float,
                   step_ms: dict[str, float], backward: bool = False,
                   roofline: dict[str, Any] | None = None) -> str:
    """The problem file of one group (an ``extract.Group``: KernelBench format +
    SOLFORGE); with ``backward``, its backward problem (module docstring); ``roofline``
    (``roofline.roofline_fraction``'s answer) adds ``model_roofline``, the planner's
    estimate of its headroom before anything was tried."""
    r = g.recipe
    top, _, rest = r.qualname.partition(".")
    dt = dtype_name(_dtype(built))
    cpu = built.device.type == "cpu"
    table = g.backward if backward else g.workloads
    workloads = []
    calls: dict[str, int] = {}
    shares: dict[str, float] = {}
    for name, w in table.items():
        wname = _train(name) if backward else name
        params: dict[str, Any] = {"inputs": w["inputs"]}
        if backward:
            params["grads"] = [t for t in w["outputs"] if t["dtype"] in _FLOATS]
        workloads.append({"name": wname, "params": params, "cpu": cpu})
        calls[wname] = w["calls"]
        shares[wname] = round(fraction(w["ms"], step_ms.get(w["step"].name) or 1.0), 6)
    first = next(iter(table.values()))
    arg_names = [t["name"] for t in first["inputs"]]
    grad_names = [f"grad_{t['name']}" for t in first["outputs"] if t["dtype"] in _FLOATS]
    grad_index = [i for i, t in enumerate(first["outputs"]) if t["dtype"] in _FLOATS]
    init_args = ", ".join(f"{k}=_config" if v == CONFIG else f"{k}={v!r}"
                          for k, v in r.args.items())
    extracted = {
        "model": built.name, "kind": built.kind, "overrides": built.overrides,
        "class": g.cls, "module_paths": g.paths, "calls": calls, "shares": shares,
        "dtype": dt, "device": built.device.type,
    }
    name = f"{g.name}_bwd" if backward else g.name
    what = "the backward of " if backward else ""
    meta = {
        "name": name, "category": "model", "models": [f"{built.name} ({built.kind})"],
        "family": _family(built), "direction": "backward" if backward else "forward",
        "shapes_from": f"solforge extract of {built.name} ({built.kind}): the module's "
                       "calls in the steps asked",
        # gradients are judged at their own scale (problems/precision.py: *_grad classes)
        "precision": (GRAD_PRECISION.get(PRECISION.get(dt, "fp32"), PRECISION.get(dt, "fp32"))
                      if backward else PRECISION.get(dt, "fp32")),
        "description": f"{what}{r.qualname} at {_paths_summary(g.paths)} of {built.name} "
                       f"({len(g.paths)} module(s)); {share:.1%} of the model's time in "
                       "the extracted steps."
                       + (" Returns the gradients of the floating inputs, then of the "
                          "parameters in named_parameters order, given each floating "
                          "output's gradient." if backward else ""),
        "workloads": workloads, "distributions": ["normal", "outliers"],
        "model_share": round(share, 6), "extracted": extracted,
    }
    if roofline and roofline.get("fraction") is not None:
        meta["model_roofline"] = roofline["fraction"]
        extracted["roofline"] = {k: v for k, v in roofline.items() if k != "fraction"}
    lines = [
        (f'"""{what}{r.qualname} of {built.name}, extracted by `solforge extract` from '
         f'{len(g.paths)} module(s): {_paths_summary(g.paths)}."""'),
        "", "import torch", "", "from solforge.problems import gen",
        f"from {r.module} import {top} as _Cls",
    ]
    if r.config_cls:
        lines.append(f"from {r.config_cls[0]} import {r.config_cls[1]} as _Config")
    lines += ["", f"_Base = _Cls{'.' + rest if rest else ''}", ""]
    if r.config is not None:
        lines += ["# the source model's config, for the constructor",
                  f"CONFIG = {pformat(r.config, width=96, sort_dicts=True)}", ""]
    if r.implementations:
        lines += ["# the kernels the source model's config chose, which its dict leaves out",
                  f"IMPLEMENTATIONS = {pformat(r.implementations, width=96)}", ""]
    lines += ["# per parameter: mean and standard deviation of the source model's values",
              f"PARAMS = {pformat(r.param_stats, width=96)}", "",
              f"SOLFORGE = {pformat(meta, width=96, sort_dicts=False)}", "", "",
              "class Model(_Base):",
              f"    def __init__(self, dtype=torch.{dt}):"]
    if r.config is not None:
        lines.append("        _config = _Config.from_dict(CONFIG)")
    if r.implementations:
        lines += ["        for _name, _value in IMPLEMENTATIONS.items():",
                  "            setattr(_config, _name, _value)"]
    lines += [f"        super().__init__({init_args})",
              "        with torch.no_grad():",
              "            for name, p in self.named_parameters():",
              "                mean, std = PARAMS[name]",
              "                p.normal_(mean, std) if std > 0 else p.fill_(mean)",
              "        self.to(dtype)", ""]
    if backward:
        lines += [
            f"    def forward(self, {', '.join(arg_names + grad_names)}):",
            "        # autograd through the module itself, whatever grad mode the caller is in",
            "        with torch.enable_grad():",
            "            leaves = [t.detach().requires_grad_(t.is_floating_point())",
            f"                      for t in ({', '.join(arg_names)},)]",
            "            out = super().forward(*leaves)",
            "            outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)",
            "            wrt = [t for t in leaves if t.requires_grad] + [",
            "                p for _, p in self.named_parameters() if p.requires_grad]",
            "            # an output that depends on nothing differentiable adds no gradient",
            f"            pairs = [(outs[i], g) for i, g in zip({grad_index!r}, "
            f"[{', '.join(grad_names)}])",
            "                     if outs[i].requires_grad]",
            "            grads = [None] * len(wrt) if not pairs else torch.autograd.grad(",
            "                [o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True)",
            "        return tuple(torch.zeros_like(w) if g is None else g.detach()",
            "                     for g, w in zip(grads, wrt))", "", "",
            f"def get_inputs(inputs={first['inputs']!r},",
            f"               grads={[t for t in first['outputs'] if t['dtype'] in _FLOATS]!r}):"]
    else:
        lines += [f"    def forward(self, {', '.join(arg_names)}):",
                  f"        return super().forward({', '.join(arg_names)})", "", "",
                  f"def get_inputs(inputs={first['inputs']!r}):"]
    lines += ["    out = []",
              "    for t in inputs:",
              "        dtype = getattr(torch, t['dtype'])",
              "        if dtype.is_floating_point:  # the source's mean and spread",
              "            x = gen.randn(*t['shape'], scale=t['std'] or 1.0) + t['mean']",
              "            out.append(x.to(dtype))",
              "        elif dtype == torch.bool:",
              "            out.append(torch.rand(*t['shape']) < t['p'])",
              "        else:  # ids, positions: within the range the source model saw",
              ("            out.append(torch.randint(t['low'], t['high'] + 1, t['shape'], "
               "dtype=dtype))")]
    if backward:
        lines += ["    for t in grads:  # each floating output's gradient: signed, unit scale",
                  "        out.append(gen.randn(*t['shape']).to(getattr(torch, t['dtype'])))"]
    lines += ["    return out", "", "",
              "def get_init_inputs():",
              f"    return [torch.{dt}]", ""]
    return "\n".join(lines)
