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

With ``backward`` (``--backward``) each prefill step is a training step: the model runs
forward and then backward of a scalar of its output (``profile_backward``), the step's time is
that whole step's, and every problem whose module has something to differentiate (a floating
input or a parameter) gets a second file, ``<name>_bwd.py``: a backward problem
(``direction: backward``) whose ``forward`` takes the module's inputs and the gradient of each
floating output and returns the gradients of the floating inputs, then of the parameters in
``named_parameters`` order, computed by autograd through the module itself (the reference a
fused backward kernel must match); its share is the module's backward time over the steps'.

Not covered: shares of time spent outside captured modules (attention called with a cache:
the uncovered remainder is reported), backward of decode steps (not a training step),
optimizer steps, and several devices.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from solforge.models.capture import (Call, capture_calls, dtype_name, profile_backward,
                                     profile_modules)
from solforge.models.problem_file import _dtype, _train, fraction, problem_source
from solforge.models.rebuild import RebuildError, Recipe, recipe_for
from solforge.models.roofline import roofline_fraction
from solforge.models.source import BuiltModel, ModelSpecError

MANIFEST = "extract.json"
MANIFEST_SCHEMA = "solforge.extract/1"


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
    # workload name -> {"step", "signature", "inputs", "outputs", "calls", "ms"}
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the same for the backward problem (prefill steps of a --backward extraction)
    backward: dict[str, dict[str, Any]] = field(default_factory=dict)
    name: str = ""
    differentiable: bool = False    # a floating input or a parameter: a backward exists

    def ms(self) -> float:
        return sum(w["ms"] for w in self.workloads.values())

    def backward_ms(self) -> float:
        return sum(w["ms"] for w in self.backward.values())


