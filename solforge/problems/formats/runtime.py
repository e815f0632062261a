"""What a problem file converted from a definition calls when it runs: inputs and outputs.

A converted file (``solexec.py`` writes it) keeps its definition and workloads as data and
calls :func:`make_inputs` from ``get_inputs``: each input in definition order, drawn
as SOL-ExecBench draws it, under the global RNG the evaluator seeds per trial.

- ``random``: by dtype (``randn`` for float32/16/bf16, drawn through ``gen.randn`` so the
  evaluator's second distribution, ``outliers``, reaches them; fp8 from a float32 normal clamped
  to [-2, 2]; packed fp4 quantised from a normal; bool 0/1; int8 in [-128, 128), wider ints
  in [-1024, 1024)), and for floating inputs by name first: norm weights are ones, norm
  biases zeros, a square ``attention_mask``/``causal_mask`` causal (the dtype's minimum
  above the diagonal), binary masks 0/1, ``cos``/``sin`` of a clamped normal, std-like
  names positive, SSM decay names (``A``, ``A_log``, ``A_cumsum``, ``g``) in their ranges,
  softmax outputs normalised, weight matrices scaled by 1/sqrt(fan-in); a scalar input
  without a source is one random draw; ``probs`` of a ``sampling`` op is softmaxed.
- ``scalar``: the value. ``custom``: the reference's ``custom_inputs_entrypoint`` called
  with every axis and scalar, once per input set. ``safetensors``: the tensor from the
  file (found under the blob roots, checked for shape and dtype when it loads).

:func:`dps_outputs` allocates a destination-passing solution's outputs (zeros, as
SOL-ExecBench does) from the shapes of the inputs it received.

Not covered: the Hugging Face blob download (files must be on disk), and SOL-ExecBench's
shifting memory pool (solforge's own timing rotates input sets).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from solforge.problems.formats.definition import (
    AxisVar,
    CustomInput,
    Definition,
    SafetensorsInput,
    ScalarInput,
    Workload,
    check_workload,
    parse_definition,
    resolve_axes,
    shape_of,
)
from solforge.problems import gen
from solforge.problems.spec import ProblemError

_DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
           "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
           "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}
for _name in ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn_x2"):
    if hasattr(torch, _name):
        _DTYPES[_name] = getattr(torch, _name)


def torch_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype {name!r} has no torch dtype in this torch "
                         f"{torch.__version__}") from None


def definition(data: dict[str, Any]) -> Definition:
    """A converted file's ``DEFINITION`` literal, checked as the original was."""
    return parse_definition(data, "DEFINITION")


def workloads(d: Definition, rows: list[dict[str, Any]]) -> list[Workload]:
    """A converted file's ``WORKLOADS`` literal, each checked against ``d``."""
    out = []
    for i, row in enumerate(rows):
        try:
            w = Workload.model_validate(row)
        except ValidationError as e:
            raise ProblemError(f"WORKLOADS[{i}]: {e.errors()[0]['msg']}") from None
        check_workload(w, d, f"WORKLOADS[{i}]")
        out.append(w)
    return out


def pick(ws: list[Workload], uuid: str) -> Workload:
    for w in ws:
        if w.uuid == uuid:
            return w
    raise KeyError(f"no workload with uuid {uuid!r}; the uuids are "
                   f"{', '.join(w.uuid for w in ws)}")


