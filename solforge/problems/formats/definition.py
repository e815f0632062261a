"""The definition and workload formats of SOL-ExecBench and FlashInfer-Bench, read.

Both benchmarks describe an operator the same way: a *definition* (named axes that are
``const``, ``var`` or ``expr``; named input and output tensors with a shape made of axis
names and a dtype; optional ``constraints`` relating the axes; a PyTorch ``reference``
whose ``run`` returns the outputs; optionally a ``custom_inputs_entrypoint``) and
*workloads* (one JSON object a line: a ``uuid``, values for the ``var`` axes, and how
each input is sourced: ``random``, ``scalar``, ``safetensors`` or ``custom``; SOL-ExecBench
adds a per-workload ``tolerance``). FlashInfer-Bench's schema is the subset without
``expr`` axes, custom inputs and tolerances, so one reader serves both.

Every error is a :class:`~solforge.problems.spec.ProblemError` naming the file, the field
and what to write instead. Unknown fields are kept out of the way (both formats grow),
never an error.

Not covered: ``float4_e2m1`` inputs other than packed ``float4_e2m1fn_x2`` (torch has no
unpacked fp4 dtype), and safetensors paths given as URIs.
"""

from __future__ import annotations

import ast
import json
import operator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from solforge.problems.spec import ProblemError

DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
          "float4_e2m1", "float4_e2m1fn_x2", "int64", "int32", "int16", "int8", "uint8",
          "bool")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class AxisConst(_Model):
    type: Literal["const"]
    value: int = Field(ge=0, description="the axis's fixed size")
    description: str | None = None


class AxisVar(_Model):
    type: Literal["var"]
    description: str | None = None


class AxisExpr(_Model):
    type: Literal["expr"]
    expression: str = Field(description="arithmetic over other axes: + - * / // % **")
    description: str | None = None


Axis = Annotated[AxisConst | AxisVar | AxisExpr, Field(discriminator="type")]


class TensorSpec(_Model):
    shape: list[str] | None = Field(description="axis names; [] a 0-d tensor; null a scalar")
    dtype: Literal[DTYPES]  # type: ignore[valid-type]
    description: str | None = None


class Definition(_Model):
    """An operator's contract: axes, inputs, outputs, reference (see module docstring)."""

    name: str = Field(min_length=1)
    op_type: str | None = None
    description: str | None = None
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    reference: str = ""
    constraints: list[str] = Field(default_factory=list)
    custom_inputs_entrypoint: str | None = None
    tags: list[str] = Field(default_factory=list)


class RandomInput(_Model):
    type: Literal["random"]


class ScalarInput(_Model):
    type: Literal["scalar"]
    value: int | float | bool


class SafetensorsInput(_Model):
    type: Literal["safetensors"]
    path: str = Field(min_length=1)
    tensor_key: str = Field(min_length=1)


class CustomInput(_Model):
    type: Literal["custom"]


InputSpec = Annotated[RandomInput | ScalarInput | SafetensorsInput | CustomInput,
                      Field(discriminator="type")]


class Tolerance(_Model):
    """SOL-ExecBench's per-workload correctness bounds, with its defaults."""

    max_atol: float = Field(1e-2, ge=0)
    max_rtol: float = Field(1e-2, ge=0)
    required_matched_ratio: float = Field(0.99, ge=0, le=1)
    max_error_cap: float | None = Field(None, ge=0)
    allow_negative_inf: bool = False


class Workload(_Model):
    uuid: str = Field(min_length=1)
    axes: dict[str, int] = Field(default_factory=dict)
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    tolerance: Tolerance | None = None


_FIXES = {
    "axes": "each axis is {'type': 'const', 'value': N}, {'type': 'var'} or "
            "{'type': 'expr', 'expression': '...'}",
    "inputs": "each input is {'shape': [axis names] or null, 'dtype': one of "
              f"{', '.join(DTYPES)}}} in a definition, and {{'type': 'random' | 'scalar' "
              "(with 'value') | 'safetensors' (with 'path', 'tensor_key') | 'custom'} in a "
              "workload",
    "outputs": "each output is {'shape': [axis names], 'dtype': ...}",
    "tolerance": "max_atol, max_rtol (>= 0), required_matched_ratio (0..1), "
                 "max_error_cap (>= 0 or null), allow_negative_inf (bool)",
    "uuid": "give every workload a unique 'uuid' string",
    "name": "give the definition a non-empty 'name'",
}


