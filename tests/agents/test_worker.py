"""The LLM worker end to end: scripted models on loopback drive real SDK clients, the real
tools and a real CPU evaluator; the run directory is read back the way `runs show` does."""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path

import pytest
from rich.console import Console

from solforge.agents.clients import make_client
from solforge.agents.loop import AgentConfig
from solforge.agents.optimize import optimize_llm
from solforge.agents.worker import WorkerConfig, run_llm_worker
from solforge.cli.optimize_llm import run_llm_optimize
from solforge.orchestrate.run import Run, RunSpec
from solforge.problems import load_problem
from tests.agents.conftest import (
    GOOD,
    TINY,
    WRONG,
    evaluate,
    fast_options,
    model_config,
    read_problem,
    submit,
    workspace_of,
    write_good,
)
from tests.agents.loopback import HttpError, Reply, Request, ScriptedServer

FAST_MODEL = {"backoff_s": 0.01, "backoff_max_s": 0.05, "max_retries": 2}
# a worker's evaluations come back to back (visible, then the full verdict): the next
# runner starts during the current evaluation
pytestmark = pytest.mark.usefixtures("two_spares")


def cli(targets: list[str], **flags) -> tuple[int, str]:
    buf = io.StringIO()
    code = run_llm_optimize(targets, console=Console(file=buf, width=250), **flags)
    return code, buf.getvalue()


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def check_clean(server: ScriptedServer) -> None:
    assert not server.errors, server.errors
    assert not server.exhausted and server.remaining == 0


# -- the happy paths ----------------------------------------------------------------------------
def test_openai_endpoint_read_write_evaluate_submit(tmp_path):
    run_dir = tmp_path / "run"
    with ScriptedServer([read_problem(), write_good, evaluate(), submit]) as s:
        code, out = cli([str(TINY)], model="gpt-test", base_url=s.base_url, api_key="k",
                        run_dir=run_dir, eval_options=fast_options(), price_in=1.0,
                        price_out=2.0, model_overrides=FAST_MODEL, max_steps=10)
    check_clean(s)
    assert code == 0, out
    assert "PASSED" in out and f"solforge runs show {run_dir}" in out

    # what the model was given
    first = s.requests[0]
    assert first.api == "openai" and "# solforge protocol" in first.system()
    assert [t["function"]["name"] for t in first.body["tools"]] == [
        "read_file", "write_file", "edit_file", "list_files", "grep", "run_command",
        "evaluate", "profile", "submit"]
    assert "Visible workloads: small" in first.user_texts()[0]
    assert '"held"' not in s.requests[1].last_tool_output()  # problem.py as the agent saw it
    assert "evaluate: PASSED" in s.requests[3].last_tool_output()

    # what the run says (the data behind `solforge runs show`)
    run = Run.open(run_dir)
    shown = run.show()
    assert shown["status"] == "finished" and shown["agent"] == "llm"
    (problem,) = shown["problems"]
    assert problem["name"] == "tiny_linear" and problem["state"] == "converged"
    assert problem["best"]["status"] == "PASSED" and problem["best"]["held_out_included"]
    assert shown["usage"] == {"input_tokens": 400, "output_tokens": 80,
                              "cost_usd": pytest.approx(400e-6 + 160e-6)}
    (attempt,) = run.ledger.attempts("tiny_linear")
    assert attempt["source"] == GOOD and attempt["agent"] == "llm:gpt-test"
    assert "Check it on the visible workloads." in attempt["reasoning"]
    # the winner is checked on fresh seeds before the run reports it (kind final)
    assert [(e["kind"], e["status"]) for e in run.ledger.evaluations("tiny_linear")] == [
        ("visible", "PASSED"), ("full", "PASSED"), ("final", "PASSED")]
    assert run.ledger.evaluations("tiny_linear", kind="final")[0]["record"]["workloads"][0][
        "trials"] >= 10
    full = run.ledger.evaluations("tiny_linear", kind="full")[0]
    assert Path(full["record"]["solution"]) == run.solution_path("tiny_linear", attempt["id"])
    finished = run.ledger.events("worker_finished")[0]["data"]
    assert finished["status"] == "submitted" and finished["verdict"] == "PASSED"
    (why,) = run.ledger.events("reasoning")  # the submit's summary, same source as before
    assert why["data"]["attempt"] == attempt["id"]
    assert why["data"]["reasoning"].startswith("addmm + gelu + scale")

    # the trajectory
    traj = lines(run.trajectory_path("llm", "tiny_linear"))
    assert traj[0]["type"] == "header" and traj[0]["schema"] == "solforge.trajectory/1"
    assert "api_key" not in json.dumps(traj[0]["model"])
    assert [x["type"] for x in traj].count("step") == 5  # the task, then four model turns
    assert traj[-1]["type"] == "exit" and traj[-1]["status"] == "submitted"
    assert "verdict: PASSED" in traj[-2]["messages"][-1]["content"]


