"""Other benchmarks' files read without the evaluator: SOL-ExecBench definitions and
workloads (its shipped examples, ``tests/fixtures/sol_execbench``, unchanged), axes,
constraints, input sources, per-workload tolerances, solution.json wrappers, malformed
files, CUDA-Agent-Ops rows, KernelBench imports, and traces that flashinfer-bench's own
models validate.

Not covered here: evaluations (``test_bench_formats.py``) and GPU languages (the H200
script ``benchmarks/gpu/sol_execbench_examples.sh``).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from solforge.bench.measure.compare import compare
from solforge.cli.main import app
from solforge.problems import ProblemError, resolve_target
from solforge.problems.formats import solution_json
from solforge.problems.formats.importer import import_source
from solforge.problems.loader import import_file, load_problem
from solforge.problems.precision import PrecisionClass
from solforge.records.evaluation import EvaluationRecord, Status, WorkloadResult
from solforge.records.flashinfer import traces
from tests.conftest import FIXTURES

SOL = FIXTURES / "sol_execbench" / "examples"
HACKS = FIXTURES / "sol_execbench" / "reward_hacks"


def _problem(folder: Path):
    problems, broken = resolve_target(str(folder))
    assert broken == [] and len(problems) == 1
    return problems[0]


def test_the_shipped_examples_load_with_their_origin_and_tolerances():
    problems, broken = resolve_target(str(SOL))
    names = {p.name for p in problems}
    assert {"linear_backward", "rmsnorm_h4096", "gemm_n4096_k4096", "softmax_h4096",
            "black-forest-labs_FLUX.1-schnell_flux_rope_apply_rotation",
            "nvidia_Llama-3.3-Nemotron-70B-Select_rms_norm"} <= names
    # the same definition shipped twice (triton and cuda_cpp rmsnorm; cute_dsl and cutile)
    # is reported, not merged
    assert len(broken) == 2 and all("already that of" in why for _, why in broken)
    p = next(x for x in problems if x.name == "rmsnorm_h4096")
    assert p.origin["format"] == "sol-execbench" and p.origin["license"] == "Apache-2.0"
    assert p.origin["source_file"].endswith("definition.json") and p.source == "sol-execbench"
    assert len(p.workloads) == 14 and all(w.visible for w in p.workloads)
    w = p.workloads[0]
    assert w.params["uuid"] and w.params["axes"] == {"batch_size": 7}
    assert (w.precision.atol, w.precision.matched_ratio, w.precision.reject_nonfinite) == (
        1e-2, 0.99, True)


def test_custom_inputs_come_from_the_references_entry_point_and_run_returns_outputs():
    p = _problem(SOL / "pytorch" / "linear_backward")
    mod = import_file(p.path)
    torch.manual_seed(0)
    x = mod.get_inputs(**{"uuid": p.workloads[1].params["uuid"]})
    assert [tuple(t.shape) for t in x] == [(128, 128), (128, 256), (128, 256)]
    assert x[0].std() < 0.2  # generate_inputs scales by 1/sqrt(N): not a plain randn
    gi, gw = mod.Model()(*x)
    assert torch.allclose(gi, x[0] @ x[2])


def _folder(tmp_path: Path, definition: dict, workloads: list[dict],
            reference: str | None = None) -> Path:
    d = tmp_path / definition.get("name", "prob")
    d.mkdir(parents=True, exist_ok=True)
    (d / "definition.json").write_text(json.dumps(definition))
    (d / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in workloads))
    if reference is not None:
        (d / "reference.py").write_text(reference)
    return d


SCALE = {
    "name": "scale_rows", "op_type": "scale",
    "axes": {"B": {"type": "var"}, "H": {"type": "const", "value": 8},
             "N": {"type": "expr", "expression": "B * H"}, "G": {"type": "var"}},
    "constraints": ["N % G == 0"],
    "inputs": {"x": {"shape": ["N"], "dtype": "float32"},
               "rms_norm_weight": {"shape": ["H"], "dtype": "float32"},
               "idx": {"shape": ["B"], "dtype": "int64"},
               "alpha": {"shape": None, "dtype": "float32"},
               "blob": {"shape": ["B", "H"], "dtype": "float32"}},
    "outputs": {"y": {"shape": ["N"], "dtype": "float32"}},
    "custom_inputs_entrypoint": "make",
    "reference": "",
}
SCALE_REF = ("import torch\n\ndef make(axes, device):\n"
             "    return {'idx': torch.arange(axes['B'], device=device)}\n\n"
             "def run(x, rms_norm_weight, idx, alpha, blob):\n"
             "    return x * alpha + blob.reshape(-1) + idx.sum()\n")


def test_axes_expressions_constraints_scalars_custom_and_safetensors(tmp_path):
    from safetensors.torch import save_file

    d = _folder(tmp_path, SCALE, [], SCALE_REF)
    (d / "blob").mkdir()
    save_file({"b": torch.ones(3, 8)}, str(d / "blob" / "w.safetensors"))
    src = {"x": {"type": "random"}, "rms_norm_weight": {"type": "random"},
           "idx": {"type": "custom"}, "alpha": {"type": "scalar", "value": 2.0},
           "blob": {"type": "safetensors", "path": "blob/w.safetensors", "tensor_key": "b"}}
    (d / "workload.jsonl").write_text(json.dumps(
        {"uuid": "u1", "axes": {"B": 3, "G": 4}, "inputs": src,
         "tolerance": {"max_atol": 0.5, "max_error_cap": 0.75}}) + "\n")
    p = _problem(d)
    mod = import_file(p.path)
    x, w, idx, alpha, blob = mod.get_inputs(uuid="u1")
    assert x.shape == (24,) and alpha == 2.0 and torch.equal(idx, torch.arange(3))
    assert torch.equal(w, torch.ones(8)) and torch.equal(blob, torch.ones(3, 8))  # norm weight
    assert (p.workloads[0].precision.atol, p.workloads[0].precision.max_abs_cap) == (0.5, 0.75)
    # a constraint that does not hold, and a safetensors file that is not there
    (d / "workload.jsonl").write_text(json.dumps(
        {"uuid": "u2", "axes": {"B": 3, "G": 5}, "inputs": src}) + "\n")
    (_, why), = resolve_target(str(d))[1]
    assert "workload.jsonl:1: constraint 'N % G == 0' (constraints[0]) does not hold" in why
    (d / "workload.jsonl").write_text(json.dumps(
        {"uuid": "u3", "axes": {"B": 3, "G": 4},
         "inputs": {**src, "blob": {**src["blob"], "path": "blob/gone.safetensors"}}}) + "\n")
    (_, why), = resolve_target(str(d))[1]
    assert "workload.jsonl:1: input 'blob' reads safetensors file 'blob/gone.safetensors'" in why


@pytest.mark.parametrize("definition, workload, message", [
    ("{not json", None, "definition.json: not valid JSON"),
    ({**SCALE, "axes": {**SCALE["axes"], "H": {"type": "const"}}}, None,
     "field 'axes.H.const.value'"),
    ({**SCALE, "inputs": {"x": {"shape": ["Q"], "dtype": "float32"}}}, None,
     "field 'inputs.x.shape': axis 'Q' is not among the axes"),
    ({**SCALE, "inputs": {"x": {"shape": ["B"], "dtype": "float12"}}}, None,
     "field 'inputs.x.dtype'"),
    (SCALE, {"uuid": "a", "axes": {"G": 1}, "inputs": {}}, "no value for var axis B"),
    (SCALE, {"uuid": "a", "axes": {"B": 1, "G": 1}, "inputs": {"x": {"type": "magic"}}},
     "workload.jsonl:1: field 'inputs.x'"),
    ("bad reference", None, "reference.py:1: the reference is not valid Python"),
])
def test_malformed_files_name_the_file_the_field_and_the_fix(tmp_path, definition, workload,
                                                             message):
    d = _folder(tmp_path, SCALE, [workload or {"uuid": "a", "axes": {"B": 1, "G": 1}}],
                SCALE_REF if definition != "bad reference" else "def run(:\n")
    if definition == "bad reference":
        definition = SCALE
    (d / "definition.json").write_text(definition if isinstance(definition, str)
                                       else json.dumps(definition))
    problems, broken = resolve_target(str(d))
    assert problems == [] and len(broken) == 1 and message in broken[0][1], broken


def test_the_cli_reports_a_malformed_folder_without_a_traceback(tmp_path):
    """In process (typer's runner): an exception escaping the command would show here."""
    d = _folder(tmp_path, {**SCALE, "outputs": "y"}, [], SCALE_REF)
    r = CliRunner().invoke(app, ["problems", "list", str(d)], env={"COLUMNS": "300"})
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "field 'outputs'" in r.output and "definition.json" in r.output


def test_a_workloads_own_tolerance_caps_errors_and_may_allow_negative_infinity():
    pc = PrecisionClass(name="w", atol=0.1, rtol=0.0, matched_ratio=0.5, unit="fp32",
                        max_abs_cap=0.3, reject_nonfinite=True)
    ref = torch.zeros(4)
    assert compare(torch.tensor([0.0, 0.0, 0.2, 0.2]), ref, pc).ok  # half within, under cap
    capped = compare(torch.tensor([0.0, 0.0, 0.0, 0.5]), ref, pc)
    assert capped.status is Status.INCORRECT_NUMERICAL and "max_error_cap" in capped.message
    inf = torch.tensor([-math.inf, 0.0, 0.0, 0.0])
    assert not compare(inf, inf, pc).ok  # SOL-ExecBench rejects matching infinities...
    assert compare(inf, inf, pc.model_copy(update={"allow_negative_inf": True})).ok  # ...but -inf


def test_solution_json_wrappers_call_the_entry_point_in_both_styles(tmp_path):
    p = _problem(SOL / "pytorch" / "linear_backward")
    d = import_file(p.path).DEFINITION
    sol = json.loads((SOL / "pytorch" / "linear_backward" / "solution_python.json").read_text())
    x = import_file(p.path).get_inputs(uuid="linbwd-001")
    want = import_file(p.path).Model()(*x)
    # return style, source inline
    ret = solution_json.to_solforge(SOL / "pytorch" / "linear_backward" / "solution_python.json",
                                    d, tmp_path / "ret")
    # destination-passing style, source beside the JSON
    dps_dir = tmp_path / "src"
    dps_dir.mkdir()
    (dps_dir / "kernel.py").write_text("def run(grad_output, x, weight, gi, gw):\n"
                                       "    gi.copy_(grad_output @ weight)\n"
                                       "    gw.copy_(grad_output.mT @ x)\n")
    sol_dps = {**sol, "spec": {**sol["spec"], "destination_passing_style": True},
               "sources": [{"path": "kernel.py"}]}
    (dps_dir / "solution.json").write_text(json.dumps(sol_dps))
    dps = solution_json.to_solforge(dps_dir / "solution.json", d, tmp_path / "dps")
    # FlashInfer-Bench's form of the same: one "language", destination-passing by default
    fib_dir = tmp_path / "fib"
    fib_dir.mkdir()
    (fib_dir / "solution.json").write_text(json.dumps({
        "name": "lb_fib", "definition": "linear_backward", "author": "a",
        "spec": {"language": "python", "target_hardware": ["H200"],
                 "entry_point": "main.py::run"},
        "sources": [{"path": "main.py", "content": (dps_dir / "kernel.py").read_text()}]}))
    fib = solution_json.to_solforge(fib_dir / "solution.json", d, tmp_path / "fibout")
    for f in (ret, dps, fib):
        got = import_file(f).ModelNew()(*x)
        assert all(torch.allclose(a, b) for a, b in zip(got, want)), f
    # another language: a file that fails to import, naming it; and what to fix in a bad file
    refused = solution_json.to_solforge(SOL / "cutile" / "jamba_attn_proj" /
                                        "solution_cutile.json", d, tmp_path / "no")
    with pytest.raises(ImportError, match="language cutile is not one solforge runs"):
        import_file(refused)
    (dps_dir / "bad.json").write_text(json.dumps({**sol, "spec": {"languages": ["pytorch"],
                                                                  "entry_point": "kernel.py"}}))
    with pytest.raises(ProblemError, match=r"bad.json: field 'spec.entry_point'"):
        solution_json.read(dps_dir / "bad.json")


def test_traces_validate_with_flashinfer_benchs_own_models():
    fib = pytest.importorskip("flashinfer_bench.data")
    ok = WorkloadResult(name="w00", params={"uuid": "u", "axes": {"M": 4},
                                            "inputs": {"x": {"type": "custom"}}},
                        correct=True, max_abs_error=1e-3, max_rel_error=1e-2, trials=5,
                        time_ms=0.5, eager_ms=1.0)
    bad = WorkloadResult(name="w01", params={"tokens": 7}, correct=False,
                         status=Status.INCORRECT_NUMERICAL, max_abs_error=3.0)
    records = [
        EvaluationRecord(problem="p", solution="s", status=Status.INCORRECT_NUMERICAL,
                         device="cuda:0 NVIDIA H200", versions={"torch": "2.11"},
                         workloads=[ok, bad]),
        EvaluationRecord(problem="p", solution="s", status=Status.REWARD_HACK,
                         workloads=[WorkloadResult(name="w00", status=Status.REWARD_HACK)]),
        EvaluationRecord(problem="p", solution="s", status=Status.COMPILE_ERROR, message="x"),
    ]
    rows_ = [t for r in records for t in traces(r)]
    parsed = [fib.Trace.model_validate_json(json.dumps(t)) for t in rows_]
    assert [t.evaluation.status.value for t in parsed] == [
        "PASSED", "INCORRECT_NUMERICAL", "RUNTIME_ERROR", "COMPILE_ERROR"]
    assert parsed[0].evaluation.performance.speedup_factor == 2.0
    assert parsed[1].workload.axes == {"tokens": 7} and parsed[1].evaluation.performance is None
    assert parsed[2].evaluation.log.startswith("solforge status REWARD_HACK")
    sj = solution_json.from_solforge(FIXTURES / "solutions" / "tiny_good_pytorch.py", None,
                                     "tiny_linear", "pytorch")
    assert fib.Solution.model_validate(sj).spec.entry_point == "solution.py::solforge_run"


CODE = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def __init__(self, alpha):\n        super().__init__()\n"
        "        self.alpha = alpha\n\n    def forward(self, a, b):\n"
        "        return torch.relu(a) * self.alpha + b\n\n\n"
        "def get_inputs():\n    return [torch.randn(4, 64), torch.randn(4, 64)]\n\n\n"
        "def get_init_inputs():\n    return [2.0]\n")


