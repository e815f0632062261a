"""One evaluation, start to finish, on the trusted side: the order in which a verdict forms.

For each selected workload: build the reference; have the runner build ``ModelNew``;
correctness trials (fresh seeded inputs per trial, cycling the problem's input
distributions, inputs cloned per model, the reference first, a determinism check and a
float64 golden on the first trial); then timing in the runner on a pool of fresh inputs,
the check of timed outputs the judge recomputes itself, the baselines (eager and
``torch.compile`` of the reference, cached), the judge's own wall clock over a batch, and
the speed-of-light annotation. The first failing workload decides the status.

Workload selection: on a CPU, the problem's ``cpu`` workloads (all workloads if it marks
none, as a plain KernelBench file does); on a GPU, every workload, with the small ``cpu``
ones checked for correctness but not timed. ``workloads='visible'`` keeps held-out ones
out (what agents see).

The policy (``bench/policy/rules.py``): the source rules run once the solution is loaded; the traced
call after a workload's correctness trials; the kernel-name rule after its timing (GPU).
Under ``strict`` the first finding rejects (``REWARD_HACK``) without spending more time;
under ``default`` findings are flags and the verdict rests on the results. The evaluator's
own reference-as-solution file (``--solution reference``) is exempt: it *is* the reference.
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

import torch

from solforge import env
from solforge.bench.judge import admission, memory
from solforge.bench.judge.context import WorkloadContext
from solforge.bench.judge.correctness import correctness_trials
from solforge.bench.judge.performance import timing_checks
from solforge.bench.judge.probes import policy_probe
from solforge.bench.judge.reference_solution import is_reference_solution
from solforge.bench.judge.state import Judge
from solforge.bench.measure import inputs as I
from solforge.bench.measure.machine import device_name, library_versions
from solforge.bench.measure.slots import clock, device_slot, not_the_candidates_time
from solforge.bench.policy import rules as policy
from solforge.bench.policy.solution import SolutionError, get_language, load_solution
from solforge.bench.runner.handle import RunnerFailure
from solforge.problems.loader import import_file, load_problem
from solforge.problems.spec import Problem, ProblemError, Workload
from solforge.records import (
    EvalOptions,
    EvaluationRecord,
    Finding,
    MemoryPlan,
    Status,
    WorkloadResult,
)

# The phase an evaluation is in while it waits for room on the device (``admission.py``)
MEMORY_WAIT = "memory_wait"


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
                           policy=opts.policy, versions=library_versions(),
                           knobs=env.verdict_knobs())
    _evaluate(judge, rec, problem_path, solution_path, language, opts, alone)
    return rec


def _out_of_memory(rec: EvaluationRecord) -> WorkloadResult | None:
    """The workload whose device out-of-memory decided the record, if one did."""
    if rec.status not in (Status.RUNTIME_ERROR, Status.INVALID_REFERENCE) or not rec.workloads:
        return None
    last = rec.workloads[-1]
    return last if last.status is rec.status and memory.is_out_of_memory(last.message) \
        else None


def _charge_out_of_memory(rec: EvaluationRecord, res: WorkloadResult, judge: Judge) -> None:
    """An out-of-memory on the device alone, with its figures. The candidate's own (its
    runner failed) is ``RUNTIME_ERROR``; the judge's (the reference, its inputs) is the
    reference's (``INVALID_REFERENCE``), unless the reference's workload fits the device
    by its size and the candidate's process held more than the rest of it."""
    plan = res.memory
    cap = judge.ledger.capacity
    need = plan.measured_mb or plan.estimate_mb if plan else None
    figures = (f"the workload's footprint is about {need:.0f} MiB with "
               f"{plan.input_sets} timing input set(s)" if plan and need else
               "the workload's footprint could not be estimated")
    figures += f"; the device offers {cap:.0f} MiB" if cap else ""
    runner = plan.runner_peak_mb if plan else None
    figures += f"; the candidate's process peaked at {runner:.0f} MiB" if runner else ""
    where = "alone on the device" if plan is None or plan.alone or plan.neighbours == 0 \
        else "beside other evaluations"
    crowded = bool(cap and need and runner and need <= cap and runner > cap - need)
    if rec.status is Status.INVALID_REFERENCE and crowded:
        rec.status = Status.RUNTIME_ERROR
        msg = (f"out of memory {where} while the judge ran the reference: {figures}; the "
               "reference's workload fits the device, and the candidate's memory left it "
               "no room")
    elif rec.status is Status.INVALID_REFERENCE:
        msg = f"out of memory {where}: {figures}. The reference's workload does not fit"
    else:
        msg = f"out of memory {where}: {figures}"
    res.status = rec.status
    rec.message = f"{msg}.\n{rec.message}"[:8000]


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
            plan = _plan(judge, module, w, alone)
            ticket = _admit(judge, plan, w)
            ctx = WorkloadContext(
                judge=judge, problem=problem.for_workload(w), module=module, workload=w,
                timed=timed,
                runner=runner, opts=opts, deadline=deadline, seed=seed,
                res=WorkloadResult(name=w.name, visible=w.visible, params=w.params_json(),
                                   memory=plan),
                plan=plan, ticket=ticket, lang=lang if checked else None)
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