def test_anthropic_endpoint_same_flow(tmp_path):
    with ScriptedServer([read_problem(), write_good, evaluate(), submit]) as s:
        out = optimize_llm([str(TINY)], model="claude-test", base_url=s.root_url,
                           api_key="k", run_dir=tmp_path / "run",
                           eval_options=fast_options(), model_overrides=FAST_MODEL)
    check_clean(s)
    assert all(r.path == "/v1/messages" for r in s.requests)
    last = s.requests[-1].body["messages"]
    assert last[-1]["content"][0]["type"] == "tool_result"
    (res,) = out.results
    assert (res.status, res.verdict, res.auto_submitted) == ("submitted", "PASSED", False)
    assert Run.open(out.run_dir).show()["problems"][0]["best"]["status"] == "PASSED"


# -- failure paths ------------------------------------------------------------------------------
def test_failing_candidate_is_diagnosed_and_fixed(tmp_path):
    def fix(req: Request) -> Reply:
        assert "evaluate: INCORRECT_NUMERICAL" in req.last_tool_output()
        return Reply("The scale is 1.5 in the reference, not 1.25.",
                     [("edit_file", {"old": "* 1.25", "new": "* 1.5"})])

    script = [read_problem(),
              Reply("First try.", [("write_file", {"path": "solution.py", "content": WRONG})]),
              evaluate(), fix, evaluate(), submit]
    with ScriptedServer(script) as s:
        out = optimize_llm([str(TINY)], client=make_client(model_config(s.base_url)),
                           run_dir=tmp_path / "run", eval_options=fast_options())
    check_clean(s)
    assert out.results[0].verdict == "PASSED"
    run = Run.open(out.run_dir)
    first, second = run.ledger.attempts("tiny_linear")
    assert second["parent"] == first["id"]
    assert "1.25" in first["source"] and second["source"] == GOOD
    assert [(e["attempt"], e["kind"], e["status"]) for e in run.ledger.evaluations()] == [
        (first["id"], "visible", "INCORRECT_NUMERICAL"), (second["id"], "visible", "PASSED"),
        (second["id"], "full", "PASSED"), (second["id"], "final", "PASSED")]


def test_malformed_calls_and_idle_turns_then_step_limit(tmp_path):
    def after_bad_json(req: Request) -> Reply:
        assert "not valid JSON" in req.last_tool_output()
        # the history sent back is valid JSON (servers' chat templates parse it)
        sent = req.body["messages"][2]["tool_calls"][0]["function"]["arguments"]
        assert json.loads(sent)["unparsable_arguments"].startswith('{"path"')
        return Reply("", [("read_file", {"paht": "problem.py"}),
                          ("does_not_exist", {})])

    def after_bad_names(req: Request) -> Reply:
        assert "unexpected: paht" in req.tool_outputs()[-2]
        assert "no tool named 'does_not_exist'" in req.last_tool_output()
        return Reply("Let me think about it without tools.")

    def after_idle(req: Request) -> Reply:
        assert "no tool call" in req.user_texts()[-1]
        return read_problem()

    script = [Reply("", [("write_file", '{"path": "solution.py", "content": "x')]),
              after_bad_json, after_bad_names, after_idle]
    with ScriptedServer(script) as s:
        code, out = cli([str(TINY)], model="gpt-test", base_url=s.base_url,
                        run_dir=tmp_path / "run", eval_options=fast_options(),
                        model_overrides=FAST_MODEL, max_steps=4)
    check_clean(s)
    assert code == 1 and "limits_exceeded" in out
    run = Run.open(tmp_path / "run")
    finished = run.ledger.events("worker_finished")[0]["data"]
    assert finished["status"] == "limits_exceeded" and "step limit" in finished["message"]
    assert finished["verdict"] is None and run.ledger.attempts() == []
    assert run.show()["problems"][0]["state"] == "exhausted"
    assert lines(run.trajectory_path("llm", "tiny_linear"))[-1]["status"] == "limits_exceeded"


