"""`solforge rl dataset`: trainer rows for a corpus (no evaluation: --measure is off)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from solforge.cli.main import app
from solforge.rl.task import Task, kernel_languages
from tests.conftest import PROBLEMS


def test_dataset_rows_follow_the_trainers_conventions(tmp_path):
    out = tmp_path / "prompts.jsonl"
    target = f"{PROBLEMS / 'tiny_linear.py'},{PROBLEMS / 'tiny_softmax.py'}"
    res = CliRunner().invoke(app, ["rl", "dataset", target, "-o", str(out), "--device", "cpu",
                                   "--language", "triton"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["extra_info"]["problem"] for r in rows] == ["tiny_linear", "tiny_softmax"]
    for r in rows:
        assert r["data_source"] == "solforge" and r["reward_model"]["style"] == "rule"
        task = Task.parse(r["reward_model"]["ground_truth"])
        assert task == Task.parse(r["label"]) and task.accepted() == ["triton"]
        (msg,) = r["prompt"]
        assert msg["role"] == "user" and "# solforge protocol" in msg["content"]
        assert "```python block defining `ModelNew`" in msg["content"]
    assert '"held"' not in rows[0]["prompt"][0]["content"]  # held-out workloads stay out
    bad = CliRunner().invoke(app, ["rl", "dataset", "no_such_problem", "-o", str(out)])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    default = CliRunner().invoke(app, ["rl", "dataset", str(PROBLEMS / "tiny_linear.py"),
                                       "-o", str(out)])
    assert default.exit_code == 0
    assert json.loads(out.read_text())["extra_info"]["languages"] == kernel_languages()