def make_inputs(d: Definition, w: Workload, namespace: dict[str, Any],
                blob_roots: list[str]) -> list[Any]:
    """Workload ``w``'s inputs in definition order (see module docstring)."""
    axes = resolve_axes(d, w.axes)
    device = torch.empty(0).device  # the evaluator's device context, when it sets one
    scalars = {k: v.value for k, v in w.inputs.items() if isinstance(v, ScalarInput)}
    custom: dict[str, Any] = {}
    if any(isinstance(v, CustomInput) for v in w.inputs.values()):
        fn = namespace.get(d.custom_inputs_entrypoint or "")
        if not callable(fn):
            raise RuntimeError(f"custom_inputs_entrypoint {d.custom_inputs_entrypoint!r} is "
                               "not a function of the reference")
        custom = dict(fn({**axes, **scalars}, device))
    out: list[Any] = []
    for name, spec in d.inputs.items():
        src = w.inputs.get(name)
        dtype = torch_dtype(spec.dtype)
        if isinstance(src, ScalarInput):
            out.append(src.value)
        elif isinstance(src, CustomInput):
            if name not in custom:
                raise RuntimeError(f"{d.custom_inputs_entrypoint} returned no {name!r} "
                                   f"(it returned {', '.join(custom) or 'nothing'})")
            out.append(custom[name])
        elif isinstance(src, SafetensorsInput):
            out.append(_load_tensor(src, blob_roots, shape_of(spec, axes), dtype, name))
        else:
            shape = shape_of(spec, axes)
            if shape is None:
                out.append(_random(tuple(), dtype).item())
                continue
            t = _by_name(name, shape, dtype, spec.description)
            if t is None:
                t = _random(shape, dtype)
            if d.op_type == "sampling" and name == "probs":
                t = torch.softmax(t, dim=-1)
            out.append(t)
    return out


def dps_outputs(d: Definition, args: tuple[Any, ...]) -> list[torch.Tensor]:
    """Zeroed outputs for inputs ``args`` (var axes read from the input shapes)."""
    values: dict[str, int] = {}
    for (name, spec), x in zip(d.inputs.items(), args):
        if spec.shape is None or not isinstance(x, torch.Tensor):
            if spec.shape is None and name in d.axes:
                values[name] = int(x)
            continue
        for axis, size in zip(spec.shape, x.shape):
            if isinstance(d.axes[axis], AxisVar):
                values[axis] = int(size)
    axes = resolve_axes(d, values)
    device = next((x.device for x in args if isinstance(x, torch.Tensor)), None)
    outs = []
    for name, spec in d.outputs.items():
        unknown = [a for a in spec.shape or () if a not in axes]
        if unknown:
            raise RuntimeError(f"output {name!r}: axis {unknown[0]!r} is in no input's shape, "
                               "so destination-passing style cannot size it; write the "
                               "solution in return style (destination_passing_style: false)")
        shape = shape_of(spec, axes)
        if shape is None:
            raise RuntimeError(f"output {name!r} is a scalar: destination-passing style "
                               "needs tensor outputs; write the solution in return style")
        outs.append(torch.zeros(shape, dtype=torch_dtype(spec.dtype), device=device))
    return outs


def resolve_blob(path: str, roots: list[str]) -> Path | None:
    """``path`` under the first root that has it (leading components of ``path`` dropped one
    by one, so ``blob/x.safetensors`` is found in a root that is itself ``blob/``)."""
    p = Path(path)
    if p.is_absolute():
        return p if p.is_file() else None
    for root in roots:
        for start in range(len(p.parts)):
            c = Path(root) / Path(*p.parts[start:])
            if c.is_file():
                return c
    return None


_FILES: dict[str, dict[str, torch.Tensor]] = {}


def _load_tensor(src: SafetensorsInput, roots: list[str], shape: tuple[int, ...] | None,
                 dtype: torch.dtype, name: str) -> torch.Tensor:
    found = resolve_blob(src.path, roots)
    if found is None:
        raise FileNotFoundError(f"input {name!r}: safetensors file {src.path!r} is not under "
                                f"{', '.join(roots)}")
    key = str(found.resolve())
    if key not in _FILES:
        from safetensors.torch import load_file

        _FILES[key] = load_file(key)
    tensors = _FILES[key]
    if src.tensor_key not in tensors:
        raise KeyError(f"input {name!r}: {found} has no tensor {src.tensor_key!r} (it has "
                       f"{', '.join(sorted(tensors))})")
    t = tensors[src.tensor_key]
    if shape is not None and tuple(t.shape) != shape:
        raise ValueError(f"input {name!r}: {found}[{src.tensor_key}] has shape "
                         f"{tuple(t.shape)}, the definition gives {shape}")
    if t.dtype != dtype:
        raise ValueError(f"input {name!r}: {found}[{src.tensor_key}] is {t.dtype}, the "
                         f"definition gives {dtype}")
    return t.clone()


