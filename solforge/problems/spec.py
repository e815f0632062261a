"""The problem noun: a KernelBench reference plus solforge metadata.

A problem is one Python file. The KernelBench part is unchanged: ``class Model``,
``get_inputs()`` and ``get_init_inputs()``. A solforge problem adds a module-level dict
``SOLFORGE`` (plain data, so a file stays readable and importable by other harnesses)::

    SOLFORGE = {
        "name": "rmsnorm_llama3",            # defaults to the file's stem
        "category": "L1",                    # L1, L2, quant, attention, ... (see CATEGORIES)
        "models": ["Llama 3 8B"],            # the real model(s) the shapes come from
        "precision": "bf16",                 # a precision class (precision.py)
        "description": "...",
        "workloads": [                       # named shape/dtype sets
            {"name": "decode", "params": {"tokens": 1}, "visible": True},
            {"name": "prefill", "params": {"tokens": 8192}, "visible": False},
            {"name": "cpu_small", "params": {"tokens": 7, "hidden": 257}, "cpu": True},
        ],
        "flops": lambda p: ...,              # optional: necessary FLOPs for params p
        "bytes": lambda p: ...,              # optional: necessary bytes moved for params p
        "distributions": ["normal", "outliers"],   # optional; default: all of gen.py's
        "train_mode": False,                 # optional; models are put in eval mode
        "sol_unit": "bf16",                  # optional: the fastest unit a correct kernel
                                             # can use, when not the precision class's own
        "ignore_where_zero": {1: 0},         # optional: integer output 1 is not compared
                                             # where output 0 is zero in both results
    }

``params`` are passed as keyword arguments to ``get_inputs`` and ``get_init_inputs``
(each receives the ones its signature names), so the same two functions serve every
workload and, called with no arguments, still give KernelBench's single default workload.
A workload's own ``flops``/``bytes`` (numbers) override the problem-level callables.

Not covered here: multi-file problems and problems whose reference is not an
``nn.Module`` (importers wrap those into this form).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from solforge.problems.precision import PrecisionClass, get_precision

CATEGORIES = ("L1", "L2", "L3", "quant", "attention", "kernelbench", "other")


class Workload(BaseModel):
    """One named set of shapes/dtypes/init args for a problem."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    visible: bool = Field(True, description="agents see it; held-out ones only the verdict uses")
    cpu: bool = Field(False, description="small enough to run on a CPU in seconds")
    flops: float | None = Field(None, description="declared necessary FLOPs (overrides)")
    bytes: float | None = Field(None, description="declared necessary bytes (overrides)")

    def params_json(self) -> dict[str, Any]:
        """Params with torch dtypes and other objects rendered as strings (for records)."""
        return {k: _jsonable(v) for k, v in self.params.items()}


class Problem(BaseModel):
    """A loaded problem: where it lives, what it is, and its workloads."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    path: Path
    category: str = "other"
    source: str = Field("file", description="builtin, kernelbench, file, or an importer's name")
    models: list[str] = Field(default_factory=list)
    precision: PrecisionClass
    description: str = ""
    workloads: list[Workload]
    distributions: list[str] = Field(default_factory=lambda: ["normal"])
    train_mode: bool = False
    kernelbench_plain: bool = Field(
        False, description="a plain KernelBench file (no SOLFORGE dict): its conventions apply")
    sol_unit: str | None = Field(
        None, description="hardware unit for the SOL bound when it differs from the class's")
    ignore_where_zero: dict[int, int] = Field(
        default_factory=dict, description="integer output -> output: not compared where "
        "that output is zero in both the reference's and the candidate's results")
    flops_fn: Callable[[dict[str, Any]], float] | None = None
    bytes_fn: Callable[[dict[str, Any]], float] | None = None
    content_hash: str = ""

    @property
    def unit(self) -> str:
        """The hardware unit the speed-of-light bound assumes for this problem."""
        return self.sol_unit or self.precision.unit

    def workload(self, name: str) -> Workload:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(f"problem {self.name} has no workload {name!r}; "
                       f"it has {[w.name for w in self.workloads]}")

    def visible_workloads(self) -> list[Workload]:
        return [w for w in self.workloads if w.visible]

    def declared_flops(self, w: Workload) -> float | None:
        if w.flops is not None:
            return float(w.flops)
        return float(self.flops_fn(dict(w.params))) if self.flops_fn else None

    def declared_bytes(self, w: Workload) -> float | None:
        if w.bytes is not None:
            return float(w.bytes)
        return float(self.bytes_fn(dict(w.params))) if self.bytes_fn else None

    def summary(self) -> dict[str, Any]:
        """The JSON form ``solforge problems list --json`` prints."""
        return {
            "name": self.name,
            "category": self.category,
            "source": self.source,
            "models": self.models,
            "precision": self.precision.name,
            "path": str(self.path),
            "description": self.description,
            "workloads": [
                {"name": w.name, "visible": w.visible, "cpu": w.cpu, "params": w.params_json()}
                for w in self.workloads
            ],
        }


class ProblemError(ValueError):
    """A problem file that cannot be used; the message says what to fix."""


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def file_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def call_with_params(fn: Callable[..., Any], params: dict[str, Any]) -> Any:
    """Call ``fn`` with the subset of ``params`` its signature accepts."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return fn(**params)
    accepted = {k: v for k, v in params.items() if k in sig.parameters}
    return fn(**accepted)


