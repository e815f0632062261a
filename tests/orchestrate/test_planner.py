"""The planner over real workers: LLM workers driven by a scripted model server on loopback,
real CPU evaluators, a real run directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from solforge.agents.clients import make_client
from solforge.orchestrate.planner import Budgets, Planner, PlannerConfig
from solforge.orchestrate.run import Run, RunSpec
from solforge.problems import load_problem
from tests.agents.conftest import GOOD, fast_options, model_config
from tests.agents.loopback import Reply, Request, ScriptedServer
from tests.conftest import PROBLEMS

TINY = load_problem(PROBLEMS / "tiny_linear.py")
RELU = load_problem(PROBLEMS / "kb_relu.py")
RELU_SOLUTION = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp_min(x, 0.0)
'''


def brain(req: Request) -> Reply:
    """A scripted model that acts on what it sees, so two workers may share one server:
    read the problem, write the right solution for it, evaluate, submit."""
    outs = req.tool_outputs()
    if not outs:
        return Reply("Read the reference.", [("read_file", {"path": "problem.py"})])
    first = outs[0]
    if len(outs) == 1:
        source = GOOD if "gelu" in first else RELU_SOLUTION
        return Reply("Write the fused version.", [("write_file", {"path": "solution.py",
                                                                   "content": source})])
    if len(outs) == 2:
        return Reply("Check it.", [("evaluate", {})])
    return Reply("It passes.", [("submit", {"path": "solution.py", "summary": "fused"})])


def planner(tmp_path: Path, server: ScriptedServer, **cfg) -> Planner:
    run = Run.create(tmp_path / "run", RunSpec(agent="llm"))
    settings = {"llm": {"model": model_config(server.base_url),
                        "client": make_client(model_config(server.base_url))}}
    config = PlannerConfig(agents=["llm"], **{"max_units": 1, "final_rounds": 1, **cfg})
    return Planner(run, [TINY, RELU], config, fast_options(), settings)


def test_two_workers_two_problems_all_solved_and_verified(tmp_path):
    with ScriptedServer([brain] * 8) as s:
        p = planner(tmp_path, s, workers=2)
        result = p.loop(poll_s=0.05)
    assert not s.errors, s.errors
    assert result.status == "finished" and result.reason == "every problem converged"
    run = Run.open(tmp_path / "run")
    shown = run.show()
    assert {x["name"]: x["best"]["status"] for x in shown["problems"]} == {
        "tiny_linear": "PASSED", "kb_relu": "PASSED"}
    # the two units ran on the two workers, and each winner was re-measured ("final")
    assert sorted(w["data"]["worker"] for w in run.ledger.work()) == ["w0-llm", "w1-llm"]
    assert {e["problem"] for e in run.ledger.evaluations(kind="final")} == {"tiny_linear",
                                                                           "kb_relu"}
    assert all(x["best"] and x["best"]["status"] == "PASSED" for x in shown["problems"])
    assert shown["status"] == "finished"


def test_attempt_budget_stops_the_run_cleanly(tmp_path):
    with ScriptedServer([brain] * 4) as s:
        p = planner(tmp_path, s, workers=1, budgets=Budgets(attempts=1))
        result = p.loop(poll_s=0.05)
    assert result.reason == "attempt budget (1) spent"
    run = Run.open(tmp_path / "run")
    assert run.status() == "finished"
    assert run.ledger.get_meta("stop_reason") == "attempt budget (1) spent"
    done = run.ledger.work("done")
    assert len(done) == 1  # the second problem was never started
    assert run.ledger.work("running") == [] and run.ledger.work("queued") == []


def test_headroom_orders_untried_then_least_solved(tmp_path):
    with ScriptedServer([]) as s:
        p = planner(tmp_path, s)
    a, b = p.problems["tiny_linear"], p.problems["kb_relu"]
    assert p.headroom(a) == p.headroom(b)  # both untried
    a.best_speedup, a.best_sol = 1.2, 0.9
    b.best_speedup, b.best_sol = 1.0, 0.4
    assert p.next_problem() is b  # more headroom to the speed of light
    b.converged = "done"
    assert p.next_problem() is a


def test_a_sol_score_never_ends_a_problem_slower_than_its_best_baseline(tmp_path):
    """A bound set too low gives an honest reference SOL 1.00 at 0.47x its best baseline
    (fp32 convolutions on TF32 tensor cores, 2026-12-02): that is no reason to stop."""
    with ScriptedServer([]) as s:
        p = planner(tmp_path, s, max_units=10, patience=5)
    a, b = p.problems["tiny_linear"], p.problems["kb_relu"]
    a.units = b.units = 1
    a.best_speedup, a.best_sol = 0.47, 1.0
    p._check_converged(a)
    assert a.converged == ""
    assert p.headroom(a) == pytest.approx(0.53)  # behind its baseline: headroom, not 0
    b.best_speedup, b.best_sol = 1.3, 0.97
    p._check_converged(b)
    assert b.converged.startswith("SOL score 0.97")


def copycat(req: Request) -> Reply:
    """A scripted model that solves any problem by restating its reference as ModelNew."""
    outs = req.tool_outputs()
    if not outs:
        return Reply("Read the reference.", [("read_file", {"path": "problem.py"})])
    if len(outs) == 1:
        # tool output holds the file (possibly with a header line): keep from the imports on
        text = outs[0][outs[0].find("import "):]
        source = text.replace("class Model(", "class ModelNew(").replace(
            "super(Model,", "super(ModelNew,")
        return Reply("Restate it.", [("write_file", {"path": "solution.py", "content": source})])
    if len(outs) == 2:
        return Reply("Check it.", [("evaluate", {})])
    return Reply("Submit.", [("submit", {"path": "solution.py", "summary": "reference"})])


def test_search_and_llm_workers_mixed_solve_every_problem(tmp_path):
    run = Run.create(tmp_path / "run", RunSpec(agent="search,llm"))
    problems = [TINY, RELU, load_problem(PROBLEMS / "tiny_softmax.py")]
    with ScriptedServer([copycat] * 16) as s:
        settings = {"llm": {"model": model_config(s.base_url),
                            "client": make_client(model_config(s.base_url))},
                    # one candidate past the survey's reference: the library softmax
                    # (cost 3.5); a second would be torch.compile's, ~19 s of CPU here
                    "search": {"max_candidates": 1, "rounds": 1}}
        config = PlannerConfig(agents=["search", "llm"], workers=2, max_units=1,
                               final_rounds=1)
        result = Planner(run, problems, config, fast_options(), settings).loop(poll_s=0.05)
    assert not s.errors, s.errors
    assert result.status == "finished", result.reason
    shown = Run.open(tmp_path / "run").show()
    assert {p["name"]: (p["best"] or {}).get("status") for p in shown["problems"]} == {
        "tiny_linear": "PASSED", "kb_relu": "PASSED", "tiny_softmax": "PASSED"}
    agents = {w["kind"] for w in run.ledger.work("done")}
    assert agents == {"search", "llm"}  # both kinds of worker did units
    assert {a["agent"].split(":")[0] for a in run.ledger.attempts()} == {"search", "llm"}
    levers = Run.open(tmp_path / "run").summary()["levers"]
    assert sum(v["problems"] for v in levers.values()) >= 3  # every kept solution counted


def test_a_search_unit_cut_short_by_the_stop_goes_on_when_resumed(tmp_path, monkeypatch):
    """On the H200 a problem started just before the run's wall budget ran out kept the
    reference (its SDPA rewrite, 8x in an earlier run, never evaluated), and a resumed run
    counted its unit as done. A unit the stop cut short no longer counts: the resumed run
    goes on with the problem, reusing what was judged."""
    import solforge.search.candidates as candidates_module
    from solforge.search import Candidate, register_generator

    candidates_module.generators()  # the built-ins, before the registry is swapped
    monkeypatch.setattr(candidates_module, "_GENERATORS", dict(candidates_module._GENERATORS))
    register_generator("plug", lambda ctx: [Candidate(
        name="clamp", family="plug", levers=["fusion"], cost=1.5, source=RELU_SOLUTION,
        reasoning="one clamp")])
    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    settings = {"search": {"families": ["reference", "plug"], "explore_max_calls": 12}}
    config = PlannerConfig(agents=["search"], max_units=1,
                           budgets=Budgets(wall_s=1.0))  # spent during the first evaluation
    Planner(run, [RELU], config, fast_options(), settings).loop(poll_s=0.05)
    led = run.ledger
    (unit,) = led.work("done")
    assert unit["data"]["cut_short"].startswith("the run is stopping (wall-time budget")
    assert [a["path"] for a in led.attempts()] == ["candidate:reference"]
    assert {p["name"]: p["state"] for p in led.problems()} == {"kb_relu": "stopped"}
    assert len(led.evaluations(kind="final")) == 1  # the best so far was judged
    from solforge.orchestrate.cut_short import cut_short_units

    assert cut_short_units(led) == {unit["id"]}
    from solforge.cli.runs import summary_line

    assert run.summary()["cut_short"] == ["kb_relu"]
    assert "cut short by the run's budget (resume to go on): kb_relu" in summary_line(run)

    again = Planner(Run.open(run.dir), [RELU], config.model_copy(update={"budgets": Budgets()}),
                    fast_options(), settings)
    result = again.loop(poll_s=0.05)
    assert result.reason == "every problem converged"
    first, second = (w["data"]["cut_short"] for w in led.work("done"))
    assert first.startswith("the run is stopping") and second == ""
    assert [a["path"] for a in led.attempts()] == ["candidate:reference", "candidate:clamp"]
    # the reference was not judged again
    assert len(led.evaluations(kind="visible")) == 2
    assert {p["name"]: p["state"] for p in led.problems()} == {"kb_relu": "converged"}
    assert run.summary()["cut_short"] == [] and "cut short" not in summary_line(run)


def test_a_reopened_problem_gets_one_more_unit_reusing_what_was_judged(tmp_path, monkeypatch):
    """After an upgrade gives the search a new candidate for a problem that a run already
    ended, ``reopen`` on a resumed run gives that problem one more unit (past max_units),
    which judges only what is new; the other problems stay ended."""
    import solforge.search.candidates as candidates_module
    from solforge.search import Candidate, register_generator

    candidates_module.generators()
    monkeypatch.setattr(candidates_module, "_GENERATORS", dict(candidates_module._GENERATORS))
    register_generator("plug", lambda ctx: [Candidate(
        name="clamp", family="plug", levers=["fusion"], cost=1.5, source=RELU_SOLUTION,
        reasoning="one clamp")] if ctx.problem.name == "kb_relu" else [])
    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    config = PlannerConfig(agents=["search"], max_units=1)
    before = {"search": {"families": ["reference"], "explore_max_calls": 12}}
    Planner(run, [RELU, TINY], config, fast_options(), before).loop(poll_s=0.05)
    led = run.ledger
    assert len(led.work("done")) == 2
    assert {a["path"] for a in led.attempts()} == {"candidate:reference"}

    after = {"search": {"families": ["reference", "plug"], "explore_max_calls": 12}}
    with pytest.raises(ValueError, match="cannot reopen nope"):
        Planner(Run.open(run.dir), [RELU, TINY], config.model_copy(update={"reopen": ["nope"]}),
                fast_options(), after)
    again = Planner(Run.open(run.dir), [RELU, TINY],
                    config.model_copy(update={"reopen": ["kb_relu"]}), fast_options(), after)
    result = again.loop(poll_s=0.05)
    assert result.reason == "every problem converged"
    assert [w["problem"] for w in led.work("done")] == ["kb_relu", "tiny_linear", "kb_relu"]
    relu = [a["path"] for a in led.attempts() if a["problem"] == "kb_relu"]
    assert relu == ["candidate:reference", "candidate:clamp"]  # only the new one is added
    # the reference was not judged again; the clamp was explored and judged
    assert len(led.evaluations("kb_relu", kind="visible")) == 2
    assert [e["problem"] for e in led.events("problem_reopened")] == ["kb_relu"]
    # resumed once more without reopen: nothing left to do
    third = Planner(Run.open(run.dir), [RELU, TINY], config, fast_options(), after)
    assert third.loop(poll_s=0.05).reason == "every problem converged"
    assert len(led.work("done")) == 3


def test_a_reopening_is_owed_until_its_unit_runs_and_is_not_doubled(tmp_path, monkeypatch):
    """A reopening lives in the ledger, not in one call's memory. On the H200 on
    2026-12-02 a call reopened five problems and its wall-time budget ran out before two of
    their units started; the next resume, without ``--reopen``, found them ended and never
    ran them. Now: a resume owes the reopened unit until it runs, and passing ``reopen``
    again while it is owed does not add a second one."""
    import solforge.search.candidates as candidates_module
    from solforge.search import Candidate, register_generator

    candidates_module.generators()
    monkeypatch.setattr(candidates_module, "_GENERATORS", dict(candidates_module._GENERATORS))
    register_generator("plug", lambda ctx: [Candidate(
        name="clamp", family="plug", levers=["fusion"], cost=1.5, source=RELU_SOLUTION,
        reasoning="one clamp")])
    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    config = PlannerConfig(agents=["search"], max_units=1)
    settings = {"search": {"families": ["reference"], "explore_max_calls": 12}}
    Planner(run, [RELU], config, fast_options(), settings).loop(poll_s=0.05)
    led = run.ledger
    assert len(led.work("done")) == 1

    settings = {"search": {"families": ["reference", "plug"], "explore_max_calls": 12}}
    # reopened, but the budget is spent before any unit starts (one attempt exists)
    stopped = Planner(Run.open(run.dir), [RELU],
                      config.model_copy(update={"reopen": ["kb_relu"],
                                                "budgets": Budgets(attempts=1)}),
                      fast_options(), settings)
    assert stopped.loop(poll_s=0.05).reason == "attempt budget (1) spent"
    # the same reopen again while it is owed (stopped again): still one reopening
    Planner(Run.open(run.dir), [RELU], stopped.config, fast_options(), settings).loop(poll_s=0.05)
    assert len(led.work("done")) == 1
    assert [e["data"]["units"] for e in led.events("problem_reopened")] == [1]
    # a plain resume, no reopen: the owed unit runs
    again = Planner(Run.open(run.dir), [RELU], config, fast_options(), settings)
    assert again.loop(poll_s=0.05).reason == "every problem converged"
    assert len(led.work("done")) == 2
    assert [a["path"] for a in led.attempts()] == ["candidate:reference", "candidate:clamp"]
    # served: a plain resume has nothing left to do
    third = Planner(Run.open(run.dir), [RELU], config, fast_options(), settings)
    assert third.loop(poll_s=0.05).reason == "every problem converged"
    assert len(led.work("done")) == 2


def test_the_survey_judges_every_reference_first_and_searches_the_furthest_first(tmp_path):
    """On KernelBench's set listed in file order, a matmul already at its bound took the
    first 110 s of an H100 run while the ResNet block (6% of its bound) and two attention
    problems were cut by the wall budget. With more problems than workers, the planner now
    judges every reference first, then searches by the measured gap; each search unit
    reuses its survey's evaluation instead of judging the reference again."""
    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    settings = {"search": {"families": ["reference"], "explore_max_calls": 12}}
    config = PlannerConfig(agents=["search"], max_units=1, final_rounds=1)
    p = Planner(run, [TINY, RELU], config, fast_options(), settings)
    # as measured: the first listed runs near its bound, the second far from it
    p.problems["tiny_linear"].survey_roofline, p.problems["kb_relu"].survey_roofline = 0.95, 0.2
    assert p.headroom(p.problems["kb_relu"]) > p.headroom(p.problems["tiny_linear"])
    p.problems["tiny_linear"].survey_roofline = p.problems["kb_relu"].survey_roofline = None
    result = p.loop(poll_s=0.05)
    assert result.reason == "every problem converged"
    led = run.ledger
    surveyed = led.events("surveyed")
    assert [e["problem"] for e in surveyed] == ["tiny_linear", "kb_relu"]  # in the order given
    assert all(e["data"]["status"] == "PASSED" for e in surveyed)
    fractions = {e["problem"]: e["data"]["roofline_fraction"] for e in surveyed}
    assert all(f is None or 0 < f <= 1 for f in fractions.values()), fractions
    # both surveys ran before the first unit started
    first_unit = min(e["id"] for e in led.events("worker_started"))
    assert max(e["id"] for e in surveyed) < first_unit
    # one reference evaluation per problem: the unit reused the survey's
    visible = led.evaluations(kind="visible")
    assert sorted(e["problem"] for e in visible) == ["kb_relu", "tiny_linear"]
    assert {e["problem"] for e in led.evaluations(kind="final")} == {"tiny_linear", "kb_relu"}
    # the unit order follows the measured gap (untried: 2 x weight x (1 - fraction))
    order = [e["problem"] for e in led.events("worker_started")]
    gap = {n: 1.0 if f is None else max(0.1, 1.0 - f) for n, f in fractions.items()}
    assert order == sorted(gap, key=lambda n: -gap[n]) or gap["kb_relu"] == gap["tiny_linear"]
    # a resumed run knows what was surveyed and surveys nothing again
    again = Planner(Run.open(run.dir), [TINY, RELU], config, fast_options(), settings)
    assert all(ps.surveyed for ps in again.problems.values())
    assert {n: ps.survey_roofline for n, ps in again.problems.items()} == fractions


