"""SOL-ExecBench problem folders and FlashInfer-Bench datasets as solforge problem files.

A SOL-ExecBench problem is a folder with ``definition.json``, ``workload.jsonl`` and
(usually) ``reference.py``; a FlashInfer-Bench dataset keeps ``definitions/<op>/<name>.json``
beside ``workloads/<op>/<name>.jsonl``. :func:`convert` writes one plain solforge problem
file per definition: the definition and workloads as data (``DEFINITION``, ``WORKLOADS``),
the reference unchanged, ``class Model`` calling its ``run`` (return style), ``get_inputs``
drawing a workload's inputs through ``runtime.make_inputs``, and a ``SOLFORGE`` dict with
one solforge workload per workload line (its ``uuid``, axes and input sources as params;
its tolerance as the workload's own precision class; visible unless a seeded share is
held out; ``cpu`` when its tensors are small). ``solforge import`` writes these files for
people who want to edit them; the loader writes them into a content-addressed folder
under the system's temporary directory so that such a folder is a target as it stands.

Not covered: a reference whose ``run`` is not in return style (SOL-ExecBench references
all return their outputs), and problems whose tensors need more memory than the device
has (converted, and then the evaluator reports it).
"""

from __future__ import annotations

import hashlib
import os
import pprint
import random
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from solforge.problems.formats.definition import (
    Definition,
    SafetensorsInput,
    Tolerance,
    Workload,
    parse_definition,
    parse_workloads,
    read_json,
    resolve_axes,
    shape_of,
)
from solforge.problems.formats.runtime import resolve_blob
from solforge.problems.precision import get_precision
from solforge.problems.spec import ProblemError

SOL_EXECBENCH = "sol-execbench"
FLASHINFER = "flashinfer-bench"
LICENSES = {SOL_EXECBENCH: "Apache-2.0", FLASHINFER: "Apache-2.0"}
CPU_ELEMENTS = 1 << 22   # a workload whose tensors together hold fewer runs on a CPU
_PRECISION = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp32",
              "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float4_e2m1fn_x2": "fp8",
              "int8": "int8"}


@dataclass
class Source:
    """One definition to convert: its files and the format they are in."""

    definition: Path
    workloads: Path
    reference: Path | None
    format: str
    blob_roots: list[Path] = field(default_factory=list)


def sources(directory: Path) -> list[Source]:
    """The definitions under ``directory``: the folder itself when it holds a
    ``definition.json``, else the problem folders below it (any depth), else a
    FlashInfer-Bench dataset's ``definitions/``; ``[]`` for any other folder."""
    d = Path(directory)
    if (d / "definition.json").is_file():
        return [_folder(d)]
    if (d / "definitions").is_dir():
        return _flashinfer(d)
    return [_folder(f.parent) for f in sorted(d.rglob("definition.json"))]


def is_dataset_file(f: Path, root: Path) -> bool:
    """A file of a FlashInfer-Bench dataset's own folders (its solutions' sources)."""
    try:
        return Path(f).resolve().relative_to(Path(root).resolve()).parts[0] in (
            "definitions", "workloads", "solutions", "traces", "blob")
    except (ValueError, IndexError):
        return False


def _folder(d: Path) -> Source:
    ref = d / "reference.py"
    return Source(d / "definition.json", d / "workload.jsonl", ref if ref.is_file() else None,
                  SOL_EXECBENCH, [d, *list(d.parents)[:4]])


def _flashinfer(root: Path) -> list[Source]:
    """A TraceSet's definitions, each with the workload file of the same relative path
    (its layout: ``workloads/<op>/<name>.jsonl`` of workload traces)."""
    out = []
    for f in sorted((root / "definitions").rglob("*.json")):
        rel = f.relative_to(root / "definitions").with_suffix(".jsonl")
        out.append(Source(f, root / "workloads" / rel, None, FLASHINFER, [root]))
    return out


def read(src: Source) -> tuple[Definition, list[Workload], str]:
    """The definition, its workloads and the reference's source, checked."""
    d = parse_definition(read_json(src.definition), str(src.definition))
    reference = src.reference.read_text() if src.reference else d.reference
    if not reference.strip():
        raise ProblemError(f"{src.definition}: field 'reference' is empty and there is no "
                           "reference.py beside it; give the PyTorch reference with a `run`")
    try:
        compile(reference, str(src.reference or src.definition), "exec")
    except SyntaxError as e:
        where = src.reference or f"{src.definition} field 'reference'"
        raise ProblemError(f"{where}:{e.lineno}: the reference is not valid Python ({e.msg}); "
                           "fix it") from None
    if not re.search(r"^def run\(|^async def run\(|^run\s*=", reference, re.M):
        where = src.reference or f"{src.definition} field 'reference'"
        raise ProblemError(f"{where}: the reference defines no top-level `run` function (its "
                           "entry point); define `def run(<inputs>)` returning the outputs")
    if not src.workloads.is_file():
        raise ProblemError(f"{src.workloads}: no such file; the workloads of "
                           f"{src.definition} go here, one JSON object a line")
    ws = parse_workloads(src.workloads, d)
    for n, w in enumerate(ws, 1):
        for name, s in w.inputs.items():
            if isinstance(s, SafetensorsInput) and resolve_blob(
                    s.path, [str(r) for r in src.blob_roots]) is None:
                raise ProblemError(
                    f"{src.workloads}:{n}: input {name!r} reads safetensors file {s.path!r}, "
                    f"which is not under {src.blob_roots[0]} or its parents; download the "
                    "blobs (SOL-ExecBench: scripts/download_data.sh) or drop the workload")
    return d, ws, reference