def test_http_429_and_500_are_retried_and_logged(tmp_path):
    script = [HttpError(429, "rate limited", {"retry-after": "0"}), HttpError(500, "oops"),
              read_problem()]
    with ScriptedServer(script) as s:
        out = optimize_llm([str(TINY)], model="gpt-test", base_url=s.base_url,
                           run_dir=tmp_path / "run", eval_options=fast_options(),
                           model_overrides=FAST_MODEL, max_steps=1)
    check_clean(s)
    assert out.results[0].status == "limits_exceeded" and out.results[0].steps == 1
    run = Run.open(out.run_dir)
    retries = [e["data"] for e in run.ledger.events("model_retry")]
    assert ["HTTP 429" in retries[0]["reason"], "HTTP 500" in retries[1]["reason"]] == [True] * 2
    traj = lines(run.trajectory_path("llm", "tiny_linear"))
    # no price for "gpt-test": said once, and the cost limit is not enforced
    assert [x["kind"] for x in traj if x["type"] == "event"] == ["cost_unpriced", "retry",
                                                                 "retry"]
    assert run.ledger.usage_totals()["cost_usd"] == 0.0


def test_dead_endpoint_stops_the_run_with_one_line(tmp_path):
    with ScriptedServer([HttpError(500, "upstream down")] * 3) as s:
        code, out = cli([str(TINY)], model="gpt-test", base_url=s.base_url,
                        run_dir=tmp_path / "run", eval_options=fast_options(),
                        model_overrides=FAST_MODEL)
    check_clean(s)
    assert code == 2
    assert "stopped: HTTP 500 from" in out and "gave up after 3 attempts" in out
    run = Run.open(tmp_path / "run")
    assert run.status() == "stopped"
    assert run.ledger.events("worker_finished")[0]["data"]["status"] == "model_error"


