"""The problem noun: a KernelBench reference plus solforge metadata.

A problem is one Python file. The KernelBench part is unchanged: ``class Model``,
``get_inputs()`` and ``get_init_inputs()``. A solforge problem adds a module-level dict
``SOLFORGE`` (plain data, so a file stays readable and importable by other harnesses)::

    SOLFORGE = {
        "name": "rmsnorm_llama3",            # defaults to the file's stem
        "category": "L1",                    # L1, L2, quant, attention, ...; a target may name one
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
        "distributions": ["normal", "outliers"],   # optional; default: gen.py's
                                             # DEFAULT_DISTRIBUTIONS (a plain KernelBench
                                             # file: PLAIN_DISTRIBUTIONS, normal and signed)
        "train_mode": False,                 # optional; models are put in eval mode
        "sol_unit": "bf16",                  # optional: the fastest unit a correct kernel
                                             # can use, when not the precision class's own
        "ignore_where_zero": {1: 0},         # optional: integer output 1 is not compared
                                             # where output 0 is zero in both results
        "index_outputs": {2: {"input": 0, "dim": -1}},  # optional: output 2 holds indices
                                             # along dim -1 of input 0, judged by the values
                                             # they select (IndexOutput)
        "model_share": 0.12,                 # optional: the fraction of its source model's
                                             # time it takes (``solforge extract``); the
                                             # planner weighs its headroom by it
        "model_roofline": 0.3,               # optional: its bound over its time in the
                                             # model (``solforge extract``); ranks it
                                             # before anything was tried
        "family": "Llama 3",                 # the model family (default: the first model)
        "direction": "forward",              # or "backward": the outputs are gradients
        "shapes_from": "config.json ...",    # where the workloads' shapes come from
    }

A ``backward`` problem is still a ``Model`` whose ``forward`` returns tensors: it takes the
forward's inputs and the upstream gradient and returns the gradients (of the inputs and the
weights it names), so the evaluator judges the gradients as it judges any output. The
built-in ones (``corpus/backward/``) follow SOL-ExecBench: the upstream gradient comes first,
saved activations a training framework keeps (rstd, logsumexp, the attention output) are
inputs computed by ``get_inputs`` from the forward's, the math is explicit (``forward`` runs
under ``no_grad``), and a module-level ``autograd_forward(model, *inputs)`` returns ``(fn,
tensors, upstream_grads)``: ``forward`` must equal autograd's gradients of ``fn(*tensors)``
(``tests/problems/test_backward.py`` checks it in float64).

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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from solforge.problems.precision import PrecisionClass, get_precision

class Workload(BaseModel):
    """One named set of shapes/dtypes/init args for a problem."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    visible: bool = Field(True, description="agents see it; held-out ones only the verdict uses")
    cpu: bool = Field(False, description="small enough to run on a CPU in seconds")
    flops: float | None = Field(None, description="declared necessary FLOPs (overrides)")
    bytes: float | None = Field(None, description="declared necessary bytes (overrides)")
    precision: PrecisionClass | None = Field(
        None, description="this workload's own tolerance (a SOL-ExecBench workload's), "
        "instead of the problem's class; the class's unit still bounds the SOL")

    def params_json(self) -> dict[str, Any]:
        """Params with torch dtypes and other objects rendered as strings (for records)."""
        return {k: _jsonable(v) for k, v in self.params.items()}