def test_no_survey_with_as_many_workers_as_problems_or_when_turned_off(tmp_path):
    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    settings = {"search": {"families": ["reference"]}}
    two = Planner(run, [TINY, RELU], PlannerConfig(agents=["search"], workers=2),
                  fast_options(), settings)
    assert two.next_survey(two.workers[0]) is None
    off = Planner(run, [TINY, RELU], PlannerConfig(agents=["search"], survey=False),
                  fast_options(), settings)
    assert off.next_survey(off.workers[0]) is None
    on = Planner(run, [TINY, RELU], PlannerConfig(agents=["search"]), fast_options(), settings)
    assert on.next_survey(on.workers[0]).problem.name == "tiny_linear"
    with ScriptedServer([]) as s:  # an LLM worker cannot survey: nothing changes for it
        assert planner(tmp_path / "llm", s).next_survey(
            planner(tmp_path / "llm2", s).workers[0]) is None


def test_a_budget_spent_after_the_survey_still_gives_each_surveyed_problem_its_verdict(tmp_path):
    """The survey puts problems near their bound last; a wall budget that ends before
    their turn must not leave them without a judged solution. A problem surveyed before
    the stop gets one unit after it (the stop tells the worker to evaluate only what it
    owes); one the budget ended before its survey gets nothing."""
    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    settings = {"search": {"families": ["reference"], "explore_max_calls": 12}}
    config = PlannerConfig(agents=["search"], max_units=1, final_rounds=1,
                           budgets=Budgets(wall_s=1.5))  # spent during the first survey
    p = Planner(run, [TINY, RELU], config, fast_options(), settings)
    import time

    p.started = time.monotonic()  # the budget from the loop's start, not the planner's build
    result = p.loop(poll_s=0.05)
    assert result.reason == "wall-time budget (1.5 s) spent"
    led = run.ledger
    assert [e["problem"] for e in led.events("surveyed")] == ["tiny_linear"]
    assert [e["problem"] for e in led.events("floor_unit")] == ["tiny_linear"]
    assert [e["problem"] for e in led.evaluations(kind="final")] == ["tiny_linear"]
    assert led.evaluations("kb_relu") == []
    (unit,) = led.work("done")
    assert unit["problem"] == "tiny_linear"
    # kb_relu, never surveyed, is not reached: listed apart, not counted as a failure
    s = run.summary()
    assert s["not_reached"] == ["kb_relu"] and s["problems"] == 1 and s["passed"] == 1


