"""``solution.json`` (SOL-ExecBench and FlashInfer-Bench solutions) in and out.

In: :func:`to_solforge` writes a solforge solution file (``ModelNew``) for a solution.json
and the definition it solves. Its sources come inline (``sources[].content``) or from
files beside the JSON (a source without ``content`` is read from its ``path`` there).
Python languages (``pytorch``, ``python``, ``triton``, ``cute_dsl``): the entry file is
copied into the solution file unchanged (so the policy and the probes read the real code),
other sources are written beside it, and ``ModelNew.forward`` calls the entry function:
with zeroed outputs after the inputs and the outputs returned (destination-passing style,
the default) or returning what it returns (``destination_passing_style: false``).
``cuda_cpp``: every source is written beside the file and built with
``torch.utils.cpp_extension.load`` under the solution's ``compile_options`` (``cflags``,
``cuda_cflags``, ``ld_flags``); a source without ``PYBIND11_MODULE`` gets a binding of the
entry function. Any other language becomes a file that fails to import with a message
naming it, so the evaluator records COMPILE_ERROR.

Out: :func:`from_solforge` writes a solforge solution as a solution.json in return style:
the file's source plus a ``solforge_run`` that builds ``ModelNew`` once and calls it; its spec
carries both benchmarks' language keys (SOL-ExecBench's ``languages`` list and
FlashInfer-Bench's ``language``), so either accepts it.

FlashInfer-Bench's solutions read the same way (its single ``language``: ``python``,
``triton``, ``cuda``, ``cpp``).

Not covered: ``target_hardware`` and ``dependencies`` are recorded, not checked; C++
bindings other than ``torch`` (``tvm-ffi`` is refused the same way); languages besides those
above (cutile, cutlass, cudnn, cublas, cudnn_frontend, tilelang are refused).
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from solforge.problems.formats.definition import Definition
from solforge.problems.spec import ProblemError

PYTHON = {"pytorch": "pytorch", "python": "pytorch", "triton": "triton",
          "cute_dsl": "cute_dsl"}
CPP = {"cuda_cpp": "cuda_cpp", "cuda": "cuda_cpp", "cpp": "cuda_cpp"}  # FlashInfer: cuda, cpp
RUNS = ("pytorch", "triton", "cuda_cpp", "cute_dsl")


class CompileOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    cflags: list[str] = Field(default_factory=list)
    cuda_cflags: list[str] = Field(default_factory=lambda: ["-O3", "--use_fast_math"])
    ld_flags: list[str] = Field(default_factory=lambda: ["-lcuda"])


class BuildSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    languages: list[str] = Field(default_factory=list)
    language: str | None = Field(None, description="older single-language form")
    entry_point: str = Field(pattern=r"^[^:]+::[A-Za-z_]\w*$")
    destination_passing_style: bool = True
    binding: str | None = Field(None, description="C++ bindings: only 'torch' is built")
    target_hardware: list[str] = Field(default_factory=list)
    dependencies: list[str] = Field(default_factory=list)
    compile_options: CompileOptions = Field(default_factory=CompileOptions)

    @model_validator(mode="after")
    def _one_language(self) -> BuildSpec:
        if not self.languages and self.language:
            self.languages = [self.language]
        if not self.languages:
            raise ValueError("give 'languages', e.g. [\"triton\"]")
        self.languages = [x.lower() for x in self.languages]
        return self

    @property
    def entry_file(self) -> str:
        return self.entry_point.split("::")[0]

    @property
    def entry_function(self) -> str:
        return self.entry_point.split("::")[1]


class SourceFile(BaseModel):
    model_config = ConfigDict(extra="ignore")
    path: str = Field(min_length=1)
    content: str | None = None


class SolutionJson(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(min_length=1)
    definition: str = Field(min_length=1)
    author: str = "unknown"
    description: str | None = None
    spec: BuildSpec
    sources: list[SourceFile]


def read(path: Path) -> SolutionJson:
    """A solution.json, checked, with every source's content filled in."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such solution file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ProblemError(f"{path}: not valid JSON ({e}); fix the syntax") from None
    try:
        sol = SolutionJson.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise ProblemError(f"{path}: field {field!r}: {err['msg']}; a solution.json has "
                           "name, definition, spec {languages, entry_point 'file::function', "
                           "destination_passing_style} and sources [{path, content}]") from None
    seen: set[str] = set()
    for i, s in enumerate(sol.sources):
        rel = Path(s.path)
        if rel.is_absolute() or ".." in rel.parts:
            raise ProblemError(f"{path}: field 'sources.{i}.path': {s.path!r} must be a "
                               "relative path inside the solution (no leading /, no ..)")
        if s.path in seen:
            raise ProblemError(f"{path}: field 'sources.{i}.path': {s.path!r} repeats")
        seen.add(s.path)
        if s.content is None:
            beside = Path(path).parent / rel
            if not beside.is_file():
                raise ProblemError(f"{path}: field 'sources.{i}': no 'content' and no file "
                                   f"{beside}; give the source inline or put it there")
            s.content = beside.read_text()
    if sol.spec.entry_file not in seen:
        raise ProblemError(f"{path}: field 'spec.entry_point': {sol.spec.entry_file!r} is "
                           f"not among the sources ({', '.join(sorted(seen))})")
    return sol