def _random(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    if dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        return gen.randn(shape, dtype=dtype)
    if "float8" in str(dtype):
        return torch.randn(shape).clamp_(-2.0, 2.0).to(dtype)
    if "float4" in str(dtype):
        return _fp4x2(torch.randn(shape))
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, dtype=torch.bool)
    if dtype in (torch.int8, torch.uint8):
        lo, hi = (-128, 128) if dtype is torch.int8 else (0, 256)
        return torch.randint(lo, hi, shape, dtype=dtype)
    return torch.randint(-1024, 1024, shape, dtype=dtype)


# e2m1 code points; a value takes the nearest (ties toward the smaller magnitude code)
_FP4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _fp4x2(x: torch.Tensor) -> torch.Tensor:
    """Quantise to e2m1 and pack two codes a byte along the last dimension."""
    mag = (x.abs().unsqueeze(-1) - _FP4.to(x.device)).abs().argmin(-1).to(torch.uint8)
    code = mag | ((x < 0).to(torch.uint8) << 3)
    packed = code[..., ::2] | (code[..., 1::2] << 4)
    return packed.view(torch.float4_e2m1fn_x2)


_WEIGHT_SUFFIXES = ("_weight", "_weights", "_proj", "_projs", "_proj_weight",
                    "_proj_weights", "_weight_matrix")
_NORMS = ("norm", "layernorm")


def _normish(name: str, suffix: str) -> bool:
    if name == f"norm{suffix}":
        return True
    if not name.endswith(suffix):
        return False
    return name[:-len(suffix)].rstrip("0123456789").endswith(_NORMS)


def _by_name(name: str, shape: tuple[int, ...], dtype: torch.dtype,
             description: str | None) -> torch.Tensor | None:
    """The tensor a floating input's name implies, or None (then a plain random draw)."""
    if not dtype.is_floating_point or "float8" in str(dtype) or "float4" in str(dtype):
        return None
    desc = (description or "").lower()
    base = name.rstrip("0123456789")
    if _normish(name, "_weight"):
        return torch.ones(shape, dtype=dtype)
    if _normish(name, "_bias"):
        return torch.zeros(shape, dtype=dtype)
    square = len(shape) >= 2 and shape[-1] == shape[-2]
    if square and (name in ("attention_mask", "causal_mask")
                   or ("attention mask" in desc and "causal" in desc)):
        above = torch.triu(torch.ones(shape[-1], shape[-1], dtype=torch.bool), diagonal=1)
        return torch.zeros(shape, dtype=dtype).masked_fill(above, torch.finfo(dtype).min)
    if name in ("x_mask", "text_mask", "aspect_ratio_mask", "drop_mask", "attention_mask") or (
            name.endswith("_mask") and any(k in desc for k in (
                "binary", "{0, 1}", "0 or 1", "1.0 for valid", "0.0 for masked"))):
        return torch.randint(0, 2, shape).to(dtype)
    if name in ("cos", "sin", "cos_cached", "sin_cached", "rope_cos", "rope_sin"):
        t = torch.randn(shape).clamp_(-math.pi, math.pi)
        return (torch.cos(t) if "cos" in name else torch.sin(t)).to(dtype)
    if base in ("rstd", "std", "variance", "var") or name.endswith(
            ("_rstd", "_std", "_variance", "_var")) or base.endswith(("_rstd", "_std", "_var")):
        return torch.randn(shape, dtype=dtype).abs() + 0.1
    if name == "A_cumsum":
        return torch.empty(shape, dtype=dtype).uniform_(-0.1, 0.0).cumsum(dim=-1)
    ranges = {"A_log": (-5.0, -1.0), "A": (-1.0, -0.001), "g": (-5.0, 0.0)}
    if name in ranges:
        return torch.empty(shape, dtype=dtype).uniform_(*ranges[name])
    if name in ("attn_weights", "attention_weights", "routing_weights") or (
            "softmax" in desc and "output" in desc):
        return torch.softmax(torch.randn(shape), dim=-1).to(dtype)
    if len(shape) >= 2 and (name == "weight" or name.endswith(_WEIGHT_SUFFIXES)
                            or base == "weight" or base.endswith(_WEIGHT_SUFFIXES)):
        return torch.randn(shape, dtype=dtype) / math.sqrt(shape[-1])
    return None