class IndexOutput(BaseModel):
    """An integer output of indices into a tensor (top-k, argmax, sort, routing ids), judged
    by the values it selects (``bench/compare.py``): where a candidate's indices select values
    equal, within the precision class's tolerance, to those the reference's select, it
    passes, so two correct kernels may break a tie or a near-tie differently.

    The tensor selected from is named by exactly one of ``values`` (an output of the
    reference: its own, never the candidate's, is read), ``input`` (one of the forward's
    inputs) or ``from_inputs`` (a function of them). An index output has either that
    tensor's shape with ``dim`` cut to k entries (``topk``, ``sort``; compared position by
    position, so ties in a sorted result may come in any order) or its shape without ``dim``
    (``argmax``, ``argmin``). Not covered: sources that depend on the model's weights,
    indices into a flattened tensor, and unsorted top-k (order compared as given).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True, extra="forbid")

    values: int | None = Field(None, ge=0, description="the output the indices select from")
    input: int | None = Field(None, ge=0, description="the input the indices select from")
    from_inputs: Callable[..., Any] | None = Field(
        None, description="a function called with the forward's inputs (as forward is; it "
        "must not modify them) that returns the tensor the indices select from, e.g. the "
        "softmax of router logits")
    dim: int = Field(-1, description="the dimension of that tensor the indices run along")
    distinct: bool = Field(
        True, description="no index may repeat along dim in one row (top-k, sort: a "
        "candidate returning the largest entry k times fails); False where one may")

    @model_validator(mode="after")
    def _one_source(self) -> IndexOutput:
        given = [k for k in ("values", "input", "from_inputs") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of 'values' (an output's index), 'input' (an "
                             "input's index) or 'from_inputs' (a function of the inputs); "
                             f"got {', '.join(given) or 'none'}")
        return self

    def source(self) -> str:
        """The selected-from tensor in words, for messages."""
        if self.values is not None:
            return f"output {self.values}"
        if self.input is not None:
            return f"input {self.input}"
        return "the tensor the problem computes from the inputs"


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
    distributions: list[str] = Field(default_factory=lambda: ["normal", "signed"])
    train_mode: bool = False
    kernelbench_plain: bool = Field(
        False, description="a plain KernelBench file (no SOLFORGE dict): its conventions apply")
    sol_unit: str | None = Field(
        None, description="hardware unit for the SOL bound when it differs from the class's")
    ignore_where_zero: dict[int, int] = Field(
        default_factory=dict, description="integer output -> output: not compared where "
        "that output is zero in both the reference's and the candidate's results")
    index_outputs: dict[int, IndexOutput] = Field(
        default_factory=dict, description="integer output -> the tensor its indices select "
        "from: judged by the values selected, not the indices")
    model_share: float | None = Field(
        None, ge=0.0, le=1.0, description="the fraction of its source model's time it takes "
        "(solforge extract): the planner's weight for it")
    model_roofline: float | None = Field(
        None, ge=0.0, le=1.0, description="how close the source model ran it to its speed of "
        "light (solforge extract: bound over measured time); the planner ranks an untried "
        "problem by model_share * (1 - model_roofline)")
    family: str = Field("", description="the model family (SOLFORGE['family']; default: the "
                        "first of models)")
    direction: Literal["forward", "backward"] = Field(
        "forward", description="backward: the outputs are gradients, given the upstream one")
    shapes_from: str = Field("", description="where the workloads' shapes come from (a "
                             "config's fields, a paper, solforge extract of a model)")
    flops_fn: Callable[[dict[str, Any]], float] | None = None
    bytes_fn: Callable[[dict[str, Any]], float] | None = None
    content_hash: str = ""
    origin: dict[str, str] = Field(
        default_factory=dict, description="where the problem came from: format, "
        "source_file, license, ... (SOLFORGE['origin'], or set by the loader)")

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

    def for_workload(self, w: Workload) -> Problem:
        """This problem judged under ``w``'s own tolerance, when it declares one."""
        if w.precision is None:
            return self
        return self.model_copy(update={"precision": w.precision.model_copy(
            update={"unit": self.precision.unit})})

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
            "family": self.family,
            "direction": self.direction,
            "shapes_from": self.shapes_from,
            "precision": self.precision.name,
            "path": str(self.path),
            "description": self.description,
            "origin": self.origin,
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
    from solforge.problems.gen import DEFAULT_DISTRIBUTIONS, DISTRIBUTIONS, PLAIN_DISTRIBUTIONS

    dists = list(meta.get("distributions")
                 or (PLAIN_DISTRIBUTIONS if plain else DEFAULT_DISTRIBUTIONS))
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
    share = meta.get("model_share")
    if share is not None and not (isinstance(share, (int, float)) and 0.0 <= share <= 1.0):
        raise ProblemError(f"{path}: SOLFORGE['model_share'] must be a fraction from 0 to 1 "
                           f"(of the source model's time); got {share!r}")
    roof = meta.get("model_roofline")
    if roof is not None and not (isinstance(roof, (int, float)) and 0.0 <= roof <= 1.0):
        raise ProblemError(f"{path}: SOLFORGE['model_roofline'] must be a fraction from 0 to 1 "
                           f"(the module's bound over its time in the model); got {roof!r}")
    direction = meta.get("direction") or "forward"
    if direction not in ("forward", "backward"):
        raise ProblemError(f"{path}: SOLFORGE['direction'] must be 'forward' or 'backward' "
                           f"(the outputs are gradients); got {direction!r}")
    models = list(meta.get("models") or [])
    return Problem(
        name=name, model_share=share, model_roofline=roof, direction=direction,
        family=str(meta.get("family") or (models[0] if models else "")),
        shapes_from=str(meta.get("shapes_from") or ""), path=path, category=category, source=source,
        models=models, precision=precision,
        description=str(meta.get("description") or (module.__doc__ or "").strip()),
        workloads=workloads, distributions=dists, train_mode=bool(meta.get("train_mode")),
        kernelbench_plain=plain, flops_fn=flops_fn, bytes_fn=bytes_fn,
        sol_unit=meta.get("sol_unit"), ignore_where_zero=dict(ignore),
        index_outputs=_index_outputs(path, meta.get("index_outputs"), ignore),
        content_hash=file_hash(path),
        origin=_origin(path, meta.get("origin")),
    )


