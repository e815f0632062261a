"""Compile baselines are compiled ahead of timing and bounded: a reference torch.compile
cannot settle on is recorded as such and the evaluation goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from solforge.bench.baselines.measurement import warmed_compile
from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from solforge.records.evaluation import Status
from solforge.bench.judge.reference_solution import reference_solution
from solforge.problems import load_problem
from tests.conftest import PROBLEMS, own_cache

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]
# evaluations back to back (compile warm-ups): the next runner starts during the current one
pytestmark = pytest.mark.usefixtures("two_spares")


class _Lengths(nn.Module):
    """Specialises on the values of ``lens`` (a graph per distinct set), then settles."""

    def forward(self, x, lens):
        for n in lens.tolist():
            x = x * 2 + n
        return x


def test_data_dependent_reference_settles_after_one_pass():
    pool = [[torch.randn(8), torch.randint(1, 5, (4,))] for _ in range(3)]
    fn, why = warmed_compile(_Lengths(), EvalOptions(device="cpu"), pool, [1, 2, 3], CPU)
    assert why is None and fn is not None
    assert torch.equal(fn(*pool[0]), _Lengths()(*pool[0]))


def test_compile_over_its_budget_is_unavailable():
    pool = [[torch.randn(8), torch.randint(1, 5, (4,))]]
    fn, why = warmed_compile(_Lengths(), EvalOptions(device="cpu"), pool, [1], CPU,
                             budget_s=0.0)
    assert fn is None and "still compiling" in why


def test_one_long_compile_is_cut_at_its_budget_and_the_process_compiles_again(tmp_path):
    """One call's compile (a 300-step loop torch.compile unrolls: about 40 s on a 2-core
    CPU) is interrupted at the budget, not only found over it once it returns (RWKV-4's
    WKV survey held an H100's slot for 5 minutes so: benchmarks/results/
    2026-12-06-h100-s25); the process compiles normally afterwards. In a subprocess of
    its own: the deadline is a SIGALRM timer on the main thread, as in the judge."""
    from solforge import env

    inductor = env.cache_dir() / "inductor"
    script = f"""
import json, time, torch
from solforge.bench.baselines.measurement import warmed_compile
from solforge.problems.loader import import_file
from solforge.records.options import EvalOptions
mod = import_file({str(PROBLEMS / "long_loop_ref.py")!r}, prefix="t")
t = time.monotonic()
fn, why = warmed_compile(mod.Model(), EvalOptions(device="cpu"), [mod.get_inputs()], [1],
                         torch.device("cpu"), budget_s=2.0)
spent = time.monotonic() - t
g = torch.compile(lambda x: x * 2 + 1)
print(json.dumps({{"spent": spent, "why": why, "fn": fn is not None,
                  "after": torch.equal(g(torch.ones(3)), torch.full((3,), 3.0))}}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT),
                                           # the session's inductor cache (own_cache): no
                                           # compile of the long loop is ever kept (each
                                           # is cut), and the graph after it is this
                                           # test's alone; the ISA probes are not redone
                                           "TORCHINDUCTOR_CACHE_DIR": str(inductor),
                                           "TRITON_CACHE_DIR": str(tmp_path / "t")})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert not got["fn"] and "still compiling after" in got["why"], got
    assert got["spent"] < 15, got  # uncut: about 40 s
    assert got["after"], got


def test_a_judge_cuts_a_long_compile_and_records_the_baseline_unavailable(tmp_path,
                                                                          monkeypatch):
    """Through a real judge: the compile baseline of a long loop, given 2 s by
    ``SOLFORGE_COMPILE_WARMUP_S``, is recorded unavailable (its knob in the record) and
    the evaluation passes against eager."""
    own_cache(monkeypatch, tmp_path / "cache")
    monkeypatch.setenv("SOLFORGE_COMPILE_WARMUP_S", "2")
    problem = load_problem(PROBLEMS / "long_loop_ref.py")
    opts = EvalOptions(device="cpu", baselines=["eager", "compile"], budget_ms=30,
                       max_calls=10, timeout_s=240, seed=4)
    t = time.monotonic()
    with Evaluator(opts) as ev:
        r = ev.evaluate(problem, reference_solution(problem))
    spent = time.monotonic() - t
    assert r.status is Status.PASSED, r.message
    w = r.workloads[0]
    assert w.eager_ms and w.compile_ms is None, w
    assert "compile:default baseline unavailable: torch.compile was still compiling" \
        in w.message, w.message
    assert r.knobs.get("SOLFORGE_COMPILE_WARMUP_S") == "2"
    assert spent < 40, spent  # the uncut compile alone takes about 40 s


