"""The agent's smaller parts: the visible problem copy, context trimming, the trajectory
file, the prompts, the reports, the Nsight Compute parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solforge.agents import prompts
from solforge.agents.context import estimate_tokens, fit_context
from solforge.agents.model import Message, ToolCall
from solforge.agents.ncu import format_kernels, parse_ncu_csv
from solforge.agents.report import evaluation_report
from solforge.agents.trajectory import TRAJECTORY_SCHEMA, Trajectory, load, repair
from solforge.agents.visible import visible_source, write_visible_problem
from solforge.records.evaluation import EvaluationRecord, Status, WorkloadResult
from solforge.orchestrate.units import Usage
from solforge.problems import load_problem
from tests.agents.conftest import TINY
from tests.conftest import PROBLEMS

# -- the visible copy of a problem ---------------------------------------------------------
HEADER = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs(n: int = 4):
    return [torch.randn(n)]


def get_init_inputs():
    return []

'''


def test_held_out_workloads_are_cut_and_comments_stay(tmp_path):
    out = write_visible_problem(load_problem(TINY), tmp_path / "problem.py").read_text()
    assert '"held"' not in out and '"small"' in out and '"gpu_big"' in out
    assert '"flops": lambda p' in out  # the rest of SOLFORGE untouched
    original = TINY.read_text().splitlines()
    kept = out.splitlines()
    assert len(original) - len(kept) == 1  # exactly the held-out line went


def test_inline_lists_and_comments(tmp_path):
    f = tmp_path / "p.py"
    f.write_text(HEADER + 'SOLFORGE = {\n    "precision": "fp32",\n    # shapes from a model\n'
                 '    "workloads": [{"name": "a", "params": {"n": 4}},  # decode\n'
                 '                  {"name": "b", "params": {"n": 8}, "visible": False}],\n}\n')
    src = visible_source(load_problem(f))
    assert "# shapes from a model" in src and "# decode" in src
    assert '"b"' not in src
    f.write_text(HEADER + 'SOLFORGE = {"precision": "fp32", "workloads": [\n'
                 '    {"name": "x", "params": {"n": 3}, "visible": False},\n'
                 '    {"name": "y", "params": {"n": 5}},\n]}\n')
    write_visible_problem(load_problem(f), tmp_path / "out.py")
    assert '"x"' not in (tmp_path / "out.py").read_text()


def test_computed_workloads_are_rendered_from_the_problem(tmp_path):
    f = tmp_path / "p.py"
    f.write_text(HEADER + 'SIZES = [4, 8, 16]\nSOLFORGE = {"precision": "fp32", "workloads": '
                 '[{"name": f"n{n}", "params": {"n": n}, "visible": n < 16} for n in SIZES]}\n')
    out = write_visible_problem(load_problem(f), tmp_path / "out.py").read_text()
    assert "'n4'" in out and "'n8'" in out and "n16" not in out.split("SOLFORGE")[1]
    assert [w.name for w in load_problem(tmp_path / "out.py").workloads] == ["n4", "n8"]


def test_plain_kernelbench_file_is_copied_as_it_is(tmp_path):
    p = load_problem(PROBLEMS / "kb_relu.py")
    assert visible_source(p) == p.path.read_text()


# -- context -------------------------------------------------------------------------------
def _conversation(n: int, size: int) -> list[Message]:
    msgs = [Message(role="user", content="task")]
    for i in range(n):
        write = ToolCall(id=f"w{i}", name="write_file",
                         arguments=json.dumps({"path": "s.py", "content": "y" * size}))
        read = ToolCall(id=f"r{i}", name="read_file", arguments="{}")
        msgs += [Message(role="assistant", content=f"step {i}", tool_calls=[write, read]),
                 Message(role="tool", tool_call_id=f"w{i}", name="write_file", content="ok"),
                 Message(role="tool", tool_call_id=f"r{i}", name="read_file",
                         content=f"out{i} " + "x" * size)]
    return msgs


def test_fit_context_trims_oldest_output_first():
    msgs = _conversation(4, 4000)
    assert fit_context("", msgs, 10**6) == (msgs, 0)
    budget = estimate_tokens("", msgs) - 1500
    view, trimmed = fit_context("", msgs, budget, keep_recent=3)
    assert trimmed >= 1 and estimate_tokens("", view) <= budget
    assert "trimmed" in view[3].content  # the first read_file output went first
    assert view[-1].content.startswith("out3")  # the newest stays whole
    assert [m.content for m in msgs if m.role == "assistant"] == \
        [m.content for m in view if m.role == "assistant"]  # stated reasoning stays
    assert msgs[3].content.startswith("out0")  # the original is not modified


def test_fit_context_trims_old_file_text_then_gives_up():
    msgs = _conversation(3, 6000)
    small = estimate_tokens("", msgs[:1]) + 3500
    fitted = fit_context("", msgs, small, keep_recent=1)
    assert fitted is not None
    view, _ = fitted
    assert "already applied" in view[1].tool_calls[0].arguments
    assert fit_context("", msgs, 10, keep_recent=1) is None


# -- trajectory ----------------------------------------------------------------------------
def test_trajectory_round_trip_truncation_and_repair(tmp_path):
    path = tmp_path / "t.jsonl"
    t = Trajectory(path)
    t.start({"worker": "llm", "problem": "p"})
    call = ToolCall(id="c1", name="evaluate")
    t.step(0, [Message(role="user", content="task")], Usage(), Usage(), 0.1)
    t.step(1, [Message(role="assistant", content="go", tool_calls=[call])],
           Usage(input_tokens=5, output_tokens=1, calls=1),
           Usage(input_tokens=5, output_tokens=1, calls=1), 2.0)
    with path.open("a") as f:
        f.write('{"type": "step", "step": 2, "mess')  # a process died mid-write
    state = load(path)
    assert state.header["schema"] == TRAJECTORY_SCHEMA
    assert state.steps == 1 and state.usage.input_tokens == 5 and state.exit is None
    # the dangling evaluate call got an answer, so every API accepts the conversation
    assert state.messages[-1].role == "tool" and state.messages[-1].tool_call_id == "c1"
    assert "interrupted" in state.messages[-1].content
    t.exit("submitted", "done", {}, 1, state.usage, 2.0)
    assert load(path).exit["status"] == "submitted"
    path.write_text(json.dumps({"type": "header", "schema": "solforge.trajectory/99"}) + "\n")
    with pytest.raises(ValueError, match="solforge.trajectory/1"):
        load(path)


def test_repair_leaves_complete_conversations_alone():
    msgs = [Message(role="user", content="t"),
            Message(role="assistant", tool_calls=[ToolCall(id="a", name="grep")]),
            Message(role="tool", tool_call_id="a", content="x")]
    assert repair(msgs) == msgs


# -- prompts and reports -------------------------------------------------------------------
def test_prompts_are_packaged_and_replaceable(tmp_path):
    system = prompts.system_prompt()
    assert "# solforge protocol" in system and "# Role: optimizer" in system
    for role in prompts.ROLES:
        assert f"# Role: {role}" in prompts.role_text(role)
    mine = tmp_path / "MINE.md"
    mine.write_text("my protocol {with braces}")
    assert prompts.system_prompt(mine, "reviewer").startswith("my protocol {with braces}")
    with pytest.raises(FileNotFoundError, match="--protocol"):
        prompts.system_prompt(tmp_path / "none.md")
    with pytest.raises(ValueError, match="unknown role"):
        prompts.role_text("critic")
    task = prompts.task_message(load_problem(TINY), "cpu", ["triton"], "strict", {"steps": 5})
    assert "small" in task and "held" not in task.split("Held-out")[0]
    assert "Languages allowed: triton" in task and "Policy: strict" in task


def test_evaluation_report_is_compact_and_says_what_next():
    rec = EvaluationRecord(problem="p", solution="s.py", status=Status.INCORRECT_NUMERICAL,
                           message="workload small: max abs error 0.3 over tolerance",
                           held_out_included=False, workloads=[WorkloadResult(
                               name="small", correct=False, status=Status.INCORRECT_NUMERICAL,
                               max_abs_error=0.3)])
    text = evaluation_report(rec)
    assert text.startswith("evaluate: INCORRECT_NUMERICAL (pytorch, visible workloads")
    assert "max abs error 0.3" in text and "next: outputs differ" in text
    ok = EvaluationRecord(problem="p", solution="s.py", status=Status.PASSED, workloads=[
        WorkloadResult(name="big", correct=True, time_ms=2.0, eager_ms=1.0,
                       speedup_vs_eager=0.5, sol_score=0.2, bound="memory")]).finalize()
    assert "slower than eager on big" in evaluation_report(ok)


_COLS = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
         '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
         '"Metric Value"')


def _row(kid: str, kernel: str, metric: str, unit: str, value: str) -> str:
    fields = [kid, "123", "python3.11", "127.0.0.1", kernel, "1", "7", "(128, 1, 1)",
              "(1024, 1, 1)", "0", "9.0", "Command line profiler metrics", metric, unit, value]
    return ",".join(f'"{f}"' for f in fields)


# the layout `ncu --csv --print-units base --metrics ...` prints (one row per metric)
NCU_CSV = "\n".join([
    "==PROF== Connected to process 123 (/usr/bin/python3.11)",
    '==PROF== Profiling "triton_fused_kernel" - 0: 0%....50%....100% - 9 passes',
    _COLS,
    _row("0", "triton_fused_kernel", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
         "%", "71.52"),
    _row("0", "triton_fused_kernel", "gpu__time_duration.sum", "nsecond", "12,480"),
    _row("0", "triton_fused_kernel", "launch__registers_per_thread", "register/thread", "40"),
    _row("1", "gemv_kernel", "gpu__time_duration.sum", "nsecond", "3,200"),
    _row("1", "gemv_kernel", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "12.5"),
    "==PROF== Disconnected from process 123",
]) + "\n"


def test_ncu_csv_parser():
    kernels = parse_ncu_csv(NCU_CSV)
    assert [k.name for k in kernels] == ["triton_fused_kernel", "gemv_kernel"]
    assert kernels[0].values["time"] == pytest.approx(12.48)
    assert kernels[0].values["dram%"] == 71.52 and kernels[0].values["regs"] == 40
    assert kernels[1].values["sm%"] == 12.5
    text = format_kernels(kernels)
    assert text.splitlines()[1].lstrip().startswith("12.48 us")
    assert parse_ncu_csv("==ERROR== ncu failed") == []


def test_package_data_lists_the_prompts():
    root = Path(prompts.__file__).parent
    assert {p.name for p in root.glob("*.md")} == {"SKILL.md", "optimizer.md", "diagnoser.md",
                                                   "reviewer.md"}
