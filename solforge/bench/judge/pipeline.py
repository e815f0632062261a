"""One evaluation, start to finish, on the trusted side: the order in which a verdict forms.

Load the problem and the solution; the policy's source rules; the build step where the
language builds ahead; then each selected workload in turn, planned and admitted to the
device, or refused when it cannot fit it (``memory_plan.py``), and judged (``workload.py``:
correctness trials, the policy's traced call, timing). The first failing workload decides
the status. An out-of-memory that came while other evaluations were admitted on the device
makes the evaluation run again alone. Also here: :func:`profile`, where a candidate's time
goes.

Workload selection: on a CPU, the problem's ``cpu`` workloads (all workloads if it marks
none, as a plain KernelBench file does); on a GPU, every workload, with the small ``cpu``
ones checked for correctness but not timed. ``workloads='visible'`` keeps held-out ones
out (what agents see).

The policy (``bench/policy/rules.py``): the source rules run once the solution is loaded; the traced
call after a workload's correctness trials; the kernel-name rule after its timing (GPU).
Under ``strict`` the first finding rejects (``REWARD_HACK``) without spending more time;
under ``default`` findings are flags and the verdict rests on the results. The evaluator's
own reference-as-solution file (``--solution reference``) is exempt: it *is* the reference.

Not covered: the judge process and its requests (``process.py``), what the judge holds
across evaluations (``state.py``).
"""

from __future__ import annotations

import random
import time
from typing import Any

import torch

from solforge import env
from solforge.bench.judge import memory
from solforge.bench.judge.build import judge_build
from solforge.bench.judge.context import WorkloadContext
from solforge.bench.judge.memory_plan import (
    MEMORY_WAIT,
    _admit,
    _charge_out_of_memory,
    _out_of_memory,
    _plan,
    _refused,
)
from solforge.bench.judge.reference_solution import is_reference_solution
from solforge.bench.judge.state import Judge
from solforge.bench.judge.workload import _admitted_workload
from solforge.bench.measure import inputs as I
from solforge.bench.measure.machine import device_name, library_versions
from solforge.bench.measure.slots import clock
from solforge.bench.policy import rules as policy
from solforge.bench.policy.solution import SolutionError, get_language, load_solution
from solforge.bench.runner.handle import RunnerFailure
from solforge.problems.loader import import_file, load_problem
from solforge.problems.spec import Problem, ProblemError, Workload
from solforge.records import (
    EvalOptions,
    EvaluationRecord,
    Finding,
    Status,
    WorkloadResult,
)

__all__ = ["MEMORY_WAIT", "evaluate", "profile", "select_workloads"]


def select_workloads(problem: Problem, opts: EvalOptions) -> list[tuple[Workload, bool]]:
    """(workload, timed) pairs for this device and visibility."""
    ws = problem.workloads
    if opts.workloads == "visible":
        ws = [w for w in ws if w.visible]
    elif isinstance(opts.workloads, list):
        names = set(opts.workloads)
        ws = [w for w in ws if w.name in names]
    if opts.device == "cpu":
        cpu = [w for w in ws if w.cpu]
        if any(w.cpu for w in problem.workloads):
            return [(w, True) for w in cpu]
        return [(w, True) for w in ws]
    return [(w, not w.cpu) for w in ws]


def evaluate(judge: Judge, problem_path: str, solution_path: str, language: str | None,
             options: dict[str, Any]) -> dict[str, Any]:
    """One evaluation. An out-of-memory that came while other evaluations were admitted on
    the device is never a verdict: the evaluation runs again alone (``admission.py``), and
    only an out-of-memory on the device alone is recorded, with its figures."""
    opts = EvalOptions(**options)
    if opts.device == "cpu":
        torch.set_num_threads(opts.cpu_threads)
    t0 = time.monotonic()
    rec = _attempt(judge, problem_path, solution_path, language, opts, alone=False)
    oom = _out_of_memory(rec)
    if oom is not None and oom.memory is not None and oom.memory.neighbours > 0:
        first = rec.message
        memory.release(opts.device)
        rec = _attempt(judge, problem_path, solution_path, language, opts, alone=True)
        rec.retried_alone = first[:2000]
        oom = _out_of_memory(rec)
    if oom is not None:
        _charge_out_of_memory(rec, oom, judge)
    rec.duration_s = round(time.monotonic() - t0, 3)
    return rec.finalize().to_json()


def _attempt(judge: Judge, problem_path: str, solution_path: str, language: str | None,
             opts: EvalOptions, alone: bool) -> EvaluationRecord:
    rec = EvaluationRecord(problem=str(problem_path), solution=str(solution_path),
                           device=device_name(opts.device), status=Status.PASSED,
                           policy=opts.policy,
                           versions={**library_versions(), "solforge": judge_build()},
                           knobs=env.verdict_knobs())
    _evaluate(judge, rec, problem_path, solution_path, language, opts, alone)
    return rec


def _fail(rec: EvaluationRecord, status: Status | str, message: str) -> None:
    rec.status = Status(status)
    rec.message = message.strip()[:8000]