@pytest.fixture(scope="module")
def recompiling(tmp_path_factory):
    """The reference of ``recompiling_ref`` judged as a candidate, with a compile baseline,
    in a solforge cache of its own (no cached figure from elsewhere): the first evaluation,
    then the same again, a search agent's short exploring budget, a fresh interleaved
    re-measurement, and an explicit --fresh-baselines; with the compile warm-ups each ran
    (its phase messages). The first one is what both tests below start from."""
    opts = EvalOptions(device="cpu", baselines=["eager", "compile"], budget_ms=50, seed=5)
    compiles: list[int] = []  # per evaluation: phase messages of a compile warm-up
    kinds: list[set] = []  # per evaluation: the kinds of every baseline phase message

    def count(msg):
        if msg.get("phase") == "baseline":
            kinds[-1].add(str(msg.get("kind", "")))
            if str(msg.get("kind", "")).startswith("compile"):
                compiles[-1] += 1

    with pytest.MonkeyPatch.context() as mp:
        own_cache(mp, tmp_path_factory.mktemp("cache"))
        problem = load_problem(PROBLEMS / "recompiling_ref.py")
        sol = reference_solution(problem)
        records = {}
        with Evaluator(opts, on_phase=count) as ev:
            for name, kw in (("first", {}), ("again", {}),
                             ("other_budget", {"budget_ms": 20, "max_calls": 12}),
                             ("rounds", {"rounds": 3}), ("retried", {"fresh_baselines": True})):
                compiles.append(0)
                kinds.append(set())
                records[name] = ev.evaluate(problem, sol, **kw)
    recompiling_kinds.update(zip(records, kinds))
    return records, dict(zip(records, compiles))


recompiling_kinds: dict[str, set] = {}  # filled by the fixture: baseline kinds per evaluation


def test_reference_that_recompiles_every_call_gets_no_compile_figure(recompiling):
    records, compiles = recompiling
    first, again = records["first"], records["again"]
    for r in (first, again):  # the second from the cache, without compiling again
        assert r.status is Status.PASSED, r.message
        w = r.workloads[0]
        assert w.eager_ms and w.compile_ms is None
        assert w.message.count("compile:default baseline unavailable") == 1, w.message
        assert "already seen" in w.message
    # on a CPU the eager baseline is timed beside the candidate in every evaluation
    # (phase "baseline", kind "eager"); the compile baseline's verdict comes from the cache
    assert recompiling_kinds["again"] <= {"eager"}, recompiling_kinds
    assert any(k.startswith("compile") for k in recompiling_kinds["first"]), recompiling_kinds
    assert compiles["again"] == 0, compiles


def test_an_unavailable_compile_baseline_is_not_retried_by_other_timings(recompiling):
    """The verdict is a property of the reference: a search agent's short exploring budget
    and a fresh interleaved re-measurement read it too (on the H200 a fresh
    re-measurement spent the 90 s warm-up again, per workload, in the device's slot);
    only an explicit --fresh-baselines tries again."""
    records, compiles = recompiling
    other_budget, rounds, retried = (records[k] for k in ("other_budget", "rounds", "retried"))
    assert compiles["first"] >= 1  # the warm-up that found it
    assert compiles["other_budget"] == 0 and compiles["rounds"] == 0, compiles
    for r in (other_budget, rounds):
        assert r.status is Status.PASSED, r.message
        w = r.workloads[0]
        assert w.compile_ms is None and w.eager_ms  # a new eager figure all the same
        assert "compile:default baseline unavailable" in w.message, w.message
    assert compiles["retried"] >= 1 and retried.status is Status.PASSED
    assert "already seen" in retried.workloads[0].message  # compiled again, same finding


def test_interleaved_rounds_share_one_evaluations_timing():
    """Three rounds used to time three full evaluations' worth of calls (candidate and
    both baselines each round): a search verdict then held an H200's slot for minutes."""
    from solforge.bench.judge.performance import per_round
    from solforge.bench.measure.timing import TimingConfig

    cfg = TimingConfig(budget_ms=900.0, max_calls=200)
    assert per_round(cfg, 1) is cfg
    three = per_round(cfg, 3)
    assert (three.budget_ms, three.max_calls) == (300.0, 66)
    assert per_round(cfg, 50).max_calls == cfg.min_calls  # never under the minimum

    problem = load_problem(PROBLEMS / "tiny_linear.py")
    sol = reference_solution(problem)
    opts = EvalOptions(device="cpu", baselines=["eager"], max_calls=30, timeout_s=60, seed=3)
    with Evaluator(opts) as ev:
        once = ev.evaluate(problem, sol, workloads=["small"])
        thrice = ev.evaluate(problem, sol, workloads=["small"], rounds=3)
    assert once.status is Status.PASSED and thrice.status is Status.PASSED, thrice.message
    assert once.workloads[0].timed_calls <= 30
    assert 20 <= thrice.workloads[0].timed_calls <= 30, thrice.workloads[0].timed_calls
    assert thrice.workloads[0].eager_ms  # the fresh baseline was measured in its rounds


