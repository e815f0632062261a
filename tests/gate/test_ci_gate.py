"""`solforge ci` on a CPU export: a baseline measured once, the unchanged export passes
against it, and an export where one kernel was made slower and another wrong fails on both,
with JUnit XML and a markdown summary saying why. Real evaluator runs, real CLI processes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import PROBLEMS

GOOD = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""
# the same answer, 64 times over: many times slower than any round-to-round scatter
SLOW = GOOD.replace("        return torch.relu(x)\n",
                    "        for _ in range(64):\n            y = torch.relu(x)\n        return y\n")
WRONG = GOOD.replace("torch.relu(x)", "torch.relu(x) + 0.01")


def _export(root: Path, kernels: dict[str, str]) -> Path:
    for sub in ("solutions", "records", "problems"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for name, source in kernels.items():
        (root / "solutions" / f"{name}.py").write_text(source)
        shutil.copyfile(PROBLEMS / "kb_relu.py", root / "problems" / f"{name}.py")
        (root / "records" / f"{name}.json").write_text(json.dumps(
            {"problem": name, "solution": f"solutions/{name}.py", "language": "pytorch",
             "status": "PASSED"}))
    return root


def _ci(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "solforge.cli.main", "ci", *map(str, args),
                           "--baselines", "eager", "--budget-ms", "40", "--timeout", "120"],
                          capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "COLUMNS": "250"})


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[Path, Path, dict]:
    """kb_relu's export, its baseline as `--update-baseline` wrote it, and that file's
    content. Measured in the setup of the first test that asks: the ``alone`` one below,
    so no other worker's load is in the rounds."""
    tmp = tmp_path_factory.mktemp("ci")
    export = _export(tmp / "export", {"kb_relu": GOOD})
    base = tmp / "ci" / "baseline.json"
    r = _ci(export, "--baseline", base, "--update-baseline", "--junit", tmp / "0.xml",
            "--summary", tmp / "0.md")
    assert r.returncode == 0, r.stdout + r.stderr
    return export, base, json.loads(base.read_text())


# unchanged must stay within the rounds' measured spread: no other worker's load meanwhile
@pytest.mark.alone
def test_ci_passes_unchanged_against_its_baseline(tmp_path, measured):
    export, base, saved = measured
    assert saved["schema"] == "solforge.ci-baseline/1" and saved["rounds"] == 5
    entry = saved["problems"]["kb_relu"]
    assert len(entry["rounds"]) == 5 and entry["ratio"] > 0 and entry["spread"] is not None

    r = _ci(export, "--baseline", base, "--junit", tmp_path / "1.xml", "--summary",
            tmp_path / "1.md")
    assert r.returncode == 0, r.stdout + r.stderr
    suite = ET.parse(tmp_path / "1.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("1", "0")
    assert "solforge ci: passed (1/1" in (tmp_path / "1.md").read_text()


# a kernel 64 times slower and a wrong one fail whatever the other worker's load: not alone
def test_ci_fails_slower_or_wrong_and_needs_a_baseline(tmp_path, measured):
    export, base, saved = measured
    r = _ci(export, "--baseline", tmp_path / "none.json")
    said = " ".join(r.stdout.split())
    assert r.returncode == 2 and "no baseline file" in said and "--update-baseline" in said, \
        r.stdout + r.stderr

    changed = _export(tmp_path / "changed", {"kb_relu": SLOW, "kb_relu_wrong": WRONG})
    r = _ci(changed, "--baseline", base, "--junit", tmp_path / "2.xml", "--summary",
            tmp_path / "2.md")
    assert r.returncode == 1, r.stdout + r.stderr
    suite = ET.parse(tmp_path / "2.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("2", "2")
    kinds = {c.get("name"): c.find("failure").get("type") for c in suite.iter("testcase")}
    assert kinds == {"kb_relu": "slowdown", "kb_relu_wrong": "correctness"}
    md = (tmp_path / "2.md").read_text()
    assert "FAILED (0/2" in md and "beyond the measured noise" in md
    assert "INCORRECT_NUMERICAL" in md
    # the baseline is not touched without --update-baseline
    assert json.loads(base.read_text()) == saved


def _record(rounds: list[float], status: str = "PASSED", calls: float | None = None):
    from solforge.records import EvaluationRecord

    return EvaluationRecord(problem="p", solution="s", status=status, workloads=[
        {"name": "w", "time_ms": sorted(rounds)[len(rounds) // 2], "eager_ms": 1.0,
         "round_ms": rounds, "round_baseline_ms": {"eager": [1.0] * len(rounds)},
         "time_spread": calls}])


def test_the_threshold_is_the_measured_spread_not_a_fixed_percentage():
    from solforge.gate.baseline import CiBaseline, figures_of
    from solforge.gate.check import compare
    from solforge.gate.kept import Kept
    from solforge.problems.loader import load_problem

    kept = Kept("p", GOOD, "pytorch", load_problem(PROBLEMS / "kb_relu.py"))
    tight = figures_of(_record([1.00, 1.01, 0.99]), kept.sha256)
    loose = figures_of(_record([1.0, 1.3, 0.8]), kept.sha256)
    assert abs(tight.spread - 0.02) < 1e-9 and abs(loose.spread - 0.5) < 1e-9
    ten_percent_slower = _record([1.10, 1.11, 1.09])
    # quiet rounds: 10% is far beyond 2% + 1.8%
    out = compare(kept, ten_percent_slower, CiBaseline(problems={"p": tight}))
    assert not out.passed and abs(out.slowdown - 0.10) < 1e-9
    assert abs(out.noise - (0.02 + 0.02 / 1.10)) < 1e-9  # each spread relative to its median
    # the same 10% against a baseline measured with 50% scatter is within the noise
    assert compare(kept, ten_percent_slower, CiBaseline(problems={"p": loose})).passed
    # wrong fails whatever the timing; no baseline entry passes and says so
    assert not compare(kept, _record([1.0, 1.0], "INCORRECT_NUMERICAL"), None).passed
    assert "no baseline entry" in compare(kept, ten_percent_slower, CiBaseline()).reason
    # rounds that landed close together by chance: the calls' own spread is the floor
    lucky = figures_of(_record([1.00, 1.01, 0.99], calls=0.3), kept.sha256)
    assert lucky.round_spread == tight.spread and lucky.spread == 0.3
    assert compare(kept, ten_percent_slower, CiBaseline(problems={"p": lucky})).passed