def to_solforge(path: Path, d: Definition, out_dir: Path | None = None) -> Path:
    """Write the solforge solution for ``path`` (a solution.json solving ``d``) as
    ``<out_dir>/<problem name>.py`` (default: a folder named by the contents' hash under
    the system's temporary directory) and return it."""
    sol = read(path)
    from solforge.problems.formats.solexec import problem_name, write_atomic

    if out_dir is None:
        h = hashlib.sha256(Path(path).read_bytes() + d.name.encode()).hexdigest()[:16]
        out_dir = Path(tempfile.gettempdir()) / "solforge-solutions" / h
    out_dir.mkdir(parents=True, exist_ok=True)
    langs = sol.spec.languages
    if sol.spec.binding not in (None, "torch") and not all(x in PYTHON for x in langs):
        text = _refused(sol, langs, f"binding {sol.spec.binding!r} (solforge builds C++ "
                                    "through the torch binding only)")
    elif all(x in PYTHON for x in langs):
        text = _python(sol, d, out_dir)
    elif all(x in CPP for x in langs):
        text = _cpp(sol, d, out_dir)
    else:
        other = [x for x in langs if x not in PYTHON and x not in CPP]
        text = _refused(sol, other or langs, "")
    target = out_dir / f"{problem_name(d)}.py"
    write_atomic(target, text)
    return target


def _beside(sol: SolutionJson, out_dir: Path, skip: str | None) -> None:
    for s in sol.sources:
        if s.path == skip:
            continue
        dest = out_dir / s.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(s.content or "")


def _call(sol: SolutionJson, fn: str) -> str:
    if sol.spec.destination_passing_style:
        return (f"        outs = _solforge_rt.dps_outputs(_DEFINITION, inputs)\n"
                f"        {fn}(*inputs, *outs)\n"
                f"        return outs[0] if len(outs) == 1 else tuple(outs)\n")
    return f"        return {fn}(*inputs)\n"


def _header(sol: SolutionJson, language: str, d: Definition) -> str:
    data = d.model_dump(mode="json", include={"name", "axes", "inputs", "outputs"})
    return (f'"""{sol.name} (solution.json for {sol.definition} by {sol.author}), as a '
            f'solforge solution.\n\n{(sol.description or "").strip()}\n"""\n'
            f"LANGUAGE = {language!r}\n", data)


def _python(sol: SolutionJson, d: Definition, out_dir: Path) -> str:
    language = next((PYTHON[x] for x in sol.spec.languages if PYTHON[x] != "pytorch"),
                    "pytorch")
    entry = next(s for s in sol.sources if s.path == sol.spec.entry_file)
    _beside(sol, out_dir, skip=entry.path)
    head, data = _header(sol, language, d)
    sibling = len(sol.sources) > 1
    return (head + ("import os as _solforge_os\nimport sys as _solforge_sys\n"
                    "_solforge_sys.path.insert(0, _solforge_os.path.dirname("
                    "_solforge_os.path.abspath(__file__)))\n" if sibling else "")
            + f"\n# ---- {entry.path} (unchanged) ----\n{(entry.content or '').rstrip()}\n"
            f"# ---- end of {entry.path} ----\n\n"
            "import torch as _solforge_torch\n\n"
            "from solforge.problems.formats import runtime as _solforge_rt\n\n"
            f"_DEFINITION = _solforge_rt.definition({data!r})\n\n\n"
            "class ModelNew(_solforge_torch.nn.Module):\n"
            f'    """Calls {sol.spec.entry_point}."""\n\n'
            "    def forward(self, *inputs):\n"
            + _call(sol, sol.spec.entry_function))


_PYBIND = re.compile(r"PYBIND11_MODULE\s*\(")