def test_a_slow_compile_warm_up_is_not_repeated_by_a_re_measurement(tmp_path, monkeypatch):
    """A re-measurement compiles its fresh baselines again; one whose warm-up took long
    (36 s per workload on the H200, inside the slot, every other evaluator waiting) reuses
    its last figure instead and says so. A quick one is compiled again; --fresh-baselines
    always compiles. Every compile holds the device's slot shared, never exclusively
    (``compile_holds_shared``: other evaluators' trials and compiles go on beside it), and
    so does the count of the reference's work, after the timings, once per workload."""
    import time

    from solforge.bench.baselines import slow as slow_baselines
    from solforge.bench.judge.performance import compile_holds_shared
    from solforge.bench.measure import slots

    own_cache(monkeypatch, tmp_path)
    monkeypatch.setenv(slots.SLOTS_ENV, str(tmp_path / "slots"))  # this test's holds only
    opts = EvalOptions(device="cpu", baselines=["eager", "compile"], budget_ms=40,
                       max_calls=20, seed=4, timeout_s=120)
    problem = load_problem(PROBLEMS / "tiny_linear.py")
    w = next(x for x in problem.workloads if x.name == "small")
    sol = reference_solution(problem)
    compiles: list[int] = []
    began: list[float] = []  # when each compile warm-up (before the timing phase) began
    last = [""]  # the last phase other than a baseline's

    def count(msg):
        if msg.get("phase") == "baseline" and str(msg.get("kind", "")).startswith("compile"):
            compiles[-1] += 1
            if last[0] != "timing":
                began.append(time.time())
        elif msg.get("phase") != "baseline":
            last[0] = str(msg.get("phase"))

    windows: list[tuple[float, float]] = []  # each evaluation's start and end

    with Evaluator(opts, on_phase=count) as ev:
        def judge(**kw):
            compiles.append(0)
            t0 = time.time()
            r = ev.evaluate(problem, sol, workloads=["small"], **kw)
            windows.append((t0, time.time()))
            return r

        first = judge()
        quick = judge(rounds=3)
        assert compiles[0] >= 1 and compiles[1] >= 1, compiles  # quick: compiled again
        entry = slow_baselines.too_slow(problem, w, opts)
        assert entry == {}  # nothing slow yet
        slow_baselines.remember(problem, w, opts, "compile:default", warmup_s=45.0,
                                figure={"kernel_ms": 123.0, "latency_ms": 124.0,
                                        "host_ms": 125.0})
        reused = judge(rounds=3)
        fresh = judge(rounds=3, fresh_baselines=True)
    assert compiles[2] == 0 and compiles[3] >= 1, compiles
    shared, alone = (slots.held_intervals("cpu", shared=s) for s in (True, False))
    assert began and alone  # the timings: exclusive
    for t in began:  # each compile in a shared hold, in no exclusive one
        assert any(a <= t <= b for a, b in shared), (t, shared)
        assert not any(a <= t <= b for a, b in alone), (t, alone)
    # after each evaluation's last exclusive hold (its timings), a shared one (the count
    # of the reference's work) only in the first: later ones read the count cached
    after = []
    for t0, t1 in windows:
        end = max(b for a, b in alone if t0 <= a <= t1)
        after.append([(a, b) for a, b in shared if end <= a <= t1])
    assert len(after[0]) == 1 and not any(after[1:]), after
    assert compile_holds_shared(opts)
    assert not compile_holds_shared(opts.model_copy(update={"compile_mode": "max-autotune"}))
    for r in (first, quick, reused, fresh):
        assert r.status is Status.PASSED, r.message
    assert first.workloads[0].compile_ms and quick.workloads[0].compile_ms != 123.0
    got = reused.workloads[0]
    assert got.compile_ms == 123.0 and got.eager_ms  # eager still measured fresh
    assert "from an earlier measurement" in got.message and "45 s" in got.message
    assert fresh.workloads[0].compile_ms != 123.0