def _pydantic_error(where: str, e: ValidationError) -> ProblemError:
    err = e.errors()[0]
    loc = [str(x) for x in err["loc"] if not str(x).startswith(("function-", "tagged-"))]
    field = ".".join(loc) or "(top level)"
    fix = _FIXES.get(loc[0] if loc else "", "see the format's documentation")
    return ProblemError(f"{where}: field {field!r}: {err['msg']}; {fix}")


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ProblemError(f"{path}: not valid JSON ({e}); fix the syntax") from None


def parse_definition(data: Any, where: str) -> Definition:
    """A definition from its JSON form, checked: axis references, names, constraints."""
    if not isinstance(data, dict):
        raise ProblemError(f"{where}: a definition is a JSON object with name, axes, inputs, "
                           f"outputs and reference; got {type(data).__name__}")
    try:
        d = Definition.model_validate(data)
    except ValidationError as e:
        raise _pydantic_error(where, e) from None
    for kind, specs in (("inputs", d.inputs), ("outputs", d.outputs)):
        for name, spec in specs.items():
            for axis in spec.shape or []:
                if axis not in d.axes:
                    raise ProblemError(f"{where}: field '{kind}.{name}.shape': axis {axis!r} "
                                       f"is not among the axes ({', '.join(d.axes)}); "
                                       "declare it under 'axes'")
    both = set(d.inputs) & set(d.outputs)
    if both:
        raise ProblemError(f"{where}: {sorted(both)} are both inputs and outputs; rename one")
    for name, axis in d.axes.items():
        if isinstance(axis, AxisExpr):
            _check_expression(axis.expression, set(d.axes) - {name},
                              f"{where}: field 'axes.{name}.expression'")
    for i, c in enumerate(d.constraints):
        _check_expression(c, set(d.axes) | set(d.inputs),
                          f"{where}: field 'constraints[{i}]'")
    return d