def _evaluate(judge: Judge, rec: EvaluationRecord, problem_path: str, solution_path: str,
              language: str | None, opts: EvalOptions, alone: bool = False) -> None:
    judge.phase("reference")
    try:
        problem = load_problem(problem_path)
        module = import_file(problem.path, prefix="solforge_reference")
    except ProblemError as e:
        return _fail(rec, Status.INVALID_REFERENCE, str(e))
    except BaseException as e:
        return _fail(rec, Status.INVALID_REFERENCE, f"{type(e).__name__}: {e}")
    rec.problem = problem.name
    judge.guard.add(problem.path)
    try:
        sol = load_solution(solution_path, language)
    except (SolutionError, ValueError) as e:
        return _fail(rec, Status.COMPILE_ERROR, str(e))
    rec.language = sol.language
    if opts.languages and sol.language not in opts.languages:
        return _fail(rec, Status.COMPILE_ERROR,
                     f"the solution is written in {sol.language}; this evaluation accepts "
                     f"only {', '.join(opts.languages)} (--language)")
    lang = get_language(sol.language)
    checked = not is_reference_solution(sol.path, env.cache_dir())
    if checked:
        found = policy.static_findings(sol.path, sol.language, lang.own_kernels, problem.path)
        _record_findings(rec, found)
        verdict = policy.rejects(opts.policy, found)
        if verdict:
            return _fail(rec, *verdict)
    selected = select_workloads(problem, opts)
    if not selected:
        return _fail(rec, Status.INVALID_REFERENCE,
                     f"no workload of {problem.name} matches {opts.workloads!r} on "
                     f"{opts.device}")
    rec.held_out_included = any(not w.visible for w, _ in selected)
    deadline = clock() + opts.timeout_s
    if lang.builds_ahead:
        judge.phase("build")
        builder = judge.builder(opts.memory_mb, sol.path)
        try:
            builder.ask({"op": "build", "solution": str(sol.path)}, deadline)
        except RunnerFailure as e:
            if e.status in ("COMPILE_ERROR", "TIMEOUT"):
                builder.close()
                return _fail(rec, e.status, e.message)
            # anything else (the import needs the GPU, say) is retried in the runner
        finally:
            rec.containment = builder.containment
            builder.close()
    if opts.device == "cpu" and not lang.runs_on_cpu:
        built = " It compiled; r" if lang.builds_ahead else " R"
        return _fail(rec, Status.RUNTIME_ERROR,
                     f"{sol.language} solutions need a CUDA GPU and this evaluation runs on "
                     f"the CPU.{built}un it with --device cuda.")
    runner = judge.runner(opts.memory_mb, sol.path)
    seed = opts.seed if opts.seed is not None else random.randrange(1, 2**31)
    try:
        for w, timed in selected:
            plan, sizes = _plan(judge, module, w, alone)
            res = _refused(judge, w, plan, sizes)
            if res is None:
                ticket = _admit(judge, plan, w)
                ctx = WorkloadContext(
                    judge=judge, problem=problem.for_workload(w), module=module, workload=w,
                    timed=timed,
                    runner=runner, opts=opts, deadline=deadline, seed=seed,
                    res=WorkloadResult(name=w.name, visible=w.visible,
                                       params=w.params_json(), memory=plan),
                    plan=plan, ticket=ticket, lang=lang if checked else None, sizes=sizes)
                try:
                    res = _admitted_workload(ctx, sol.path)
                    memory.release_workload(opts.device)
                finally:
                    judge.ledger.leave(ticket)
                plan.neighbours = ticket.peak_neighbours
                _record_findings(rec, ctx.found)
            rec.workloads.append(res)
            for f in res.flags:
                if f not in rec.flags:
                    rec.flags.append(f)
            if res.status is not Status.PASSED:
                _fail(rec, res.status, f"workload {w.name}: {res.message}")
                break
    finally:
        judge.phase("closing")  # the runner killed, the evaluator's files checked, a spare
        rec.runner_seconds = {k: round(v, 3) for k, v in runner.op_seconds.items()}
        rec.containment = rec.containment or runner.containment
        runner.close()


def _record_findings(rec: EvaluationRecord, found: list[Finding]) -> None:
    rec.findings += found
    for f in found:
        if f.flag not in rec.flags:
            rec.flags.append(f.flag)


def profile(judge: Judge, problem_path: str, solution_path: str, language: str | None,
            options: dict[str, Any]) -> dict[str, Any]:
    """Where a candidate's time goes, on the first selected workload (PyTorch profiler)."""
    opts = EvalOptions(**options)
    try:
        problem = load_problem(problem_path)
        module = import_file(problem.path, prefix="solforge_reference")
        sol = load_solution(solution_path, language)
    except (ProblemError, SolutionError, ValueError) as e:
        return {"ok": False, "message": str(e)}
    selected = select_workloads(problem, opts)
    timed = [w for w, t in selected if t] or [w for w, _ in selected]
    if not timed:
        return {"ok": False, "message": "no workload to profile on this device"}
    w = timed[0]
    deadline = clock() + opts.timeout_s
    runner = judge.runner(opts.memory_mb, sol.path)
    eval_mode = not problem.train_mode and not problem.kernelbench_plain
    try:
        runner.ask({"op": "load", "problem": str(problem.path), "solution": str(sol.path),
                    "params": dict(w.params), "eval_mode": eval_mode}, deadline)
        x = I.make_inputs(module, w.params, 1234, "normal", torch.device(opts.device))
        reply = runner.ask({"op": "profile", "inputs": x, "calls": 5}, deadline)
    except RunnerFailure as e:
        return {"ok": False, "status": e.status, "message": e.message}
    finally:
        runner.close()
    return {"ok": True, "problem": problem.name, "workload": w.name, "device": opts.device,
            "language": sol.language, "rows": reply["rows"]}
