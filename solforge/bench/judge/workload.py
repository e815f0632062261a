"""One workload, on the trusted side: the order in which its verdict forms.

Build the reference; have the runner build ``ModelNew``; correctness trials (fresh seeded
inputs per trial, cycling the problem's input distributions, inputs cloned per model, the
reference first, a determinism check and a float64 golden on the first trial,
``correctness.py``); the policy's traced call (``probes.py``); then timing in the runner
on a pool of fresh inputs, the check of timed outputs the judge recomputes itself, the
baselines (eager and ``torch.compile`` of the reference, cached), the judge's own wall
clock over a batch, and the speed-of-light annotation (``performance.py``); last, on a
GPU, the policy's kernel-name rule. On a GPU the trials and the traced call hold the
device's slot. A device out-of-memory of the judge's own work (the reference, its
inputs, the baselines) becomes the workload's result, not an error of the evaluator.

Not covered: which workloads run, the record that spans them, the build step and the
runner's start-up (``pipeline.py``); the workload's memory plan and admission
(``memory_plan.py``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from solforge.bench.judge.context import WorkloadContext
from solforge.bench.judge.correctness import correctness_trials
from solforge.bench.judge.memory_plan import _measured
from solforge.bench.judge.performance import timing_checks
from solforge.bench.judge.probes import policy_probe
from solforge.bench.measure import inputs as I
from solforge.bench.measure.slots import device_slot
from solforge.bench.policy import rules as policy
from solforge.bench.runner.handle import RunnerFailure
from solforge.records import EvalOptions, Finding, Status, WorkloadResult


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
    # On a GPU the trials and the traced call hold the device's slot too, shared: their
    # kernels would time-slice with a kernel another evaluator is measuring on the same
    # device, not with other evaluators' trials (no measurement sees those; the traced
    # call's profiler records this process's kernels only)
    gpu = device_slot(opts.device, shared=True) if device.type == "cuda" \
        else contextlib.nullcontext()
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