def problem_name(d: Definition) -> str:
    """The definition's name where it is a safe file name, else it with the rest as _."""
    return re.sub(r"[^\w.\-]", "_", d.name)


def render(src: Source, holdout: float = 0.0) -> tuple[str, str]:
    """(problem name, the problem file's text) for ``src``; ``holdout`` is the share of its
    workloads held out, chosen by a generator seeded with the name."""
    d, ws, reference = read(src)
    name = problem_name(d)
    held = set(_held_out(name, [w.uuid for w in ws], holdout))
    precision = _precision(d)
    entries = [_workload_entry(i, d, w, w.uuid not in held, precision)
               for i, w in enumerate(ws)]
    origin = {"format": src.format, "source_file": str(src.definition.resolve()),
              "license": LICENSES[src.format], "definition": d.name}
    meta = {"name": name, "category": d.op_type or src.format, "precision": precision,
            "description": (d.description or "").strip(),
            "distributions": ["normal", "outliers"],
            "workloads": entries, "origin": origin}
    data = d.model_dump(mode="json", exclude={"reference"})
    workloads = [w.model_dump(mode="json", exclude_none=True) for w in ws]
    roots = [str(r.resolve()) for r in src.blob_roots]
    text = _TEMPLATE.format(
        name=name, fmt=src.format, source=src.definition.resolve(),
        description=_docline(d.description or d.op_type or ""),
        definition=pprint.pformat(data, sort_dicts=False, width=96),
        workloads=pprint.pformat(workloads, sort_dicts=False, width=96),
        roots=pprint.pformat(roots, width=96),
        reference_from=src.reference.name if src.reference else "the definition's 'reference'",
        reference=reference.rstrip() + "\n",
        meta=pprint.pformat(meta, sort_dicts=False, width=96))
    return name, text


def convert(src: Source, out_dir: Path, holdout: float = 0.0) -> Path:
    """Write ``src`` as ``<out_dir>/<name>.py`` and return the file."""
    name, text = render(src, holdout)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.py"
    if not (path.is_file() and path.read_text() == text):  # unchanged: keep its mtime
        write_atomic(path, text)
    return path


def write_atomic(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: an evaluator process may be importing it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def converted_dir(src: Source) -> Path:
    """Where the loader keeps ``src``'s converted file: a folder named by the hash of its
    files' contents (and their place), so an edited source gets a fresh file."""
    h = hashlib.sha256()
    for p in (src.definition, src.workloads, src.reference):
        if p is not None and p.is_file():
            h.update(str(p.resolve()).encode() + b"\0" + p.read_bytes())
    return Path(tempfile.gettempdir()) / "solforge-converted" / h.hexdigest()[:16]


def _held_out(name: str, uuids: list[str], share: float) -> list[str]:
    if share <= 0 or len(uuids) < 2:
        return []
    k = min(len(uuids) - 1, max(1, round(share * len(uuids))))
    return random.Random(name).sample(uuids, k)


def _precision(d: Definition) -> str:
    for spec in list(d.outputs.values()) + list(d.inputs.values()):
        if spec.dtype in _PRECISION:
            return _PRECISION[spec.dtype]
    return "fp32"


def _workload_entry(i: int, d: Definition, w: Workload, visible: bool,
                    precision: str) -> dict:
    axes = resolve_axes(d, w.axes)
    elements = 0
    for spec in [*d.inputs.values(), *d.outputs.values()]:
        shape = shape_of(spec, axes)
        n = 1
        for s in shape or ():
            n *= s
        elements += n
    tol = w.tolerance or Tolerance()
    unit = get_precision(precision).unit
    # no commas or '=': `--workloads a,b` splits names on commas
    label = "_".join(f"{k}{v}" for k, v in w.axes.items())
    return {
        "name": f"w{i:02d}" + (f"_{label}" if label else ""),
        "params": {"uuid": w.uuid, "axes": dict(w.axes),
                   "inputs": {k: v.model_dump(mode="json") for k, v in w.inputs.items()}},
        "visible": visible,
        "cpu": elements <= CPU_ELEMENTS,
        "precision": {"name": f"{d.name}:{w.uuid}", "atol": tol.max_atol,
                      "rtol": tol.max_rtol, "matched_ratio": tol.required_matched_ratio,
                      "max_abs_cap": tol.max_error_cap, "reject_nonfinite": True,
                      "allow_negative_inf": tol.allow_negative_inf, "unit": unit},
    }


def _docline(text: str) -> str:
    one = " ".join(text.split())
    return (one[:300] + "...") if len(one) > 300 else one


_TEMPLATE = '''"""{name}: {description}

Converted by solforge from {fmt} ({source}). DEFINITION and WORKLOADS are that
definition and its workload lines as data; the reference below is {reference_from},
unchanged. Edit freely: this file is a plain solforge problem.
"""

import torch

from solforge.problems.formats import runtime as _solforge_rt

DEFINITION = _solforge_rt.definition({definition})

WORKLOADS = _solforge_rt.workloads(DEFINITION, {workloads})

BLOB_ROOTS = {roots}

# ---- the reference ({reference_from}) ----
{reference}# ---- end of the reference ----


class Model(torch.nn.Module):
    """The reference's ``run`` (return style) as a KernelBench model."""

    def forward(self, *inputs):
        return run(*inputs)


def get_init_inputs():
    return []


def get_inputs(uuid=WORKLOADS[0].uuid):
    """The inputs of the workload with this uuid, in the definition's order."""
    return _solforge_rt.make_inputs(DEFINITION, _solforge_rt.pick(WORKLOADS, uuid),
                                    globals(), BLOB_ROOTS)


SOLFORGE = {meta}
'''