def _origin(path: Path, raw: Any) -> dict[str, str]:
    """SOLFORGE['origin'] checked: a dict of strings (format, source_file, license, ...)."""
    if raw is None:
        return {}
    if not (isinstance(raw, dict) and all(isinstance(k, str) for k in raw)):
        raise ProblemError(f"{path}: SOLFORGE['origin'] must be a dict of strings, e.g. "
                           "{'format': 'sol-execbench', 'source_file': '...', 'license': "
                           f"'Apache-2.0'}}; got {raw!r}")
    return {k: str(v) for k, v in raw.items() if v is not None}


_INDEX_EXAMPLE = ("{1: {'input': 0, 'dim': -1}} (output 1 holds indices along dim -1 of "
                  "input 0; or 'values': an output's index, or 'from_inputs': a function)")


def _index_outputs(path: Path, raw: Any, ignore: dict[int, int]) -> dict[int, IndexOutput]:
    """SOLFORGE['index_outputs'] checked: a :class:`ProblemError` names what is wrong."""
    if raw is None:
        return {}
    where = f"{path}: SOLFORGE['index_outputs']"
    if not isinstance(raw, dict):
        raise ProblemError(f"{where} must map an output's index to a declaration, e.g. "
                           f"{_INDEX_EXAMPLE}; got {raw!r}")
    out: dict[int, IndexOutput] = {}
    for i, decl in raw.items():
        if not (isinstance(i, int) and not isinstance(i, bool) and i >= 0
                and isinstance(decl, dict)):
            raise ProblemError(f"{where} must map an output's index to a dict, e.g. "
                               f"{_INDEX_EXAMPLE}; got {i!r}: {decl!r}")
        try:
            d = IndexOutput(**decl)
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(x) for x in err["loc"])
            raise ProblemError(f"{where}[{i}]: {field + ': ' if field else ''}"
                               f"{err['msg'].removeprefix('Value error, ')}; e.g. "
                               f"{_INDEX_EXAMPLE}") from None
        if d.values == i:
            raise ProblemError(f"{where}[{i}]: output {i} cannot hold indices into itself; "
                               "name the output, input or function they select from")
        if i in ignore:
            raise ProblemError(f"{where}[{i}]: output {i} is also in ignore_where_zero; keep "
                               "one (an index output already passes where its indices select "
                               "values tied with the reference's, zeros included)")
        out[i] = d
    return out