def agent_ops_rows(path: Path) -> Path:
    lines = [{"ops": ["relu", "mul", "add"], "data_source": "torch", "code": CODE},
             {"ops": ["relu", "mul", "add"], "data_source": "torch",
              "code": CODE.replace("super().__init__()", "super().__init__()  # same")},
             {"ops": ["tanh"], "data_source": "transformers",
              "code": CODE.replace("torch.relu", "torch.tanh")},
             {"ops": ["broken"], "data_source": "torch", "code": "x = 1\n"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_agent_ops_rows_and_kernelbench_become_problem_sets_with_duplicates_reported(tmp_path):
    src = agent_ops_rows(tmp_path / "ops.jsonl")
    problems, broken = resolve_target(str(src))
    assert [p.name for p in problems] == ["cao_00001_relu_mul_add", "cao_00003_tanh"]
    assert problems[1].origin["data_source"] == "transformers"
    assert problems[1].origin["license"] == "CC-BY-4.0"
    assert any(":2: the same code as" in why and ":1" in why for _, why in broken)
    assert any(":4: field 'code'" in why for _, why in broken)
    kb = tmp_path / "KernelBench" / "level1"
    shutil.copytree(FIXTURES / "kernelbench" / "KernelBench" / "level1", kb)
    shutil.copy(kb / "19_ReLU.py", kb / "99_ReLU_again.py")
    done = import_source(tmp_path / "KernelBench", tmp_path / "kb_out")
    assert [f.name for f in done.files] == ["kb_l1_19_ReLU.py",
                                            "kb_l1_51_Argmax_over_a_dimension.py"]
    assert done.duplicates and done.duplicates[0][0].endswith("99_ReLU_again.py")
    p = load_problem(done.files[0])
    assert (p.name, p.category, p.origin["license"]) == ("kb_l1_19_ReLU", "L1", "MIT")


def test_import_writes_plain_problem_files_that_load_again(tmp_path):
    r = CliRunner().invoke(app, ["import", str(SOL / "pytorch"), "--out",
                                 str(tmp_path / "out"), "--holdout", "0.34"])
    assert r.exit_code == 0, r.output
    assert "wrote 2 problem file(s)" in r.stdout
    p = load_problem(tmp_path / "out" / "linear_backward.py")
    assert [w.visible for w in p.workloads].count(False) == 1  # a seeded third held out
    assert p.source == "sol-execbench" and "def run(" in p.path.read_text()


def test_a_flashinfer_bench_dataset_is_read_by_the_same_adapter(tmp_path):
    """A TraceSet layout: definitions/<op>/<name>.json, workloads/<op>/<name>.jsonl of
    workload traces (flashinfer-bench's own models check both files first)."""
    definition = {"name": "gemm_n8_k16", "op_type": "gemm", "tags": ["status:verified"],
                  "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 8},
                           "K": {"type": "const", "value": 16}},
                  "inputs": {"A": {"shape": ["M", "K"], "dtype": "float32"},
                             "B": {"shape": ["N", "K"], "dtype": "float32"}},
                  "outputs": {"C": {"shape": ["M", "N"], "dtype": "float32"}},
                  "reference": "import torch\n\ndef run(A, B):\n    return A @ B.T\n"}
    traces_ = [{"definition": "gemm_n8_k16", "solution": None, "evaluation": None,
                "workload": {"uuid": f"u{m}", "axes": {"M": m},
                             "inputs": {"A": {"type": "random"}, "B": {"type": "random"}}}}
               for m in (4, 32)]
    traces_.append({**traces_[0], "definition": "another_definition"})
    try:
        fib = __import__("flashinfer_bench.data", fromlist=["Definition"])
        fib.Definition.model_validate(definition)
        for t in traces_:
            assert fib.Trace.model_validate(t).is_workload_trace()
    except ImportError:
        pass
    (tmp_path / "definitions" / "gemm").mkdir(parents=True)
    (tmp_path / "workloads" / "gemm").mkdir(parents=True)
    (tmp_path / "definitions" / "gemm" / "gemm_n8_k16.json").write_text(json.dumps(definition))
    (tmp_path / "workloads" / "gemm" / "gemm_n8_k16.jsonl").write_text(
        "".join(json.dumps(t) + "\n" for t in traces_))
    p = _problem(tmp_path)
    assert (p.name, p.source, p.origin["format"]) == ("gemm_n8_k16", "flashinfer-bench",
                                                      "flashinfer-bench")
    assert [w.params["uuid"] for w in p.workloads] == ["u4", "u32"]
    mod = import_file(p.path)
    a, b = mod.get_inputs(uuid="u32")
    assert torch.equal(mod.Model()(a, b), a @ b.T) and a.shape == (32, 16)


def test_problem_files_beside_definition_folders_load_too(tmp_path):
    shutil.copytree(SOL / "pytorch" / "linear_backward", tmp_path / "sol" / "linear_backward")
    shutil.copy(FIXTURES / "problems" / "tiny_linear.py", tmp_path / "tiny_linear.py")
    problems, broken = resolve_target(str(tmp_path))
    assert sorted(p.name for p in problems) == ["linear_backward", "tiny_linear"], broken
    assert broken == []  # reference.py and kernel.py are not problem files