def test_floor_units_start_only_within_the_window_after_the_stop(tmp_path):
    """A corpus of 170 problems had 24 surveyed and none searched when its 315 s budget
    ended; their floor units would have run about 24 minutes past it (H100, session 23).
    Floor units now start only within a window after the stop; the problems left are
    reported as not reached, and a resume goes on with them."""
    import time

    from solforge.cli.runs import summary_line
    from solforge.orchestrate.planner_config import FLOOR_MIN_S

    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    settings = {"search": {"families": ["reference"], "explore_max_calls": 12}}
    config = PlannerConfig(agents=["search"], max_units=1, final_rounds=1, floor_s=0.0,
                           budgets=Budgets(wall_s=1.5))  # spent during the first survey
    p = Planner(run, [TINY, RELU], config, fast_options(), settings)
    p.started = time.monotonic()
    assert p.loop(poll_s=0.05).reason == "wall-time budget (1.5 s) spent"
    led = run.ledger
    assert [e["problem"] for e in led.events("surveyed")] == ["tiny_linear"]
    assert led.events("floor_unit") == [] and led.work() == []
    (closed,) = led.events("floor_closed")
    assert closed["data"]["left"] == ["tiny_linear"] and closed["data"]["window_s"] == 0.0
    s = run.summary()
    assert s["not_reached"] == ["kb_relu", "tiny_linear"] and s["problems"] == 0
    assert "not reached before the run's budget ended (resume to go on): kb_relu, " \
           "tiny_linear" in summary_line(run)
    # a resume without the budget goes on with both, the survey kept
    again = Planner(Run.open(run.dir), [TINY, RELU],
                    config.model_copy(update={"budgets": Budgets()}), fast_options(), settings)
    assert again.loop(poll_s=0.05).reason == "every problem converged"
    assert [e["problem"] for e in led.events("surveyed")] == ["tiny_linear", "kb_relu"]
    s = run.summary()
    assert s["not_reached"] == [] and s["passed"] == 2
    # the default window: half the wall budget, at least FLOOR_MIN_S; none without one
    window = lambda **kw: Planner(run, [TINY], PlannerConfig(agents=["search"], **kw),
                                  fast_options(), settings).floor_window_s()
    assert window(budgets=Budgets(wall_s=1.5)) == FLOOR_MIN_S
    assert window(budgets=Budgets(wall_s=600)) == 300
    assert window() is None and window(floor_s=7.0, budgets=Budgets(wall_s=600)) == 7.0
