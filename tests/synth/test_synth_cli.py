"""`solforge synth` run as a user runs it (a subprocess, real files): the same seed writes
the same bytes, the files load and the jsonl reads back through the CUDA-Agent-Ops reader,
the search agent optimizes a synthesized batch, and an LLM on loopback writes a problem
that goes through the same filters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from solforge.problems.formats.rows import agent_ops
from solforge.problems.loader import import_file, load_problem
from solforge.problems.spec import call_with_params
from solforge.synth.write import JSONL, REPORT
from tests.agents.loopback import Reply, Request, ScriptedServer


def sf(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "solforge.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def cli(args: list[str]):
    from typer.testing import CliRunner

    from solforge.cli.main import app

    return CliRunner().invoke(app, args)


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def _output(path: Path, params: dict) -> torch.Tensor:
    m = import_file(path)
    torch.manual_seed(0)
    model = m.Model(*call_with_params(m.get_init_inputs, params)).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        return model(*call_with_params(m.get_inputs, params))


def test_same_seed_same_bytes_files_load_and_rows_round_trip(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    common = ["--n", "8", "--no-compile-check"]
    r = sf("synth", *common, "--seed", "3", "--out", str(a))   # another process than b's
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok" in r.stdout and "wrote 8 problem file(s)" in r.stdout
    for out, seed in ((b, "3"), (c, "4")):
        r = cli(["synth", *common, "--seed", seed, "--out", str(out)])
        assert r.exit_code == 0, r.output
    fa = _files(a)
    assert len([n for n in fa if n.endswith(".py")]) == 8 and {JSONL, REPORT} <= set(fa)
    assert fa == _files(b)                        # byte for byte, jsonl and report included
    assert set(_files(c)) != set(fa)              # another seed, other problems
    report = json.loads(fa[REPORT])
    assert report["accepted"] == 8 and report["counts"]["ok"] == 8 and report["seed"] == 3

    listed = json.loads(cli(["problems", "list", str(a), "--json"]).stdout)
    assert len(listed) == 8 and {p["category"] for p in listed} == {"synth"}
    for p in listed:
        assert p["family"] == "synthetic" and p["shapes_from"] == "synth seed 3"
        w = {x["name"]: x for x in p["workloads"]}
        assert w["cpu_small"]["cpu"] and not w["cpu_odd"]["visible"]
        assert not w["gpu_large"]["visible"] and not w["gpu_medium"]["cpu"]

    rows = [json.loads(line) for line in fa[JSONL].decode().splitlines()]
    assert [set(r) for r in rows] == [{"ops", "data_source", "code"}] * 8
    done = agent_ops(a / JSONL, tmp_path / "rows")   # our own reader of those rows
    assert len(done.files) == 8 and not done.broken and not done.duplicates
    ours = sorted(a.glob("synth_*.py"))
    for row, mine, theirs in zip(rows, ours, done.files):
        assert mine.read_text().startswith(row["code"].rstrip())
        assert theirs.read_text().startswith(row["code"].rstrip())
        assert load_problem(theirs).origin["ops"] == ", ".join(row["ops"])
        params = load_problem(mine).workload("cpu_small").params
        assert torch.equal(_output(mine, params), _output(theirs, params))

    r = cli(["synth", *common, "--out", str(a)])
    assert r.exit_code == 2 and "--overwrite" in r.output
    r = cli(["synth", "--n", "1", "--out", str(tmp_path / "x"), "--ops", "relu,nope"])
    assert r.exit_code == 2 and "unknown synth op 'nope'" in r.output


def test_the_search_agent_optimizes_a_synthesized_batch(tmp_path):
    out = tmp_path / "batch"
    r = cli(["synth", "--n", "1", "--seed", "0", "--out", str(out)])   # compile check on
    assert r.exit_code == 0, r.output
    opt = sf("optimize", str(out), "--device", "cpu", "--run-dir", str(tmp_path / "run"),
             "--families", "reference", "--max-candidates", "1", "--max-units", "1",
             "--baselines", "eager", "--timeout", "120", "--explore-max-calls", "10",
             "--budget-ms", "20")
    assert opt.returncode == 0, opt.stdout + opt.stderr
    assert "1/1 passed" in opt.stdout, opt.stdout


LLM_CODE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int = 1024):
        super().__init__()
        self.proj = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        return torch.nn.functional.silu(self.norm(self.proj(x))).cumsum(dim=-1)


def get_inputs(rows: int = 512, hidden: int = 1024):
    return [torch.randn(rows, hidden)]


def get_init_inputs(hidden: int = 1024):
    return [hidden]


SHAPES = {
    "cpu_small": {"rows": 4, "hidden": 32},
    "cpu_odd": {"rows": 3, "hidden": 40},
    "gpu_medium": {"rows": 512, "hidden": 1024},
    "gpu_large": {"rows": 4096, "hidden": 4096},
}
'''


def test_llm_composition_on_loopback_goes_through_the_filters(tmp_path):
    asked: list[str] = []

    def good(req: Request) -> Reply:
        asked.append(req.user_texts()[-1])
        assert req.body["tools"][0]["function"]["name"] == "submit_problem"
        return Reply(calls=[("submit_problem", {"code": LLM_CODE})])

    script = [Reply(text="I would rather not."), good]
    out = tmp_path / "llm"
    with ScriptedServer(script) as s:
        r = cli(["synth", "--n", "2", "--seed", "1", "--out", str(out), "--no-compile-check",
                 "--llm", "gpt-test", "--base-url", s.base_url, "--api", "openai",
                 "--api-key", "k", "--llm-n", "1"])
    assert r.exit_code == 0, r.output
    assert not s.errors and not s.exhausted and len(s.requests) == 2
    assert asked and "fuses these operators" in asked[0]
    report = json.loads((out / REPORT).read_text())
    assert report["counts"]["llm_unusable"] == 1 and report["llm_requests"] == 2
    (llm_file,) = out.glob("synth_s1_*_llm_*.py")
    p = load_problem(llm_file)
    assert "SHAPES" not in llm_file.read_text()
    assert p.workload("cpu_odd").params == {"rows": 3, "hidden": 40}
    assert len(list(out.glob("synth_s1_*.py"))) == 2   # the catalogue made the other
    rows = [json.loads(x) for x in (out / JSONL).read_text().splitlines()]
    assert rows[0]["data_source"] == "solforge-synth:llm"
