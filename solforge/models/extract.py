"""``solforge extract``: a live model's repeated modules as solforge problem files, ranked by
their share of the model's time.

For every step asked (prefill and/or decode, each batch and sequence length) the model runs
once with hooks (``capture.py``): each capturable call of a leaf module or a repeated
composite one (a fused region: MLP, MoE block) gives its input shapes and dtypes. Modules
with the same recipe (``rebuild.py``: class, constructor arguments, config) are one problem,
however many layers hold them (the paths and the call counts are kept); each distinct input
signature is one workload of it, named after its step (``prefill_b1_s128``,
``decode_b4_s512``). The model is then profiled once per step (``profile_modules``), and a
problem's ``model_share`` is its calls' time over the steps' total time: the planner weighs
its headroom by that share (Amdahl: a 2x kernel on 1% of the time is worth 0.5%). The steps
are summed as they are, so a prefill of many tokens outweighs a decode step; extract the
decode step alone to rank for decoding (each workload's own share is kept as well).

Written (the files of an earlier extraction into the same folder removed first): one
problem file per problem (KernelBench ``Model``/``get_inputs``/
``get_init_inputs`` + ``SOLFORGE``, its ``extracted`` entry naming the source model, the
module paths, the calls per workload and each workload's share) and ``extract.json``: the
problems ranked by share, the steps' times, and every module left out with why.

Not covered: backward passes (forward steps only), shares of time spent outside captured
modules (attention called with a cache: the uncovered remainder is reported), and several
devices.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from pprint import pformat
from typing import Any

import torch

from solforge.models.capture import Call, capture_calls, dtype_name, profile_modules
from solforge.models.rebuild import CONFIG, RebuildError, Recipe, recipe_for
from solforge.models.source import BuiltModel

MANIFEST = "extract.json"
MANIFEST_SCHEMA = "solforge.extract/1"
PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class Step:
    """One way the model is run: a mode at one batch and sequence length."""

    mode: str
    batch: int
    seq: int

    @property
    def name(self) -> str:
        return f"{self.mode}_b{self.batch}_s{self.seq}"


@dataclass
class Group:
    """One problem: modules of one recipe and the calls they got."""

    recipe: Recipe
    cls: str
    paths: list[str] = field(default_factory=list)
    # workload name -> {"step", "signature", "inputs", "calls", "ms"}
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    name: str = ""

    def ms(self) -> float:
        return sum(w["ms"] for w in self.workloads.values())


def _slug(s: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", s).strip("_").lower()


def problem_stem(tag: str, path: str) -> str:
    parts = [p for p in path.split(".") if not p.isdigit() and p != "model"]
    return _slug(f"{tag}_{'_'.join(parts) or path}")


def extract(built: BuiltModel, steps: list[Step], out: Path, tag: str | None = None,
            warmup: int = 1) -> dict[str, Any]:
    """Capture, group, profile and write the problems of ``built`` (module docstring);
    returns the manifest written as ``out/extract.json``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _remove_previous(out)
    tag = _slug(tag or Path(built.name).name.replace(":", "_"))
    model = built.model
    recipes: dict[str, Recipe | str] = {}
    groups: dict[str, Group] = {}
    skipped: dict[str, str] = {}
    step_ms: dict[str, float] = {}
    for step in steps:
        def prepare(step: Step = step) -> Any:
            return built.inputs(step.mode, step.batch, step.seq)

        cap = capture_calls(model, prepare, built.call)
        total, times = profile_modules(model, prepare, built.call,
                                       sorted({c.path for c in cap.calls}), warmup=warmup)
        step_ms[step.name] = total
        seen: dict[str, int] = defaultdict(int)
        for call in cap.calls:
            i = seen[call.path]
            seen[call.path] += 1
            ms = times.get(call.path, [])[i] if i < len(times.get(call.path, [])) else 0.0
            group = _group_of(call, cap.modules[call.path], model, recipes, groups, skipped)
            if group is not None:
                _add_call(group, step, call, ms)
    _name_groups(groups.values(), tag)
    grand = sum(step_ms.values()) or 1.0
    problems = []
    for g in sorted(groups.values(), key=lambda g: -g.ms()):
        share = g.ms() / grand
        path = out / f"{g.name}.py"
        path.write_text(problem_source(g, built, share, step_ms))
        problems.append({"name": g.name, "file": path.name, "class": g.cls,
                         "paths": g.paths, "share": round(share, 6),
                         "workloads": {k: {"calls": w["calls"], "ms": round(w["ms"], 6)}
                                       for k, w in g.workloads.items()}})
    manifest = {
        "schema": MANIFEST_SCHEMA, "model": built.name, "kind": built.kind,
        "overrides": built.overrides, "dtype": dtype_name(_dtype(built)),
        "device": str(built.device), "created": time.time(),
        "steps": {k: {"ms": round(v, 6)} for k, v in step_ms.items()},
        "problems": problems, "skipped": skipped,
        "covered_share": round(_covered(groups.values()) / grand, 6),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def _remove_previous(out: Path) -> None:
    """The problem files an earlier extraction into ``out`` wrote (its manifest lists
    them) go, so `solforge optimize OUT` sees only this model's; other files stay."""
    old = out / MANIFEST
    if not old.is_file():
        return
    try:
        files = [p["file"] for p in json.loads(old.read_text()).get("problems", [])]
    except (json.JSONDecodeError, TypeError, KeyError):
        return
    for f in files:
        (out / Path(f).name).unlink(missing_ok=True)


def _dtype(built: BuiltModel) -> torch.dtype:
    p = next(built.model.parameters(), None)
    return p.dtype if p is not None else torch.float32


def _group_of(call: Call, module: torch.nn.Module, root: torch.nn.Module,
              recipes: dict[str, Recipe | str], groups: dict[str, Group],
              skipped: dict[str, str]) -> Group | None:
    if call.reason:
        skipped.setdefault(call.path, call.reason)
        return None
    if call.path not in recipes:
        try:
            recipes[call.path] = recipe_for(module, call.path, root)
        except RebuildError as e:
            recipes[call.path] = str(e)
    r = recipes[call.path]
    if isinstance(r, str):
        skipped.setdefault(call.path, r)
        return None
    key = r.key() + repr(sorted((n, tuple(p.shape), str(p.dtype))
                                for n, p in module.named_parameters()))
    g = groups.get(key)
    if g is None:
        g = groups[key] = Group(recipe=r, cls=f"{r.module}.{r.qualname}")
    if call.path not in g.paths:
        g.paths.append(call.path)
    return g


def _add_call(g: Group, step: Step, call: Call, ms: float) -> None:
    sig = call.signature()
    for w in g.workloads.values():
        if w["step"] == step and w["signature"] == sig:
            w["calls"] += 1
            w["ms"] += ms
            return
    name = step.name
    n = sum(1 for w in g.workloads.values() if w["step"] == step)
    if n:
        name = f"{name}_{n + 1}"
    g.workloads[name] = {"step": step, "signature": sig, "calls": 1, "ms": ms,
                         "inputs": [t.as_param() for t in call.inputs]}


def _name_groups(groups: Any, tag: str) -> None:
    taken: set[str] = set()
    for g in groups:
        base = problem_stem(tag, g.paths[0])
        name, i = base, 2
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name)
        g.name = name


