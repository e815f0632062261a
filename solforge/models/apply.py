"""``solforge.apply(model, RUN_OR_EXPORT)``: kept solutions swapped into a live model,
module by module, only for the shapes and dtypes each was verified on; undoable.

A kept solution is a problem's best passing verdict in a run directory (``ledger.sqlite``)
or an export (``solforge export``: ``solutions/``, ``records/``, ``problems/``), for a
problem ``solforge extract`` wrote (its ``SOLFORGE['extracted']`` names the module paths).
Its verified signatures are the input shapes and dtypes of the workloads its record passed,
on the record's device type; of those, :func:`apply` swaps in only the ones whose record
measured the solution at least ``min_speedup`` times as fast as the original module (its
eager time over the solution's time; ``MIN_SPEEDUP`` by default). A kept solution that is
the reference itself, or that wins by less than measurement noise, would only add the
dispatch's host time to every call (session 18 on an H100: a kept MLP at 1.01x of eager
cost 45 us more per call in the model, and a kept "reference unchanged" MoE block 3.4x
the original's time); a signature whose record has no timing is not swapped in either,
unless ``min_speedup`` is 0. For each module path the live model has, with the class the
problem names, :func:`apply` builds the solution's ``ModelNew`` and gives it the live
module's parameters and buffers by name (the same tensors, no copy: a solution with a
persistent tensor the live module lacks, a fused weight say, is refused, since it would
keep the random values it was built with), then sets the live module's ``forward`` to a
dispatcher: a call whose tensor arguments have a verified signature (and whose other
arguments are at their defaults) runs ``ModelNew``'s forward (directly: the live module's
call already ran its hooks, and a second ``nn.Module.__call__`` was most of the dispatch's
cost; a solution module with hooks of its own when applied, or global module hooks, is
called through them); any other call runs the original forward and is counted as a
fallback, with its signature. The model's ``state_dict`` and module tree are unchanged.
``benchmarks/apply_dispatch.py`` times the dispatch per call.

:class:`Patch` is the result: ``patch.undo()`` (or leaving ``with apply(...)``) restores
every forward; ``patch.enabled = False`` sends every call to the original without undoing
(what ``validate`` toggles); ``patch.stats()`` counts calls per module.

Under ``torch.compile`` the dispatcher is traced like any forward: the signature test
becomes shape guards, and a compiled model recompiles once after :func:`apply` or
:meth:`Patch.undo`.

Not covered: moving the model to another device after :func:`apply` (the solutions share
its tensors but are not moved: apply after ``.to()``), solutions whose forward takes other
arguments than the captured tensors, hooks put on a solution module after :func:`apply`,
and backward passes through a solution.
"""

from __future__ import annotations

import inspect
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from solforge.models import MIN_SPEEDUP
from solforge.problems.loader import import_file
from solforge.problems.spec import ProblemError


class ApplyError(ValueError):
    """A run or export that cannot be applied; the message says what to fix."""


@dataclass
class Kept:
    """One problem's kept solution and where it may run."""

    problem: str
    problem_path: Path
    solution_path: Path
    record: dict[str, Any]
    extracted: dict[str, Any]
    signatures: set[tuple] = field(default_factory=set)
    # per verified signature: eager time over the solution's (the slowest of its workloads),
    # None where the record timed neither
    gains: dict[tuple, float | None] = field(default_factory=dict)
    device_type: str = "cpu"
    precision: str = "fp32"            # the problem's precision class
    precision_levers: list[str] = field(default_factory=list)


def _signature_of(inputs: list[dict[str, Any]]) -> tuple:
    return tuple((t["name"], tuple(t["shape"]), t["dtype"]) for t in inputs)