def _plan(judge: Judge, module: Any, w: Workload, alone: bool) -> MemoryPlan:
    """The workload's estimated footprint and input sets, before any of it is built."""
    try:
        sizes = admission.estimate(module, w.params, I.init_args(module, w.params))
    except Exception:  # noqa: BLE001 - a constructor argument that fails shows up later
        sizes = admission.Sizes()
    sets = admission.input_sets(sizes, judge.ledger.capacity)
    return MemoryPlan(estimate_mb=round(admission.footprint(sizes, sets), 1),
                      input_sets=sets, alone=alone, inputs_mb=_r(sizes.inputs_mb),
                      weights_mb=_r(sizes.weights_mb))


def _r(x: float | None) -> float | None:
    return round(x, 1) if x is not None else None


def _admit(judge: Judge, plan: MemoryPlan, w: Workload) -> admission.Ticket:
    """Wait (not the candidate's time) until the workload fits beside the others."""
    def waiting(now: bool) -> None:
        if now:
            judge._send_phase(MEMORY_WAIT, {"workload": w.name})
        elif judge.current is not None:
            judge._send_phase(*judge.current)

    with not_the_candidates_time():
        ticket = judge.ledger.admit(plan.estimate_mb or 0.0, plan.alone, waiting)
    plan.waited_s = round(ticket.waited_s, 3)
    judge.memory.workload_peak(reset=True)
    return ticket


def _admitted_workload(ctx: WorkloadContext, solution_path: Any) -> WorkloadResult:
    """:func:`_workload` with its memory plan; a device out-of-memory of the judge's own
    work (its inputs, pool, baselines) becomes the workload's result, not an error of
    the evaluator."""
    w, plan, runner = ctx.workload, ctx.plan, ctx.runner
    try:
        res = _workload(ctx, solution_path)
    except torch.OutOfMemoryError as e:
        res = WorkloadResult(name=w.name, visible=w.visible, params=w.params_json())
        _set(res, Status.INVALID_REFERENCE, f"the judge's own work for this workload "
             f"(the reference, its inputs, the baselines) ran out of device memory: "
             f"{type(e).__name__}: {str(e)[:1500]}")
    res.memory = plan
    plan.runner_peak_mb = round(runner.peak_mb, 1) if runner.peak_mb else None
    ctx.judge.ledger.neighbours(ctx.ticket)
    return res