def _covered(groups: Any) -> float:
    """Time of the problems' calls, each module counted once (a region's leaves, inside
    it, are not counted again)."""
    paths = {p for g in groups for p in g.paths}
    total = 0.0
    for g in groups:
        if any(any(p.startswith(q + ".") for q in paths) for p in g.paths):
            continue
        total += g.ms()
    return total


def _paths_summary(paths: list[str]) -> str:
    pattern = sorted({re.sub(r"\.\d+(?=\.|$)", ".*", p) for p in paths})
    return ", ".join(pattern)


def problem_source(g: Group, built: BuiltModel, share: float,
                   step_ms: dict[str, float]) -> str:
    """The problem file of one group (KernelBench format + SOLFORGE)."""
    r = g.recipe
    top, _, rest = r.qualname.partition(".")
    dt = dtype_name(_dtype(built))
    cpu = built.device.type == "cpu"
    workloads = []
    calls: dict[str, int] = {}
    shares: dict[str, float] = {}
    for name, w in g.workloads.items():
        workloads.append({"name": name, "params": {"inputs": w["inputs"]}, "cpu": cpu})
        calls[name] = w["calls"]
        shares[name] = round(w["ms"] / (step_ms.get(w["step"].name) or 1.0), 6)
    first = next(iter(g.workloads.values()))
    arg_names = [t["name"] for t in first["inputs"]]
    init_args = ", ".join(f"{k}=_config" if v == CONFIG else f"{k}={v!r}"
                          for k, v in r.args.items())
    extracted = {
        "model": built.name, "kind": built.kind, "overrides": built.overrides,
        "class": g.cls, "module_paths": g.paths, "calls": calls, "shares": shares,
        "dtype": dt, "device": built.device.type,
    }
    meta = {
        "name": g.name, "category": "model", "models": [f"{built.name} ({built.kind})"],
        "precision": PRECISION.get(dt, "fp32"),
        "description": f"{r.qualname} at {_paths_summary(g.paths)} of {built.name} "
                       f"({len(g.paths)} module(s)); {share:.1%} of the model's time in "
                       "the extracted steps.",
        "workloads": workloads, "distributions": ["normal"],
        "model_share": round(share, 6), "extracted": extracted,
    }
    lines = [
        (f'"""{r.qualname} of {built.name}, extracted by `solforge extract` from '
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
    lines += ["# per parameter: mean and standard deviation of the source model's values",
              f"PARAMS = {pformat(r.param_stats, width=96)}", "",
              f"SOLFORGE = {pformat(meta, width=96, sort_dicts=False)}", "", "",
              "class Model(_Base):",
              f"    def __init__(self, dtype=torch.{dt}):"]
    if r.config is not None:
        lines.append("        _config = _Config.from_dict(CONFIG)")
    lines += [f"        super().__init__({init_args})",
              "        with torch.no_grad():",
              "            for name, p in self.named_parameters():",
              "                mean, std = PARAMS[name]",
              "                p.normal_(mean, std) if std > 0 else p.fill_(mean)",
              "        self.to(dtype)", "",
              f"    def forward(self, {', '.join(arg_names)}):",
              f"        return super().forward({', '.join(arg_names)})", "", "",
              f"def get_inputs(inputs={first['inputs']!r}):",
              "    out = []",
              "    for t in inputs:",
              "        dtype = getattr(torch, t['dtype'])",
              "        if dtype.is_floating_point:  # the source's mean and spread",
              "            x = gen.randn(*t['shape'], scale=t['std'] or 1.0) + t['mean']",
              "            out.append(x.to(dtype))",
              "        elif dtype == torch.bool:",
              "            out.append(torch.rand(*t['shape']) < t['p'])",
              "        else:  # ids, positions: within the range the source model saw",
              ("            out.append(torch.randint(t['low'], t['high'] + 1, t['shape'], "
               "dtype=dtype))"),
              "    return out", "", "",
              "def get_init_inputs():",
              f"    return [torch.{dt}]", ""]
    return "\n".join(lines)