def _kept(problem: str, problem_path: Path, solution_path: Path, record: dict[str, Any],
          levers: list[str]) -> Kept | None:
    if record.get("status") != "PASSED" or not problem_path.is_file():
        return None
    try:
        module = import_file(problem_path, prefix="solforge_apply_problem")
    except Exception as e:
        raise ApplyError(f"{problem_path}: importing the problem failed: {e}") from None
    extracted = (getattr(module, "SOLFORGE", {}) or {}).get("extracted")
    if not extracted:
        return None  # not a problem `solforge extract` wrote: nothing in a model to swap
    gains: dict[tuple, float | None] = {}
    for w in record.get("workloads", []):
        if not (w.get("correct") and "inputs" in (w.get("params") or {})):
            continue
        sig = _signature_of(w["params"]["inputs"])
        t, e = w.get("time_ms"), w.get("eager_ms")
        g = e / t if t and e else None
        old = gains.get(sig, g)
        gains[sig] = None if g is None or old is None else min(g, old)
    sigs = set(gains)
    # "cuda:0", "cpu (x86_64)", "NVIDIA H200": the device type is what a tensor reports
    name = str(record.get("device", "cpu")).lower()
    device = "cpu" if name.startswith("cpu") else "cuda"
    return Kept(problem=problem, problem_path=problem_path, solution_path=solution_path,
                record=record, extracted=extracted, signatures=sigs, gains=gains,
                device_type=device,
                precision=str(module.SOLFORGE.get("precision", "fp32")),
                precision_levers=[x for x in levers if x in PRECISION_LEVERS])


# levers that lower precision (the search's names, and what an LLM worker may report)
PRECISION_LEVERS = ("tf32", "lowp_tensor_cores", "bf16", "fp16", "fp8", "precision")
# what in a solution's source lowers precision whatever its levers say
_LOWP_SOURCE = {"allow_tf32": "tf32", "set_float32_matmul_precision": "tf32",
                "float8_e4m3": "fp8", "float8_e5m2": "fp8", "_scaled_mm": "fp8",
                "allow_bf16_reduced_precision_reduction": "bf16 accumulate",
                "allow_fp16_reduced_precision_reduction": "fp16 accumulate"}

_HALF_WORDS = {r"\bbfloat16\b": "bf16", r"\bfloat16\b": "fp16", r"\.half\(\)": "fp16"}


def lowered_precision(kept: Kept) -> list[str]:
    """How the kept solution lowers precision, by its levers and its source."""
    found = list(kept.precision_levers)
    try:
        src = kept.solution_path.read_text()
    except OSError:
        src = ""
    found += [name for word, name in _LOWP_SOURCE.items() if word in src]
    if kept.precision == "fp32":  # an fp32 problem's solution that casts to 16 bits
        found += [name for word, name in _HALF_WORDS.items() if re.search(word, src)]
    return sorted(set(found))


def kept_solutions(source: str | Path) -> list[Kept]:
    """The kept solutions of a run directory or an export, for extracted problems."""
    src = Path(source)
    out: list[Kept] = []
    if (src / "ledger.sqlite").is_file():
        from solforge.orchestrate.run import Run

        run = Run.open(src)
        for p in run.ledger.problems():
            best = run.ledger.best(p["name"])
            att = run.ledger.attempt(best["attempt"]) if best and best.get("attempt") else None
            if att is None or not p["path"]:
                continue
            sol = Path(att["path"]) if att.get("path") and Path(att["path"]).is_file() else \
                run.solution_path(p["name"], best["attempt"])
            if not sol.is_file():
                sol.write_text(att["source"])
            k = _kept(p["name"], Path(p["path"]), sol, best["record"], att["levers"] or [])
            if k:
                out.append(k)
    elif (src / "solutions").is_dir() and (src / "records").is_dir():
        for sol in sorted((src / "solutions").glob("*.py")):
            rec, prob = src / "records" / f"{sol.stem}.json", src / "problems" / sol.name
            if rec.is_file() and prob.is_file():
                k = _kept(sol.stem, prob, sol, json.loads(rec.read_text()), [])
                if k:
                    out.append(k)
    else:
        raise ApplyError(f"{src}: neither a run directory (ledger.sqlite) nor an export "
                         "(solutions/ and records/, from `solforge export RUN --out DIR`)")
    return out


@dataclass
class ModuleStats:
    problem: str
    patched: int = 0
    fallback: int = 0
    fallback_signatures: Counter = field(default_factory=Counter)