def _slug(s: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", s).strip("_").lower()


def problem_stem(tag: str, path: str) -> str:
    parts = [p for p in path.split(".") if not p.isdigit() and p != "model"]
    return _slug(f"{tag}_{'_'.join(parts) or path}")


def extract(built: BuiltModel, steps: list[Step], out: Path, tag: str | None = None,
            warmup: int = 1, backward: bool = False) -> dict[str, Any]:
    """Capture, group, profile and write the problems of ``built`` (module docstring);
    returns the manifest written as ``out/extract.json``."""
    if backward and not any(s.mode == "prefill" for s in steps):
        raise ModelSpecError("--backward needs a prefill step (a training step runs the "
                             "whole sequence): add --prefill")
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
        paths = sorted({c.path for c in cap.calls})
        total, times = profile_modules(model, prepare, built.call, paths, warmup=warmup)
        bwd_times: dict[str, list[float]] = {}
        if backward and step.mode == "prefill":
            try:
                total, bwd_times = profile_backward(model, prepare, built.call, paths,
                                                    warmup=warmup + 1)
            except (RuntimeError, ValueError) as e:
                raise ModelSpecError(f"--backward: the training step of {built.name} failed "
                                     f"({type(e).__name__}: {e})") from None
        step_ms[step.name] = total
        seen: dict[str, int] = defaultdict(int)
        counts = defaultdict(int, {p: sum(1 for c in cap.calls if c.path == p) for p in paths})
        for call in cap.calls:
            i = seen[call.path]
            seen[call.path] += 1
            ms = times.get(call.path, [])[i] if i < len(times.get(call.path, [])) else 0.0
            group = _group_of(call, cap.modules[call.path], model, recipes, groups, skipped)
            if group is not None:
                _add_call(group, step, call, ms)
                group.differentiable = group.differentiable or _differentiable(
                    call, cap.modules[call.path])
                if backward and step.mode == "prefill":
                    # backward hooks fire in reverse call order
                    b = bwd_times.get(call.path, [])
                    j = counts[call.path] - 1 - i
                    _add_call(group, step, call, b[j] if 0 <= j < len(b) else 0.0,
                              into=group.backward)
    _name_groups(groups.values(), tag)
    grand = sum(step_ms.values()) or 1.0
    problems = []
    for g in groups.values():
        share = fraction(g.ms(), grand)
        path = out / f"{g.name}.py"
        path.write_text(problem_source(g, built, share, step_ms))
        roof = _roofline(path, built, g.workloads)
        if roof and roof.get("fraction") is not None:
            path.write_text(problem_source(g, built, share, step_ms, roofline=roof))
        problems.append({"name": g.name, "file": path.name, "class": g.cls,
                         "direction": "forward", "paths": g.paths, "share": round(share, 6),
                         "roofline": roof,
                         "workloads": {k: {"calls": w["calls"], "ms": round(w["ms"], 6)}
                                       for k, w in g.workloads.items()}})
        if g.backward and g.differentiable:
            bshare = fraction(g.backward_ms(), grand)
            bpath = out / f"{g.name}_bwd.py"
            bpath.write_text(problem_source(g, built, bshare, step_ms, backward=True))
            why = _trivial_backward(bpath, built.device)
            if why:
                bpath.unlink()
                skipped.setdefault(f"{g.paths[0]} (backward)", why)
                continue
            problems.append({"name": f"{g.name}_bwd", "file": bpath.name, "class": g.cls,
                             "direction": "backward", "paths": g.paths,
                             "share": round(bshare, 6),
                             "workloads": {_train(k): {"calls": w["calls"],
                                                       "ms": round(w["ms"], 6)}
                                           for k, w in g.backward.items()}})
        elif g.backward:
            skipped.setdefault(f"{g.paths[0]} (backward)", "nothing to differentiate: no "
                               "floating input and no parameter")
    problems.sort(key=lambda p: -p["share"])
    manifest = {
        "schema": MANIFEST_SCHEMA, "model": built.name, "kind": built.kind,
        "overrides": built.overrides, "dtype": dtype_name(_dtype(built)),
        "device": str(built.device), "created": time.time(),
        "steps": {k: {"ms": round(v, 6)} for k, v in step_ms.items()},
        "problems": problems, "skipped": skipped,
        "covered_share": round(fraction(_covered(groups.values()), grand), 6),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def _roofline(path: Path, built: BuiltModel, table: dict[str, dict[str, Any]]
              ) -> dict[str, Any] | None:
    """``roofline.roofline_fraction`` of the problem at ``path`` from its calls in ``table``;
    a failure to estimate is said in the manifest, never fatal to the extraction."""
    try:
        return roofline_fraction(path, built.device,
                                 {k: w["ms"] for k, w in table.items()},
                                 {k: w["calls"] for k, w in table.items()})
    except Exception as e:  # noqa: BLE001  (the estimate is advice for the planner)
        return {"fraction": None, "error": f"{type(e).__name__}: {e}"}


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


def _add_call(g: Group, step: Step, call: Call, ms: float,
              into: dict[str, dict[str, Any]] | None = None) -> None:
    table = g.workloads if into is None else into
    sig = call.signature()
    for w in table.values():
        if w["step"] == step and w["signature"] == sig:
            w["calls"] += 1
            w["ms"] += ms
            return
    name = step.name
    n = sum(1 for w in table.values() if w["step"] == step)
    if n:
        name = f"{name}_{n + 1}"
    table[name] = {"step": step, "signature": sig, "calls": 1, "ms": ms,
                   "inputs": [t.as_param() for t in call.inputs],
                   "outputs": [t.as_param() for t in call.outputs]}


def _differentiable(call: Call, module: torch.nn.Module) -> bool:
    """Something to differentiate: a floating input, or a parameter that needs a grad."""
    floats = {"float32", "float16", "bfloat16", "float64"}
    return (any(t.dtype in floats for t in call.inputs)
            or any(p.requires_grad for p in module.parameters())) and any(
        t.dtype in floats for t in call.outputs)


def _trivial_backward(path: Path, device: torch.device) -> str:
    """Why the backward problem at ``path`` is not worth writing ("" when it is): run once
    on its first workload, its gradients are all zero (the outputs do not depend on the
    inputs or the parameters: a rotary table, a constant)."""
    from solforge.problems.loader import import_file
    from solforge.problems.spec import call_with_params

    try:
        mod = import_file(path, prefix="solforge_extract_check")
        params = mod.SOLFORGE["workloads"][0]["params"]
        model = mod.Model(*mod.get_init_inputs()).to(device)
        inputs = [t.to(device) for t in call_with_params(mod.get_inputs, dict(params))]
        with torch.no_grad():
            grads = model(*inputs)
    except Exception as e:  # a module autograd cannot go through: said, not written
        return f"its backward did not run: {type(e).__name__}: {e}"
    if not any(bool(g.count_nonzero()) for g in grads):
        return ("its gradients are all zero: its outputs depend on neither its floating "
                "inputs nor its parameters")
    return ""


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