def _cpp(sol: SolutionJson, d: Definition, out_dir: Path) -> str:
    _beside(sol, out_dir, skip=None)
    fn = sol.spec.entry_function
    files = [s.path for s in sol.sources if s.path.endswith((".cu", ".cpp", ".cc", ".cxx"))]
    if not any(_PYBIND.search(s.content or "") for s in sol.sources):
        entry = next(s for s in sol.sources if s.path == sol.spec.entry_file)
        decl = _declaration(entry.content or "", fn)
        if decl is None:
            raise ProblemError(f"{sol.spec.entry_file}: no definition of {fn}(...) to bind "
                               "and no PYBIND11_MODULE; define the entry function or bind it")
        (out_dir / "_solforge_binding.cpp").write_text(
            f"#include <torch/extension.h>\n{decl};\n"
            f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def(\"{fn}\", &{fn}); }}\n")
        files.append("_solforge_binding.cpp")
    opts = sol.spec.compile_options
    head, data = _header(sol, "cuda_cpp", d)
    name = "sf_" + hashlib.sha256("".join(s.content or "" for s in sol.sources).encode()
                                  ).hexdigest()[:12]
    return (head + "import os as _solforge_os\n\n"
            "import torch as _solforge_torch\n"
            "from torch.utils import cpp_extension as _solforge_ext\n\n"
            "from solforge.problems.formats import runtime as _solforge_rt\n\n"
            "_HERE = _solforge_os.path.dirname(_solforge_os.path.abspath(__file__))\n"
            f"_SOURCES = {files!r}\n"
            f"_ext = _solforge_ext.load(name={name!r}, sources=[_solforge_os.path.join(_HERE, "
            f"s) for s in _SOURCES], extra_cflags={opts.cflags!r}, "
            f"extra_cuda_cflags={opts.cuda_cflags!r}, extra_ldflags={opts.ld_flags!r}, "
            "extra_include_paths=[_HERE])\n"
            f"_DEFINITION = _solforge_rt.definition({data!r})\n\n\n"
            "class ModelNew(_solforge_torch.nn.Module):\n"
            f'    """Calls {sol.spec.entry_point} through its torch binding."""\n\n'
            "    def forward(self, *inputs):\n"
            + _call(sol, f"_ext.{fn}"))


def _declaration(src: str, fn: str) -> str | None:
    m = re.search(r"^([A-Za-z_][\w:<>,\s\*&]*?)\b" + re.escape(fn) + r"\s*\(([^)]*)\)\s*\{",
                  src, re.M)
    return f"{m.group(1).strip()} {fn}({m.group(2).strip()})" if m else None


def _refused(sol: SolutionJson, langs: list[str], why: str) -> str:
    msg = (f"solution.json language {', '.join(langs)!s} with {why} is not one solforge runs"
           if why else
           f"solution.json language {', '.join(langs)!s} is not one solforge runs; it runs "
           f"{', '.join(RUNS)} (C++ and Python languages cannot be mixed either)")
    return (f'"""{sol.name}: refused ({msg})."""\n'
            f"raise ImportError({msg!r})\n")


def from_solforge(solution: Path, d: Definition | None, problem: str, language: str,
                  author: str = "solforge") -> dict[str, Any]:
    """A solforge solution file as a solution.json (return style, one source)."""
    src = Path(solution).read_text()
    entry = "solution.py"
    # the class is bound now and the entry has a name of its own: the file may already
    # define a ModelNew of a wrapper and a `run` it calls (a solution.json brought in)
    body = (src.rstrip() + "\n\n\n_SolforgeModel = ModelNew\n_solforge_model = None\n\n\n"
            "def solforge_run(*inputs):\n"
            '    """The entry point: ModelNew built once (no init inputs), then called."""\n'
            "    global _solforge_model\n"
            "    if _solforge_model is None:\n"
            "        _solforge_model = _SolforgeModel()\n"
            "    return _solforge_model(*inputs)\n")
    if language == "cuda_cpp":  # the C++ is built by the Python file itself
        language = "pytorch"
    deps = ["torch"] + (["triton"] if language == "triton" else [])
    return {"name": f"{problem}_solforge_{hashlib.sha256(src.encode()).hexdigest()[:8]}",
            "definition": d.name if d else problem, "author": author,
            "description": f"exported by solforge from {Path(solution).name}",
            # "languages" is SOL-ExecBench's key, "language" FlashInfer-Bench's (each
            # ignores the other's)
            "spec": {"languages": [language],
                     "language": "triton" if language == "triton" else "python",
                     "target_hardware": ["LOCAL"],
                     "entry_point": f"{entry}::solforge_run", "dependencies": deps,
                     "destination_passing_style": False},
            "sources": [{"path": entry, "content": body}]}


def name_of(solution: str) -> str | None:
    """The ``name`` of a solution.json given to ``bench --solution``, else None."""
    return read(Path(solution)).name if solution.endswith(".json") else None


def for_target(solution: str, problems: list[Any]) -> str:
    """``solution`` as ``bench --solution`` takes it: a solution.json becomes the solforge
    solution for the problem among ``problems`` whose definition it names (the only one
    when there is one); anything else is returned unchanged."""
    if not solution.endswith(".json"):
        return solution
    sol = read(Path(solution))
    named = [p for p in problems
             if sol.definition in (p.origin.get("definition"), p.name)]
    chosen = named or (problems if len(problems) == 1 else [])
    if not chosen:
        raise ProblemError(f"{solution}: it solves definition {sol.definition!r}, which is "
                           f"none of the target's problems "
                           f"({', '.join(p.name for p in problems[:10])}); bench it on that "
                           "definition's folder")
    from solforge.problems.loader import import_file

    d = getattr(import_file(chosen[0].path), "DEFINITION", None)
    if not isinstance(d, Definition):
        raise ProblemError(f"{solution}: problem {chosen[0].name} has no definition (it is "
                           "not a SOL-ExecBench or FlashInfer-Bench problem); a solution.json "
                           "needs one for its inputs and outputs")
    return str(to_solforge(Path(solution), d))