def _measured(ctx: WorkloadContext) -> None:
    """Size the workload again from the first trials' real peaks (judge and runner), plus
    the timing phase's extra input sets, and update its ticket."""
    judge, plan, runner = ctx.judge, ctx.plan, ctx.runner
    jp = judge.memory.workload_peak()
    if jp is None:
        return
    x = plan.inputs_mb if plan.inputs_mb is not None else max(0.0, jp / 4)
    sets = plan.input_sets or 1
    extra = 2 * sets * x + min(admission.HOLD_MB, 8 * x) + min(admission.RETAIN_MB, 4 * x) \
        + min(admission.BATCH_MB, 8 * x)
    plan.measured_mb = round(jp + (runner.peak_mb or 0.0) + extra, 1)
    judge.ledger.resize(ctx.ticket, max(plan.estimate_mb or 0.0, plan.measured_mb))


def _record_findings(rec: EvaluationRecord, found: list[Finding]) -> None:
    rec.findings += found
    for f in found:
        if f.flag not in rec.flags:
            rec.flags.append(f.flag)


def _workload(ctx: WorkloadContext, solution_path: Any) -> WorkloadResult:
    """One workload: correctness, the policy's traced call, timing (see module doc)."""
    judge, problem, w, runner, opts, res = (ctx.judge, ctx.problem, ctx.workload, ctx.runner,
                                            ctx.opts, ctx.res)
    lang, deadline, device = ctx.lang, ctx.deadline, ctx.device
    eval_mode = not problem.train_mode and not problem.kernelbench_plain
    judge.phase("reference", workload=w.name)
    try:
        ctx.ref = I.build_model(ctx.module.Model, I.init_args(ctx.module, w.params), device,
                                eval_mode)
    except Exception as e:
        return _set(res, Status.INVALID_REFERENCE, f"building the reference failed: "
                    f"{type(e).__name__}: {e}")
    try:
        if not runner.ready:  # a spare still starting: its wait is not the candidate's
            judge.phase("runner_start", workload=w.name)
            runner.wait_ready(deadline)
        judge.phase("candidate", workload=w.name)
        runner.ask({"op": "load", "problem": str(problem.path), "solution": str(solution_path),
                    "params": dict(w.params), "eval_mode": eval_mode,
                    "cpu_threads": opts.cpu_threads}, deadline)
    except RunnerFailure as e:
        if e.flag:
            res.flags.append(e.flag)
        return _set(res, e.status, e.message)
    # On a GPU the trials and the traced call hold the device's slot too: their kernels
    # would time-slice with a kernel another evaluator is measuring on the same device
    gpu = device_slot(opts.device) if device.type == "cuda" else contextlib.nullcontext()
    with gpu:
        status = correctness_trials(ctx)
        _measured(ctx)
        if status is not None:
            return res
        if lang is not None:
            judge.phase("policy", workload=w.name)
            dynamic, failure = policy_probe(ctx, lang.own_kernels)
            if failure is not None:
                if failure.flag:
                    res.flags.append(failure.flag)
                return _set(res, failure.status, failure.message)
            if _policy_verdict(res, dynamic, opts, ctx.found):
                return res
    if not ctx.timed or not opts.timing:
        return res
    timing_checks(ctx)
    if lang is not None and lang.own_kernels and opts.device != "cpu" \
            and res.status is Status.PASSED:
        f = policy.kernel_finding(res.kernels, lang.name, w.name)
        _policy_verdict(res, [f] if f else [], opts, ctx.found)
    return res


def _policy_verdict(res: WorkloadResult, dynamic: list[Finding], opts: EvalOptions,
                    found: list[Finding]) -> bool:
    """Record dynamic findings on the workload; True when the policy rejects them."""
    found += dynamic
    for f in dynamic:
        if f.flag not in res.flags:
            res.flags.append(f.flag)
    verdict = policy.rejects(opts.policy, dynamic)
    if verdict:
        _set(res, *verdict)
        return True
    return False


def _set(res: WorkloadResult, status: Status | str, message: str) -> WorkloadResult:
    res.status = Status(status)
    res.message = message.strip()[:6000]
    res.correct = False
    return res




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