def test_a_compile_baseline_outside_the_tolerance_is_timed_but_not_the_best(tmp_path,
                                                                            monkeypatch):
    """On the H200 torch.compile's own outputs for KernelBench's ResNet block failed the
    problem's 1e-4 (36.5% of elements): measured against it, every correct solution came
    to 0.40x. Its time is kept and the record says why it is not the best baseline."""
    from solforge.records import speedup_vs_best

    own_cache(monkeypatch, tmp_path)
    opts = EvalOptions(device="cpu", baselines=["eager", "compile"], budget_ms=40,
                       max_calls=20, seed=3, timeout_s=120)
    problem = load_problem(PROBLEMS / "compile_differs.py")
    ok = load_problem(PROBLEMS / "kb_relu.py")
    with Evaluator(opts) as ev:
        first = ev.evaluate(problem, reference_solution(problem))
        again = ev.evaluate(problem, reference_solution(problem))  # figures from the cache
        agrees = ev.evaluate(ok, reference_solution(ok))
    for r in (first, again):
        assert r.status is Status.PASSED, r.message
        (w,) = r.workloads
        assert w.compile_ms and w.eager_ms and w.compile_within_tolerance is False
        assert "compile:default baseline outside the problem's tolerance" in w.message
        assert speedup_vs_best(r) == pytest.approx(w.eager_ms / w.time_ms)
    # a compile baseline that agrees counts as before
    (w,) = agrees.workloads
    assert w.compile_within_tolerance is True
    assert speedup_vs_best(agrees) == pytest.approx(min(w.eager_ms, w.compile_ms) / w.time_ms)


def test_a_compile_baseline_is_judged_on_the_candidates_trials_not_one_input_set(tmp_path,
                                                                               monkeypatch):
    """KernelBench's 29_SwinMLP on an H100 (session 29): torch.compile's program agreed
    with the reference on the one input set it was checked on and became the best
    baseline, then failed a candidate's third trial; the run kept 0.74x of a figure no
    correct solution could reach. Here compile differs on negative inputs only: the file's
    own draw agrees, the second trial's signed inputs do not."""
    from solforge.records import speedup_vs_best

    own_cache(monkeypatch, tmp_path)
    opts = EvalOptions(device="cpu", baselines=["eager", "compile"], budget_ms=40,
                       max_calls=20, seed=3, timeout_s=120)
    problem = load_problem(PROBLEMS / "compile_differs_signed.py")
    assert list(problem.distributions) == ["normal", "signed"]
    with Evaluator(opts) as ev:
        r = ev.evaluate(problem, reference_solution(problem))
    assert r.status is Status.PASSED, r.message
    (w,) = r.workloads
    assert w.compile_ms and w.compile_within_tolerance is False
    assert "outside the problem's tolerance (trial 2 (signed inputs)" in w.message
    assert speedup_vs_best(r) == pytest.approx(w.eager_ms / w.time_ms)


def test_a_compile_program_that_failed_as_a_candidate_is_not_the_best_baseline(tmp_path,
                                                                               monkeypatch):
    """The check at compile time runs its own trials; a later candidate's trials can still
    find the compiled program wrong (a rare outlier). The search passes its compile
    candidate's failure to every later evaluation of the problem (``compile_failed``):
    the figure stays in the record, the best baseline there is eager."""
    from solforge.orchestrate.run import Run, RunSpec
    from solforge.records import speedup_vs_best
    from solforge.records.evaluation import EvaluationRecord, WorkloadResult
    from solforge.search.config import SearchConfig
    from solforge.search.state import SearchState

    own_cache(monkeypatch, tmp_path / "cache")
    opts = EvalOptions(device="cpu", baselines=["eager", "compile"], budget_ms=40,
                       max_calls=20, seed=3, timeout_s=120)
    problem = load_problem(PROBLEMS / "kb_relu.py")
    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    with Evaluator(opts) as ev:
        s = SearchState(run, problem, evaluator=ev, config=SearchConfig(), on_event=None)
        before = s._evaluate(reference_solution(problem), "", {})
        (w,) = before.workloads
        assert w.compile_within_tolerance is True and w.compile_ms
        failed = EvaluationRecord(problem=problem.name, solution="compile.py",
                                  status=Status.INCORRECT_NUMERICAL, workloads=[
                                      WorkloadResult(name=w.name,
                                                     status=Status.INCORRECT_NUMERICAL,
                                                     message="trial 3 (normal inputs): 4 of "
                                                             "10000 elements outside"),
                                      WorkloadResult(name="other", status=Status.PASSED)])
        s.compile_failed(failed)
        assert s.compile_outside == {w.name: "trial 3 (normal inputs): 4 of 10000 elements "
                                             "outside"}
        after = s._evaluate(reference_solution(problem), "", {})
    assert after.status is Status.PASSED, after.message
    (w,) = after.workloads
    assert w.compile_ms and w.compile_within_tolerance is False
    assert "its own program, judged as a candidate, failed: trial 3" in w.message
    assert speedup_vs_best(after) == pytest.approx(w.eager_ms / w.time_ms)
    (event,) = run.ledger.events("baseline_outside_tolerance")
    assert event["problem"] == problem.name and event["data"]["workloads"] == [w.name]