class _Dispatch:
    """The forward a patched module gets: the solution for verified signatures."""

    def __init__(self, patch: Patch, path: str, live: nn.Module, new: nn.Module,
                 kept: Kept, signatures: set[tuple] | None = None) -> None:
        self.patch, self.path, self.new, self.kept = patch, path, new, kept
        # the verified signatures fast enough to swap in (None: all the verified ones)
        self.signatures = kept.signatures if signatures is None else signatures
        self.original = live.forward
        sig = inspect.signature(type(live).forward)
        self.names = [n for n in list(sig.parameters)[1:]]
        self.defaults = {n: p.default for n, p in sig.parameters.items()}
        first = next(iter(self.signatures), ())
        self.tensor_names = [n for n, _, _ in first]
        self.allowed = {tuple((shape, getattr(torch, dt)) for _, shape, dt in s)
                        for s in self.signatures}
        self.stats = ModuleStats(problem=kept.problem)
        self.n_tensors = len(self.tensor_names)
        # the captured tensors are the forward's first parameters, in order: a call of
        # exactly those by position leaves every other parameter at its default
        self.positional = self.names[:self.n_tensors] == self.tensor_names
        self.on_cuda = kept.device_type == "cuda"
        # the solution's forward itself (module docstring); through its hooks if it has any
        self.run = new if _has_hooks(new) else new.forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.patch.enabled and self.patch.active.get(self.path, True):
            # the common call, the captured tensors alone and by position, checked without
            # building a dict (this runs once per module per step: its cost is the
            # patched model's, measured by benchmarks/apply_dispatch.py)
            if not kwargs and len(args) == self.n_tensors and self.positional:
                key = self._fast_key(args)
                if key is not None and key in self.allowed:
                    self.stats.patched += 1
                    return self.run(*args)
            else:
                key = self._key(args, kwargs)
                if key is not None and key in self.allowed:
                    self.stats.patched += 1
                    values = dict(zip(self.names, args)) | kwargs
                    return self.run(*(values[n] for n in self.tensor_names))
            self.stats.fallback += 1
            self.stats.fallback_signatures[_describe(self.tensor_names, args, kwargs,
                                                     self.names)] += 1
        return self.original(*args, **kwargs)

    def _fast_key(self, args: tuple) -> tuple | None:
        out = []
        for t in args:
            if not isinstance(t, torch.Tensor) or t.is_cuda != self.on_cuda:
                return None
            out.append((t.shape, t.dtype))  # torch.Size hashes and compares as a tuple
        return tuple(out)

    def _key(self, args: tuple, kwargs: dict) -> tuple | None:
        values = dict(zip(self.names, args)) | kwargs
        out = []
        for n in self.tensor_names:
            t = values.get(n)
            if not isinstance(t, torch.Tensor) or t.device.type != self.kept.device_type:
                return None
            out.append((tuple(t.shape), t.dtype))
        for n, v in values.items():
            if n not in self.tensor_names and not (v is self.defaults.get(n)
                                                   or _eq(v, self.defaults.get(n))):
                return None
        return tuple(out)


def _has_hooks(m: nn.Module) -> bool:
    return any(getattr(m, a, None) for a in (
        "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
        "_forward_hooks_with_kwargs")) or bool(
        nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks)


def _describe(tensor_names: list[str], args: tuple, kwargs: dict, names: list[str]) -> str:
    values = dict(zip(names, args)) | kwargs
    parts = []
    for n, v in values.items():
        if isinstance(v, torch.Tensor):
            parts.append(f"{n}: {list(v.shape)} {str(v.dtype).removeprefix('torch.')} "
                         f"{v.device.type}")
        elif n not in tensor_names:
            parts.append(f"{n}={type(v).__name__}")
    return ", ".join(parts)


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    try:
        return bool(a == b)
    except Exception:
        return False


@dataclass
class Patch:
    """What :func:`apply` did to one model; undo it with :meth:`undo`."""

    model: nn.Module
    modules: dict[str, _Dispatch] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)   # problem or path -> why
    enabled: bool = True
    active: dict[str, bool] = field(default_factory=dict)   # path -> on (default on)

    def only(self, paths: list[str] | None) -> None:
        """Patch only ``paths`` (None: all of them again)."""
        self.active = {} if paths is None else {p: p in paths for p in self.modules}

    def stats(self) -> dict[str, dict[str, Any]]:
        return {p: {"problem": d.stats.problem, "patched": d.stats.patched,
                    "fallback": d.stats.fallback,
                    "fallback_signatures": dict(d.stats.fallback_signatures)}
                for p, d in self.modules.items()}

    def reset_stats(self) -> None:
        for d in self.modules.values():
            d.stats = ModuleStats(problem=d.kept.problem)

    def undo(self) -> None:
        mods = dict(self.model.named_modules())
        for path in list(self.modules):
            live = mods.get(path)
            if live is not None and "forward" in vars(live):
                del live.forward
            del self.modules[path]

    def __enter__(self) -> Patch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.undo()