def problem_from_module(module: ModuleType, path: Path, source: str = "file") -> Problem:
    """Build a :class:`Problem` from an imported problem module (see module docstring)."""
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            raise ProblemError(
                f"{path}: a problem file must define Model, get_inputs and get_init_inputs "
                f"(KernelBench format); {attr} is missing")
    meta = getattr(module, "SOLFORGE", None)
    plain = meta is None
    meta = dict(meta or {})
    name = str(meta.get("name") or path.stem)
    category = str(meta.get("category") or ("kernelbench" if plain else "other"))
    precision_name = meta.get("precision") or ("fp32" if plain else None)
    if precision_name is None:
        raise ProblemError(f"{path}: SOLFORGE needs a 'precision' (e.g. 'fp32', 'bf16')")
    try:
        precision = get_precision(str(precision_name))
    except ValueError as e:
        raise ProblemError(f"{path}: {e}") from None
    raw_workloads = meta.get("workloads") or [{"name": "default", "params": {}}]
    workloads = []
    for i, w in enumerate(raw_workloads):
        if not isinstance(w, dict) or "name" not in w:
            raise ProblemError(f"{path}: workload #{i} must be a dict with a 'name'")
        try:
            workloads.append(Workload(**w))
        except Exception as e:  # pydantic's message names the bad field
            raise ProblemError(f"{path}: workload {w.get('name')!r}: {e}") from None
    names = [w.name for w in workloads]
    if len(set(names)) != len(names):
        raise ProblemError(f"{path}: workload names must be unique, got {names}")
    from solforge.problems.gen import DISTRIBUTIONS

    dists = list(meta.get("distributions") or (["normal"] if plain else DISTRIBUTIONS))
    for d in dists:
        if d not in DISTRIBUTIONS:
            raise ProblemError(f"{path}: unknown distribution {d!r}; use {DISTRIBUTIONS}")
    flops_fn, bytes_fn = meta.get("flops"), meta.get("bytes")
    for label, fn in (("flops", flops_fn), ("bytes", bytes_fn)):
        if fn is not None and not callable(fn):
            raise ProblemError(f"{path}: SOLFORGE[{label!r}] must be a function of the params")
    ignore = meta.get("ignore_where_zero") or {}
    if not (isinstance(ignore, dict) and all(
            isinstance(k, int) and isinstance(v, int) and k != v and k >= 0 and v >= 0
            for k, v in ignore.items())):
        raise ProblemError(f"{path}: SOLFORGE['ignore_where_zero'] must map an output's "
                           f"index to another output's index, e.g. {{1: 0}}; got {ignore!r}")
    return Problem(
        name=name, path=path, category=category, source=source,
        models=list(meta.get("models") or []), precision=precision,
        description=str(meta.get("description") or (module.__doc__ or "").strip()),
        workloads=workloads, distributions=dists, train_mode=bool(meta.get("train_mode")),
        kernelbench_plain=plain, flops_fn=flops_fn, bytes_fn=bytes_fn,
        sol_unit=meta.get("sol_unit"), ignore_where_zero=dict(ignore),
        content_hash=file_hash(path),
    )