def parse_workloads(path: Path, d: Definition) -> list[Workload]:
    """The workloads of a ``.jsonl`` file, each checked against definition ``d``: workload
    objects (SOL-ExecBench) or workload traces naming ``d`` (FlashInfer-Bench; traces of
    other definitions are passed over)."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file") from None
    out: list[Workload] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise ProblemError(f"{where}: not valid JSON ({e}); one JSON object a line") from None
        if isinstance(data, dict) and isinstance(data.get("workload"), dict):
            # a FlashInfer-Bench workload trace: {definition, workload, solution: null, ...}
            if data.get("definition") not in (None, d.name):
                continue
            data = data["workload"]
        if not isinstance(data, dict):
            raise ProblemError(f"{where}: a workload is a JSON object with uuid, axes, inputs")
        try:
            w = Workload.model_validate(data)
        except ValidationError as e:
            raise _pydantic_error(where, e) from None
        check_workload(w, d, where)
        if w.uuid in seen:
            raise ProblemError(f"{where}: uuid {w.uuid!r} repeats an earlier line; make it "
                               "unique")
        seen.add(w.uuid)
        out.append(w)
    if not out:
        raise ProblemError(f"{path}: no workloads; write one JSON object a line")
    return out


def check_workload(w: Workload, d: Definition, where: str) -> None:
    """Every ``var`` axis has a value and every input a source that fits its spec."""
    var = [a for a, ax in d.axes.items() if isinstance(ax, AxisVar)]
    missing = [a for a in var if a not in w.axes]
    if missing:
        raise ProblemError(f"{where}: field 'axes': no value for var axis "
                           f"{', '.join(missing)}; add it (e.g. \"{missing[0]}\": 128)")
    for name, src in w.inputs.items():
        if name not in d.inputs:
            raise ProblemError(f"{where}: field 'inputs.{name}': the definition has no input "
                               f"{name!r} (it has {', '.join(d.inputs)})")
        if isinstance(src, ScalarInput) and d.inputs[name].shape is not None:
            raise ProblemError(f"{where}: field 'inputs.{name}': a scalar source for a tensor "
                               "input; use 'random', 'safetensors' or 'custom'")
        if isinstance(src, CustomInput) and not d.custom_inputs_entrypoint:
            raise ProblemError(f"{where}: field 'inputs.{name}': 'custom' needs the "
                               "definition's custom_inputs_entrypoint (a function of the "
                               "reference); set it or use 'random'")
    resolved = resolve_axes(d, w.axes, where)
    for i, c in enumerate(d.constraints):
        scalars = {k: v.value for k, v in w.inputs.items() if isinstance(v, ScalarInput)}
        names = {**resolved, **scalars}
        try:
            ok = evaluate(c, names)
        except KeyError:
            continue  # names an input that is not a scalar here: checked when it runs
        if not ok:
            shown = ", ".join(f"{k}={v}" for k, v in resolved.items())
            raise ProblemError(f"{where}: constraint {c!r} (constraints[{i}]) does not hold "
                               f"for {shown}; fix the workload's axes")


def resolve_axes(d: Definition, var_values: dict[str, int], where: str = "") -> dict[str, int]:
    """Every axis's size: consts, the workload's vars, then exprs in dependency order."""
    out: dict[str, int] = {}
    for name, ax in d.axes.items():
        if isinstance(ax, AxisConst):
            out[name] = ax.value
        elif isinstance(ax, AxisVar) and name in var_values:
            out[name] = int(var_values[name])
    pending = {n: ax.expression for n, ax in d.axes.items() if isinstance(ax, AxisExpr)}
    while pending:
        done = {}
        for name, expr in pending.items():
            try:
                done[name] = int(evaluate(expr, out))
            except KeyError:
                continue
        if not done:
            raise ProblemError(f"{where or d.name}: axes {', '.join(pending)} cannot be "
                               "computed (their expressions name each other or a var axis "
                               "without a value)")
        out.update(done)
        for name in done:
            del pending[name]
    return out


def shape_of(spec: TensorSpec, axes: dict[str, int]) -> tuple[int, ...] | None:
    return None if spec.shape is None else tuple(axes[a] for a in spec.shape)


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
            ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}


def _check_expression(text: str, names: set[str], where: str) -> None:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ProblemError(f"{where}: {text!r} is not an expression ({e.msg})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in names:
            raise ProblemError(f"{where}: {text!r} names {node.id!r}, which is not an axis "
                               f"or input (known: {', '.join(sorted(names))})")
        if not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare,
                                 ast.BoolOp, ast.Name, ast.Constant, ast.Load, ast.operator,
                                 ast.unaryop, ast.cmpop, ast.boolop)):
            raise ProblemError(f"{where}: {text!r} uses {type(node).__name__}; only "
                               "arithmetic, comparisons, and/or over axis names are allowed")


def evaluate(text: str, names: dict[str, Any]) -> Any:
    """An axis expression or constraint over ``names``; KeyError for a name not there."""
    def ev(n: ast.AST) -> Any:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float, bool)):
            return n.value
        if isinstance(n, ast.Name):
            return names[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _BINARY:
            return _BINARY[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd, ast.Not)):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else (not v if isinstance(n.op, ast.Not)
                                                          else v)
        if isinstance(n, ast.Compare):
            left = ev(n.left)
            for op, right in zip(n.ops, n.comparators):
                r = ev(right)
                if type(op) not in _COMPARE or not _COMPARE[type(op)](left, r):
                    return False
                left = r
            return True
        if isinstance(n, ast.BoolOp):
            vals = [ev(v) for v in n.values]
            return all(vals) if isinstance(n.op, ast.And) else any(vals)
        raise ValueError(f"unsupported expression element {type(n).__name__}")

    return ev(ast.parse(text, mode="eval"))