def _build(kept: Kept, live: nn.Module) -> nn.Module:
    problem = import_file(kept.problem_path, prefix="solforge_apply_problem")
    solution = import_file(kept.solution_path, prefix="solforge_apply_solution")
    if not hasattr(solution, "ModelNew"):
        raise ApplyError(f"{kept.solution_path}: defines no ModelNew")
    new = solution.ModelNew(*problem.get_init_inputs())
    theirs = live.state_dict(keep_vars=True)
    extra = [k for k in new.state_dict() if k not in theirs]
    if extra:
        raise ApplyError(f"its solution has tensors the live module lacks: {extra[:4]} "
                         "(they would keep the values it was built with)")
    wrong = [k for k, v in new.state_dict().items() if v.shape != theirs[k].shape]
    if wrong:
        raise ApplyError(f"its solution's tensors {wrong[:4]} differ in shape from the "
                         "live module's")
    new.load_state_dict({k: theirs[k] for k in new.state_dict()}, strict=False, assign=True)
    # what the state dict does not hold (a rotary embedding's non-persistent buffers) was
    # built on the host: moved to the live module's device (shared tensors stay shared)
    device = next((t.device for t in (*live.parameters(), *live.buffers())), None)
    if device is not None:
        new.to(device)
    return new.eval()


def fast_signatures(k: Kept, min_speedup: float) -> set[tuple]:
    """The verified signatures of ``k`` measured at least ``min_speedup`` times as fast
    as the original (all of them when ``min_speedup`` is 0 or less)."""
    if min_speedup <= 0:
        return set(k.signatures)
    return {s for s in k.signatures if (k.gains.get(s) or 0.0) >= min_speedup}


def _not_fast(k: Kept, min_speedup: float) -> str:
    shown = ", ".join(
        f"{'x'.join(map(str, sig[0][1])) if sig else '-'}: "
        + ("untimed" if g is None else f"{g:.3g}x") for sig, g in sorted(
            k.gains.items(), key=lambda kv: str(kv[0])))
    return (f"not faster than the original where it was verified (eager time over its "
            f"time: {shown}; min_speedup {min_speedup:g}): swapped in, it would only add "
            "the dispatch's cost")


def apply(model: nn.Module, source: str | Path | list[Kept],
          min_speedup: float = MIN_SPEEDUP) -> Patch:
    """Swap the kept solutions of ``source`` (a run directory or an export) into ``model``
    (module docstring), each for the verified signatures its record measured at least
    ``min_speedup`` times as fast as the original module (0: every verified signature);
    what could not be swapped is in ``Patch.refused``, with why."""
    kept = source if isinstance(source, list) else kept_solutions(source)
    patch = Patch(model=model)
    modules = dict(model.named_modules())
    for k in kept:
        if not k.signatures:
            patch.refused[k.problem] = "its record holds no passed workload with input shapes"
            continue
        fast = fast_signatures(k, min_speedup)
        if not fast:
            patch.refused[k.problem] = _not_fast(k, min_speedup)
            continue
        for path in k.extracted.get("module_paths", []):
            live = modules.get(path)
            cls = f"{type(live).__module__}.{type(live).__qualname__}" if live else ""
            if live is None or cls != k.extracted.get("class"):
                patch.refused[path] = (f"the model has no {k.extracted.get('class')} at "
                                       f"{path}" + (f" (it has {cls})" if cls else ""))
                continue
            if path in patch.modules:
                patch.refused[path] = f"already patched by {patch.modules[path].kept.problem}"
                continue
            try:
                new = _build(k, live)
            except (ApplyError, ProblemError) as e:
                patch.refused[path] = f"{k.problem}: {e}"
                continue
            except Exception as e:  # a solution that does not build: the module stays
                patch.refused[path] = f"{k.problem}: building its solution failed: " \
                                      f"{type(e).__name__}: {e}"
                continue
            d = _Dispatch(patch, path, live, new, k, fast)
            live.forward = d
            patch.modules[path] = d
    return patch
