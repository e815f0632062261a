"""KernelBench as a suite: a checkout, its KernelBench/ folder, a level folder, a level file
and DIR:N-M are targets; the level is the category and part of the name; files that fail to
load are reported and the rest load.

The checkout is ``tests/fixtures/kernelbench`` (seven real KernelBench files, unchanged, see
its README); checkouts with scripts, broken or extra files are copies of it in tmp_path.
Not covered here: level 4 with ``transformers`` installed (its files download model configs
when imported) and evaluating KernelBench-size problems, which need a GPU, bar one small
level-3 model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from solforge.problems import ProblemError, load_problem, resolve_target
from solforge.problems.loader import kernelbench_levels, problem_files
from tests.conftest import FIXTURES, PROBLEMS

KB = FIXTURES / "kernelbench"
LEVEL1 = KB / "KernelBench" / "level1"
NAMES = ["kb_l1_19_ReLU", "kb_l1_51_Argmax_over_a_dimension", "kb_l2_1_Conv2D_ReLU_BiasAdd",
         "kb_l3_1_MLP", "kb_l3_31_VisionAttention", "kb_l3_32_ConvolutionalVisionTransformer",
         "kb_l3_43_MinGPTCausalAttention"]


def _checkout(tmp_path: Path) -> Path:
    """A copy of the fixture checkout with what a real one has beside its problems."""
    root = tmp_path / "KernelBench-main"
    shutil.copytree(KB, root)
    for extra in ("scripts/generate_baseline_time.py", "src/kernelbench/eval.py",
                  "results/timing/parse.py", "setup.py"):
        (root / extra).parent.mkdir(parents=True, exist_ok=True)
        (root / extra).write_text("raise SystemExit('not a problem: never imported')\n")
    return root


@pytest.mark.parametrize("target, names", [
    (KB, NAMES),
    (KB / "KernelBench", NAMES),
    (LEVEL1, NAMES[:2]),
    (KB / "KernelBench" / "level3", NAMES[3:]),
    (LEVEL1 / "19_ReLU.py", NAMES[:1]),
])
def test_a_checkout_its_folders_and_files_are_targets(target, names):
    problems, broken = resolve_target(str(target))
    assert [p.name for p in problems] == names and broken == []
    for p in problems:
        assert p.category == f"L{p.name[4]}" and p.source == "kernelbench"
        assert p.kernelbench_plain and [w.name for w in p.workloads] == ["default"]


def test_the_level_names_and_categorises_a_file_wherever_it_is_loaded():
    # the evaluator's worker loads the problem again by its path: the same name comes back
    p = load_problem(KB / "KernelBench" / "level2" / "1_Conv2D_ReLU_BiasAdd.py")
    assert (p.name, p.category, p.precision.name) == ("kb_l2_1_Conv2D_ReLU_BiasAdd", "L2",
                                                      "fp32")
    kb_like = load_problem(PROBLEMS / "kb_relu.py")  # a plain file outside a level folder
    assert (kb_like.name, kb_like.category, kb_like.source) == ("kb_relu", "kernelbench",
                                                                "kernelbench")


def test_stems_repeated_across_levels_stay_apart(tmp_path):
    root = _checkout(tmp_path)
    shutil.copy(LEVEL1 / "19_ReLU.py", root / "KernelBench" / "level2" / "19_ReLU.py")
    problems, broken = resolve_target(str(root))
    names = [p.name for p in problems]
    assert "kb_l1_19_ReLU" in names and "kb_l2_19_ReLU" in names
    assert len(set(names)) == len(names) == 8 and broken == []


def test_a_checkout_root_takes_only_its_level_folders(tmp_path):
    root = _checkout(tmp_path)
    (root / "KernelBench" / "changelog").mkdir()
    (root / "KernelBench" / "changelog" / "v0.1").write_text("notes\n")
    files = problem_files(root)
    assert [f.parent.name for f in files] == ["level1"] * 2 + ["level2"] + ["level3"] * 4
    problems, broken = resolve_target(str(root))
    assert [p.name for p in problems] == NAMES and broken == []
    # a folder without level folders is read as before: every *.py under it
    assert kernelbench_levels(root / "scripts") == []
    assert problem_files(root / "src") == [root / "src" / "kernelbench" / "eval.py"]


def test_level_files_are_in_number_order_and_ranges_select_them(tmp_path):
    root = _checkout(tmp_path)
    level1 = root / "KernelBench" / "level1"
    for stem in ("2_Twice", "10_Ten", "100_Hundred"):
        shutil.copy(level1 / "19_ReLU.py", level1 / f"{stem}.py")
    names = [p.name for p in resolve_target(str(level1))[0]]
    assert names == ["kb_l1_2_Twice", "kb_l1_10_Ten", "kb_l1_19_ReLU",
                     "kb_l1_51_Argmax_over_a_dimension", "kb_l1_100_Hundred"]
    got = [p.name for p in resolve_target(f"{level1}:10-51")[0]]
    assert got == ["kb_l1_10_Ten", "kb_l1_19_ReLU", "kb_l1_51_Argmax_over_a_dimension"]
    assert [p.name for p in resolve_target(f"{level1}:2")[0]] == ["kb_l1_2_Twice"]
    # on a checkout a number is taken in every level; a comma list joins spans
    assert [p.name for p in resolve_target(f"{root}:1")[0]] == ["kb_l2_1_Conv2D_ReLU_BiasAdd",
                                                                "kb_l3_1_MLP"]
    got = [p.name for p in resolve_target(f"{level1}:100,{level1}:2-2")[0]]
    assert got == ["kb_l1_100_Hundred", "kb_l1_2_Twice"]


@pytest.mark.parametrize("suffix, message", [
    (":200", "no problem file numbered 200; its files are numbered 19 to 51"),
    (":51-19", "an empty range; write N-M with N <= M"),
])
def test_a_range_that_selects_nothing_says_why(suffix, message):
    with pytest.raises(ProblemError, match=message):
        resolve_target(f"{LEVEL1}{suffix}")


def test_paths_that_do_not_exist_are_named_as_paths():
    with pytest.raises(ProblemError, match="no such problem file or directory"):
        resolve_target(str(LEVEL1 / "18_Missing.py"))
    with pytest.raises(ProblemError, match="'L1' is not a directory"):
        resolve_target("L1:1-3")


def _with_broken(tmp_path: Path) -> Path:
    root = _checkout(tmp_path)
    # level 4 without `transformers` installed fails like this, and a typo like that
    (root / "KernelBench" / "level4").mkdir()
    (root / "KernelBench" / "level4" / "7_gpt2_bs32_seq256.py").write_text(
        "import torch\nfrom transformers_not_installed import AutoConfig\n")
    (root / "KernelBench" / "level1" / "20_LeakyReLU.py").write_text(
        "import torch\ndef get_inputs(:\n")
    return root


def test_a_broken_file_is_reported_and_the_others_load(tmp_path):
    root = _with_broken(tmp_path)
    problems, broken = resolve_target(str(root))
    assert [p.name for p in problems] == NAMES
    errors = {path.name: error for path, error in broken}
    assert set(errors) == {"20_LeakyReLU.py", "7_gpt2_bs32_seq256.py"}
    assert "SyntaxError" in errors["20_LeakyReLU.py"]
    assert "ModuleNotFoundError" in errors["7_gpt2_bs32_seq256.py"]
    assert "needs the package 'transformers_not_installed'" in errors["7_gpt2_bs32_seq256.py"]
    assert all(error.startswith(str(path)) for path, error in broken)  # says which file


def test_a_missing_package_is_named_with_what_to_install(tmp_path, monkeypatch):
    """KernelBench's Mamba-2 files (level 3, 48 and 49) import einops, which solforge does
    not depend on: the error names it and the command that installs it."""
    monkeypatch.setitem(sys.modules, "einops", None)  # missing, installed here or not
    path = tmp_path / "level3" / "48_Mamba2ReturnY.py"
    path.parent.mkdir()
    path.write_text("import torch\nfrom einops import rearrange\n")
    with pytest.raises(ProblemError) as e:
        load_problem(path)
    assert str(e.value).startswith(str(path))
    assert "needs the package 'einops'" in str(e.value)
    assert "`pip install einops`" in str(e.value)


def test_a_second_file_with_a_taken_name_is_reported(tmp_path):
    d = tmp_path / "mine"
    (d / "a").mkdir(parents=True)
    (d / "b").mkdir()
    shutil.copy(PROBLEMS / "kb_relu.py", d / "a" / "relu.py")
    shutil.copy(PROBLEMS / "kb_relu.py", d / "b" / "relu.py")
    problems, broken = resolve_target(str(d))
    assert [p.path for p in problems] == [d / "a" / "relu.py"]
    assert len(broken) == 1 and "problem name 'relu' is already that of" in broken[0][1]


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="250")
    return subprocess.run([sys.executable, "-m", "solforge.cli.main", *args],
                          capture_output=True, text=True, timeout=300, env=env)


def test_problems_list_shows_a_checkout_and_what_failed(tmp_path):
    root = _with_broken(tmp_path)
    r = _cli("problems", "list", str(root))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "7 problems, 2 files failed to load" in r.stdout
    for name in NAMES:
        assert name in r.stdout
    assert "failed to load " + str(root / "KernelBench" / "level1" / "20_LeakyReLU.py") \
        in r.stdout
    r = _cli("problems", "list", f"{root}/KernelBench", "--category", "L3", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert [(p["name"], p["category"], p["source"]) for p in listed] == [
        ("kb_l3_1_MLP", "L3", "kernelbench"), ("kb_l3_31_VisionAttention", "L3", "kernelbench"),
        ("kb_l3_32_ConvolutionalVisionTransformer", "L3", "kernelbench"),
        ("kb_l3_43_MinGPTCausalAttention", "L3", "kernelbench")]
    assert r.stderr.count("failed to load ") == 2 and "ModuleNotFoundError" in r.stderr
    r = _cli("problems", "list", f"{root}:300")
    assert r.returncode == 2 and "no problem file numbered 300" in r.stdout


def test_optimize_reports_broken_files_and_runs_the_rest(tmp_path):
    only_broken = _with_broken(tmp_path) / "KernelBench" / "level4"
    run_dir = tmp_path / "run"
    r = _cli("optimize", str(only_broken), "--run-dir", str(run_dir))
    assert r.returncode == 2 and "no problem to optimize" in r.stdout, r.stdout + r.stderr
    assert not run_dir.exists()
    r = _cli("optimize", f"{PROBLEMS / 'tiny_linear.py'},{only_broken}", "--run-dir",
             str(run_dir), "--max-units", "1", "--max-candidates", "1", "--baselines",
             "eager", "--budget-ms", "20", "--explore-budget-ms", "20")
    assert "7_gpt2_bs32_seq256.py: importing the problem failed" in r.stdout, r.stdout
    assert "(skipped)" in r.stdout
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tiny_linear" in r.stdout and run_dir.is_dir()


def test_a_small_level3_model_is_evaluated_under_its_kernelbench_name():
    from solforge.bench.evaluator import Evaluator
    from solforge.records.options import EvalOptions
    from solforge.records.evaluation import Status
    from solforge.bench.judge.reference_solution import reference_solution

    (p,), _ = resolve_target(f"{KB}/KernelBench/level3:32")
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], timeout_s=120)) as ev:
        r = ev.evaluate(p, reference_solution(p), timing=False)
    assert r.status is Status.PASSED, r.message
    assert r.problem == "kb_l3_32_ConvolutionalVisionTransformer"