def test_unreachable_endpoint_and_missing_key_say_what_to_set(tmp_path, monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out = cli([str(TINY)], model="gpt-test", base_url=f"http://127.0.0.1:{port}/v1",
                    run_dir=tmp_path / "run", eval_options=fast_options(),
                    model_overrides=FAST_MODEL)
    assert code == 2 and f"cannot reach http://127.0.0.1:{port}/v1" in out
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("SOLFORGE_LLM_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out = cli([str(TINY)], model="gpt-4.1", run_dir=tmp_path / "run2")
    assert code == 2 and "set OPENAI_API_KEY" in out
    assert len(out.strip().splitlines()) == 1
    assert not (tmp_path / "run2").exists()  # nothing is created before the settings hold


def test_over_long_context_is_trimmed_and_retried(tmp_path, evaluator):
    big = "python -c \"print('x' * 30000)\""

    def first(req: Request) -> Reply:
        # later requests may be at most ~18 kB longer than this one
        s.max_body = len(json.dumps(req.body)) + 18000
        return Reply("Look at a big output.", [("run_command", {"command": big})])

    def after_trim(req: Request) -> Reply:
        outs = req.tool_outputs()
        assert "output trimmed" in outs[0] and "xxxx" in outs[1]
        return Reply("Done looking.", [("list_files", {})])

    with ScriptedServer([first, Reply("Again.", [("run_command", {"command": big})]),
                         after_trim]) as s:
        run = Run.create(tmp_path / "run", RunSpec(agent="llm"))
        cfg = WorkerConfig(model=model_config(s.base_url),
                           agent=AgentConfig(step_limit=3, keep_recent_outputs=1))
        res = run_llm_worker(run, load_problem(TINY), evaluator, cfg)
    check_clean(s)
    assert res.status == "limits_exceeded" and res.steps == 3
    rejected = [r for r in s.requests if len(json.dumps(r.body)) > s.max_body]
    assert len(rejected) == 1  # one 400 from the server, then the trimmed request passed
    traj = lines(Path(res.trajectory))
    assert any(x.get("kind") == "context_too_long" for x in traj)
    kept = [m["content"] for x in traj if x["type"] == "step" for m in x["messages"]
            if m.get("role") == "tool"]
    assert "output trimmed" not in kept[0]  # the trajectory keeps the full output


def test_context_too_small_for_the_task_ends_cleanly(tmp_path, evaluator):
    with ScriptedServer([]) as s:
        run = Run.create(tmp_path / "run", RunSpec(agent="llm"))
        cfg = WorkerConfig(model=model_config(s.base_url),
                           agent=AgentConfig(context_tokens=1000))
        res = run_llm_worker(run, load_problem(TINY), evaluator, cfg)
    assert s.requests == []
    assert res.status == "context_exhausted" and "does not fit 1000 tokens" in res.message


@pytest.mark.parametrize("limits, reason", [
    ({"token_limit": 250}, "token limit"),
    ({"cost_limit_usd": 0.5}, "cost limit"),
])
def test_token_and_cost_budgets(tmp_path, evaluator, limits, reason):
    # 100 + 20 tokens a call; at $1000/Mtok input, $2000/Mtok output a call costs $0.14
    with ScriptedServer([read_problem()] * 4) as s:
        run = Run.create(tmp_path / "run", RunSpec(agent="llm"))
        mc = model_config(s.base_url, price_in=1000.0, price_out=2000.0)
        res = run_llm_worker(run, load_problem(TINY), evaluator,
                             WorkerConfig(model=mc, agent=AgentConfig(**limits)))
    assert res.status == "limits_exceeded" and reason in res.message
    assert res.steps == (3 if "token" in reason else 4)
    assert run.ledger.usage_totals()["input_tokens"] == 100 * res.steps


def test_budget_out_submits_the_best_visible_attempt(tmp_path):
    with ScriptedServer([read_problem(), write_good, evaluate()]) as s:
        out = optimize_llm([str(TINY)], client=make_client(model_config(s.base_url)),
                           run_dir=tmp_path / "run", eval_options=fast_options(), max_steps=3)
    check_clean(s)
    (res,) = out.results
    assert (res.status, res.verdict, res.auto_submitted) == ("limits_exceeded", "PASSED", True)
    run = Run.open(out.run_dir)
    # the run checks its winner on fresh seeds before reporting it (kind final)
    assert [e["kind"] for e in run.ledger.evaluations()] == ["visible", "full", "final"]
    (attempt,) = run.ledger.attempts()
    assert attempt["id"] == res.attempt
    assert run.show()["problems"][0]["best"]["held_out_included"]
    traj = lines(run.trajectory_path("llm", "tiny_linear"))
    assert traj[-1]["type"] == "event" and traj[-1]["kind"] == "auto_submitted"


def test_an_interrupted_run_resumes_where_it_stopped(tmp_path):
    run_dir = tmp_path / "run"
    with ScriptedServer([read_problem(), write_good]) as s:
        optimize_llm([str(TINY)], client=make_client(model_config(s.base_url)),
                     run_dir=run_dir, eval_options=fast_options(), max_steps=2)
    check_clean(s)
    # a process killed at this point leaves no exit line: cut it (and any after it)
    run = Run.open(run_dir)
    traj_path = run.trajectory_path("llm", "tiny_linear")
    kept = [x for x in traj_path.read_text().splitlines() if '"type": "exit"' not in x]
    traj_path.write_text("\n".join(kept) + "\n")
    (unit,) = run.ledger.work()
    run.ledger.set_work(unit["id"], "running")  # where a killed process leaves its unit

    def resumed(req: Request) -> Reply:
        calls = [c["function"]["name"] for m in req.body["messages"]
                 for c in m.get("tool_calls") or []]
        assert calls == ["read_file", "write_file"]  # the earlier conversation came back
        return evaluate()

    with ScriptedServer([resumed, submit]) as s:
        out = optimize_llm([str(TINY)], client=make_client(model_config(s.base_url)),
                           run_dir=run_dir, eval_options=fast_options(), max_steps=4,
                           resume=True)
    check_clean(s)
    assert out.results[0].verdict == "PASSED" and out.results[0].steps == 4
    assert (workspace_of(run_dir) / "solution.py").read_text() == GOOD
    types = [x["type"] for x in lines(traj_path)]
    assert "resume" in types and types[-1] == "exit"
    # a finished run resumed has nothing left to do: no model call, the verdict stands
    again = optimize_llm([str(TINY)], client=make_client(model_config("http://127.0.0.1:9/v1")),
                         run_dir=run_dir, eval_options=fast_options(), resume=True)
    assert again.results == [] and again.status == "finished"
    assert Run.open(run_dir).show()["problems"][0]["best"]["status"] == "PASSED"


def test_diagnoser_starts_from_the_given_candidate(tmp_path, evaluator):
    bad = tmp_path / "bad.py"
    bad.write_text(WRONG)

    def look(req: Request) -> Reply:
        assert "# Role: diagnoser" in req.system()
        assert "solution.py (the candidate to start from)" in req.user_texts()[0]
        return Reply("Read the candidate.", [("read_file", {})])

    with ScriptedServer([look]) as s:
        run = Run.create(tmp_path / "run", RunSpec(agent="llm"))
        cfg = WorkerConfig(model=model_config(s.base_url), role="diagnoser", start_from=bad,
                           agent=AgentConfig(step_limit=1))
        res = run_llm_worker(run, load_problem(TINY), evaluator, cfg)
    check_clean(s)
    assert res.status == "limits_exceeded"
    assert (workspace_of(tmp_path / "run") / "solution.py").read_text() == WRONG


def test_a_bug_in_a_client_ends_the_problem_with_a_record(tmp_path, evaluator):
    class Broken:
        config = model_config("http://127.0.0.1:9/v1")

        def complete(self, system, messages, tools, on_retry=None):
            raise RuntimeError("plug-in bug")

    run = Run.create(tmp_path / "run", RunSpec(agent="llm"))
    res = run_llm_worker(run, load_problem(TINY), evaluator, WorkerConfig(), client=Broken())
    assert (res.status, res.message) == ("error", "RuntimeError: plug-in bug")
    exit_line = lines(Path(res.trajectory))[-1]
    assert exit_line["status"] == "error" and "plug-in bug" in exit_line["data"]["traceback"]
    assert run.show()["problems"][0]["state"] == "failed"


def test_a_stopping_run_ends_the_agent_and_submits_its_best(tmp_path, evaluator):
    """The planner's wall budget spent: the LLM worker asks before each model call, ends,
    and its best visible attempt gets the final verdict (as after any other budget)."""
    with ScriptedServer([read_problem(), write_good, evaluate()]) as s:
        run = Run.create(tmp_path / "run", RunSpec(agent="llm"))
        cfg = WorkerConfig(model=model_config(s.base_url))

        def stop() -> str:
            return "wall-time budget (60 s) spent" if run.ledger.evaluations() else ""

        res = run_llm_worker(run, load_problem(TINY), evaluator, cfg, stop=stop)
    check_clean(s)  # no model call after the evaluation
    assert res.status == "stopped" and "wall-time budget (60 s) spent" in res.message
    assert (res.steps, res.verdict, res.auto_submitted) == (3, "PASSED", True)
    assert [e["kind"] for e in run.ledger.evaluations()] == ["visible", "full"]
