"""The two halves of a workload's verdict on the trusted side: correctness, then timing.

Correctness (:func:`correctness_trials`): ``trials`` rounds, each with fresh inputs from
its own seed and the next of the problem's input distributions; the reference runs first
on its own clone; the candidate gets another clone through the channel; its outputs are
compared (``compare.py``); the inputs it was given must be unchanged afterwards; the first
trial also checks the reference is deterministic, runs the candidate a second time on the
same input and compares the two within the problem's tolerance (atomics and split-K may
differ in the last bits; uninitialised memory or a race differs by more:
``nondeterministic``), and measures both against a float64 run.

Timing (:func:`timing_checks`): the runner times the candidate (``timing.py``) on clones
of a small pool of input sets, perturbed per call by seeds the judge chose; the judge
then fetches the outputs of a few timed calls (the last always among them), rebuilds
exactly those inputs and checks them against the reference; it times the baselines in
its own process with the same function and the same seeds (cached), with the runner
frozen (SIGSTOP: nothing of the candidate runs meanwhile) and its own files checked first
(compiling a baseline imports code the candidate could have rewritten); it measures the
candidate with its own wall clock over a batch of back-to-back calls ending in a
synchronize and an output check, and compares that clock with the runner's figures
(``probes.clock_check``); it watches the CPU the runner burns between requests
(``probes.idle_check``); last, the speed-of-light annotation.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import torch

from solforge.bench import inputs as I
from solforge.bench import probes
from solforge.bench.baselines import (
    Interleaved,
    batch_size,
    missing_baselines,
    prepare_baselines,
    time_baselines,
    time_fn,
)
from solforge.bench.compare import as_list, compare, same_outputs
from solforge.bench.judge import Judge, RunnerFailure, RunnerHandle
from solforge.bench.options import EvalOptions
from solforge.bench.records import Status, WorkloadResult
from solforge.bench.slots import device_slot
from solforge.bench.timing import TimingConfig, fresh_inputs
from solforge.problems.spec import Problem, Workload

POOL_SETS = 3          # distinct input sets that timed calls cycle through, then perturb
RETAIN = 4             # timed calls whose outputs the judge re-checks (the last, and 3 more)
RETAIN_BYTES = 1 << 31  # the runner keeps timed outputs up to this much, newest first
GOLDEN_MAX_ELEMENTS = 1 << 26
CLOCK_RETRIES = 2       # extra batches when the judge's clock disagrees with the runner's


def _set(res: WorkloadResult, status: Status | str, message: str) -> Status:
    res.status = Status(status)
    res.message = message.strip()[:6000]
    res.correct = False
    return res.status


def _failed(res: WorkloadResult, e: RunnerFailure) -> Status:
    if e.flag and e.flag not in res.flags:
        res.flags.append(e.flag)
    return _set(res, e.status, e.message)


def _flag(res: WorkloadResult, flag: str, message: str) -> Status:
    if flag not in res.flags:
        res.flags.append(flag)
    return _set(res, Status.REWARD_HACK, message)


def _owned(xs: list[Any]) -> list[Any]:
    """Copies of what the runner sent: CUDA IPC views stay mapped to its memory."""
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


def _unchanged(before: list[Any], after: list[Any]) -> bool:
    """True when every input tensor still holds what the judge put in it."""
    pairs = [(a, b) for a, b in zip(before, after)
             if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)]
    return all(same_outputs(a, b.to(a.device)) for a, b in pairs)


def _golden(ref: Any, inputs: list[Any], seed: int, ref_out: Any, out: list[Any]
            ) -> tuple[float | None, float | None]:
    """Max abs error of the reference and of the candidate against a float64 reference."""
    refs = as_list(ref_out)
    n = sum(r.numel() for r in refs if isinstance(r, torch.Tensor))
    params = sum(p.numel() for p in ref.parameters()) if isinstance(ref, torch.nn.Module) else 0
    if n == 0 or n > GOLDEN_MAX_ELEMENTS or params > GOLDEN_MAX_ELEMENTS:
        return None, None
    if any(isinstance(r, torch.Tensor) and not r.is_floating_point() for r in refs):
        return None, None
    try:
        g = copy.deepcopy(ref).double()
        x64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
               for x in inputs]
        gold = as_list(I.run_forward(g, x64, seed))
        e_ref = max(float((r.double() - q.double()).abs().max()) for r, q in zip(refs, gold))
        e_out = max(float((o.double() - q.double()).abs().max()) for o, q in zip(out, gold))
        return e_ref, e_out
    except Exception:
        return None, None


def correctness_trials(judge: Judge, problem: Problem, module: Any, ref: Any, w: Workload,
                       runner: RunnerHandle, opts: EvalOptions, deadline: float, seed: int,
                       res: WorkloadResult) -> Status | None:
    """Run the trials; return the failing status, or None when all passed."""
    device = torch.device(opts.device)
    dists = problem.distributions
    pc = problem.precision
    for t in range(opts.trials):
        s = (seed + 7919 * t) % (2**31)
        dist = dists[t % len(dists)]
        try:
            x = I.make_inputs(module, w.params, s, dist, device)
            ref_out = I.run_forward(ref, I.clone_all(x), s)
            I.synchronize(device)
            if t == 0:
                again = I.run_forward(ref, I.clone_all(x), s)
                if not same_outputs(ref_out, again):
                    # GPU kernels with atomics or split reductions (attention with split-KV,
                    # index_add, scatter) differ in the last bits from run to run; only a
                    # difference beyond the tolerance makes the reference unusable
                    drift = compare(again, ref_out, pc)
                    if not drift.ok:
                        return _set(res, Status.INVALID_REFERENCE,
                                    "the reference gives two different answers to the same "
                                    "input (even with the RNG reseeded before each forward): "
                                    f"{drift.message}")
                    res.message = ("the reference is not bitwise deterministic (run-to-run "
                                   f"difference up to {drift.max_abs_error:.3g}, within the "
                                   "tolerance)")
        except Exception as e:
            return _set(res, Status.INVALID_REFERENCE,
                        f"the reference failed: {type(e).__name__}: {e}")
        sent = I.clone_all(x)
        try:
            reply = runner.ask({"op": "run", "inputs": sent, "seed": s}, deadline)
        except RunnerFailure as e:
            return _failed(res, e)
        out = _owned(reply["outputs"])
        if "lazy_output" in reply.get("flags", []):
            return _flag(res, "lazy_output", "an output is a tensor subclass, not a plain "
                         "torch.Tensor (outputs must be materialised when the call returns)")
        after = sent if device.type == "cuda" else reply.get("inputs_after") or sent
        if not _unchanged(x, after):
            return _flag(res, "input_mutation", "the solution modified its inputs in place")
        cmp = compare(out, ref_out, pc)
        if t == 0 and cmp.ok:
            status = _second_run(runner, x, s, out, pc, deadline, res)
            if status is not None:
                return status
        res.trials = t + 1
        res.max_abs_error = max(res.max_abs_error or 0.0, cmp.max_abs_error)
        res.max_rel_error = max(res.max_rel_error or 0.0, cmp.max_rel_error)
        res.mismatch_ratio = max(res.mismatch_ratio or 0.0, cmp.mismatch_ratio)
        if t == 0:
            res.reference_golden_max_abs_error, res.golden_max_abs_error = _golden(
                ref, x, s, ref_out, out)
        if not cmp.ok:
            return _set(res, cmp.status, f"trial {t + 1} ({dist} inputs): {cmp.message}")
    res.correct = True
    res.status = Status.PASSED
    return None


def _second_run(runner: RunnerHandle, x: list[Any], seed: int, first: list[Any], pc: Any,
                deadline: float, res: WorkloadResult) -> Status | None:
    """The same input again: the two answers must agree within the tolerance."""
    try:
        again = _owned(runner.ask({"op": "run", "inputs": I.clone_all(x), "seed": seed},
                                  deadline)["outputs"])
    except RunnerFailure as e:
        return _failed(res, e)
    cmp = compare(again, first, pc)
    if cmp.ok:
        return None
    return probes.flag(res, "nondeterministic",
                       f"two calls on the same input disagree beyond the tolerance "
                       f"({cmp.message}): uninitialised memory, a race, or state carried "
                       "from one call to the next", Status.INCORRECT_NUMERICAL)


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    ys = sorted(xs)
    m = len(ys) // 2
    return ys[m] if len(ys) % 2 else 0.5 * (ys[m - 1] + ys[m])


def _timing_config(opts: EvalOptions) -> TimingConfig:
    return TimingConfig(budget_ms=opts.timing_budget_ms(), max_calls=opts.max_calls)


def timing_checks(judge: Judge, problem: Problem, module: Any, ref: Any, w: Workload,
                  runner: RunnerHandle, opts: EvalOptions, deadline: float, seed: int,
                  res: WorkloadResult) -> Status | None:
    """Time the candidate (and the baselines) and run every timing-side check.

    With ``opts.rounds`` > 1 the candidate and fresh (uncached) baselines are measured in
    alternation, round after round, and each figure is the median over all its rounds:
    the re-measurement of a winner, so that a drift of the machine hits all alike.
    """
    device = torch.device(opts.device)
    cfg = _timing_config(opts)
    rng = random.Random(seed ^ 0x5EED)
    pool = [I.make_inputs(module, w.params, (seed + 100_003 * (k + 1)) % (2**31), "normal",
                          device) for k in range(POOL_SETS)]
    rounds = max(1, opts.rounds)
    # baselines compile here, before the candidate is timed, with nothing of the candidate
    # running and the evaluator's files checked first (see the module docstring); with
    # every figure cached there is nothing to compile and nothing to check
    prep_seeds = [rng.randrange(2**31) for _ in range(POOL_SETS)]
    if missing_baselines(problem, w, cfg, opts, fresh=rounds > 1):
        if (status := _verified(judge, res)) is not None:
            return status
    # in the device's slot, as all GPU work of an evaluation: the warm-up runs the
    # reference's kernels, which would time-slice with another evaluator's measurement
    with runner.frozen(), device_slot(opts.device):
        prepared = prepare_baselines(judge, problem, ref, w, pool, prep_seeds, cfg, opts,
                                     res, fresh=rounds > 1)
    judge.phase("timing", workload=w.name)
    runner.start_idle_watch()
    try:
        return _timing(judge, problem, ref, w, runner, opts, deadline, seed, res, pool, cfg,
                       rng, rounds, device, prepared)
    finally:
        runner.watch_idle = False


def _timing(judge: Judge, problem: Problem, ref: Any, w: Workload, runner: RunnerHandle,
            opts: EvalOptions, deadline: float, seed: int, res: WorkloadResult,
            pool: list[list[Any]], cfg: TimingConfig, rng: random.Random, rounds: int,
            device: torch.device, prepared: dict[str, Any]) -> Status | None:
    kernel: list[float] = []
    latency: list[float] = []
    base: dict[str, dict] = {}
    with device_slot(opts.device):
        interleaved = None
        if rounds > 1:
            if (status := _verified(judge, res)) is not None:
                return status
            interleaved = Interleaved(prepared, pool, cfg, device)
        for _ in range(rounds):
            seeds = [rng.randrange(2**31) for _ in range(cfg.max_calls)]
            try:
                reply = runner.ask({"op": "time", "pool": [I.clone_all(p) for p in pool],
                                    "seeds": seeds, "config": vars(cfg),
                                    "retain_bytes": RETAIN_BYTES, "seed": seed}, deadline)
                picks = _pick_checked_calls(ref, pool, len(reply["kernel_ms"]),
                                            random.SystemRandom(), seed)
                kept = runner.ask({"op": "fetch", "indices": picks}, deadline)["outputs"]
            except RunnerFailure as e:
                return _failed(res, e)
            status = _timed_outputs(ref, pool, seeds, reply, picks, kept, seed, problem, res)
            if status is not None:
                return status
            kernel += reply["kernel_ms"]
            latency += reply["latency_ms"]
            res.kernels = list(reply.get("kernels", []))[:64]
            if interleaved is not None:
                if (status := _verified(judge, res)) is not None:
                    return status
                with runner.frozen():
                    interleaved.measure(seeds)
        res.time_ms, res.latency_ms = _median(kernel), _median(latency)
        res.timed_calls = len(kernel)
        res.time_spread = _spread(kernel)
        if interleaved is not None:
            base = interleaved.results(res)
        else:
            # nothing the candidate wrote may load while baselines are timed fresh, and
            # nothing of it may run while they are timed
            if prepared and (status := _verified(judge, res)) is not None:
                return status
            with runner.frozen():
                base = time_baselines(judge, problem, ref, w, pool, seeds, cfg, opts, res,
                                      prepared)
        judge.phase("host_clock", workload=w.name)
        status = _host_batch(ref, pool, runner, opts, deadline, seed, res, problem)
        # a suspicious gap between the clocks is measured again before it counts: a load
        # spike on the machine is transient, a time that does not cover the call is not
        for _ in range(CLOCK_RETRIES):
            if status is not None or probes.clock_gap(res, base, opts.device) is None:
                break
            best = res.host_ms
            status = _host_batch(ref, pool, runner, opts, deadline, seed, res, problem)
            res.host_ms = min(x for x in (best, res.host_ms) if x is not None)
        if status is None and interleaved is None \
                and probes.clock_gap(res, base, opts.device) is not None:
            # cached baselines were measured under another load of the machine (seen: a
            # busy host tripled honest candidates' off-device time): the reference's own
            # overhead is measured again now, beside the candidate, before the gap counts
            with runner.frozen():
                base = {**base, "eager_now": time_fn(ref, pool, seeds, cfg, device)}
    if status is not None:
        return status
    idle = probes.idle_check(runner, res)
    clock = probes.clock_check(res, base, opts.device)
    if idle or clock:
        return idle or clock
    if res.time_ms and res.eager_ms:
        res.speedup_vs_eager = res.eager_ms / res.time_ms
    if res.time_ms and res.compile_ms:
        res.speedup_vs_compile = res.compile_ms / res.time_ms
    judge.phase("sol", workload=w.name)
    _speed_of_light(problem, ref, w, pool[0], opts, res)
    return None


def _verified(judge: Judge, res: WorkloadResult) -> Status | None:
    try:
        judge.verify()
    except RunnerFailure as e:
        return _failed(res, e)
    return None


def _spread(xs: list[float]) -> float | None:
    ks = sorted(xs)
    med = _median(ks)
    if len(ks) < 4 or not med:
        return None
    return (ks[3 * len(ks) // 4] - ks[len(ks) // 4]) / med


def _pick_checked_calls(ref: Any, pool: list[list[Any]], calls: int, rng: random.Random,
                        seed: int) -> list[int]:
    """Timed calls to re-check, chosen after the fact: the last one and some at random
    among those whose outputs the runner had room to keep (it cannot know which)."""
    if calls <= 0:
        return []
    out_bytes = sum(o.numel() * o.element_size() for o in as_list(
        I.run_forward(ref, pool[0], seed)) if isinstance(o, torch.Tensor))
    room = max(1, RETAIN_BYTES // max(out_bytes, 1))
    window = list(range(max(0, calls - room), calls))
    picks = {calls - 1}
    picks.update(rng.sample(window, min(RETAIN - 1, len(window))))
    return sorted(picks)


def _timed_outputs(ref: Any, pool: list[list[Any]], seeds: list[int], reply: dict,
                   picks: list[int], kept: dict, seed: int, problem: Problem,
                   res: WorkloadResult) -> Status | None:
    """Check the outputs of the timed calls the judge picked."""
    if "lazy_output" in reply.get("flags", []):
        return _flag(res, "lazy_output", "a timed call returned a tensor subclass")
    missing = [i for i in picks if i not in kept]
    if not picks or missing:
        return _flag(res, "timed_output_withheld", "the runner did not return the outputs of "
                     f"the timed calls the judge asked for ({missing or 'none timed'})")
    for i in picks:
        xi = fresh_inputs(pool[i % len(pool)], seeds[i])
        want = I.run_forward(ref, xi, seed)
        cmp = compare(_owned(kept[i]), want, problem.precision)
        if not cmp.ok:
            return _flag(res, "timed_output_mismatch",
                         f"timed call {i} returned a wrong result ({cmp.message}) although the "
                         "correctness trials passed: results depend on call history (caching "
                         "or deferred work)")
    return None


def _host_batch(ref: Any, pool: list[list[Any]], runner: RunnerHandle, opts: EvalOptions,
                deadline: float, seed: int, res: WorkloadResult,
                problem: Problem) -> Status | None:
    """The judge's own clock over ``m`` back-to-back candidate calls, output checked."""
    m = batch_size(pool, res.latency_ms or 0.1)
    rng = random.Random(seed ^ 0xBA7C)
    seeds = [rng.randrange(2**31) for _ in range(m)]
    try:
        runner.ask({"op": "batch_prepare", "pool": [I.clone_all(p) for p in pool],
                    "seeds": seeds}, deadline)
        reply = runner.ask({"op": "batch_go"}, deadline)
        wall = runner.replied_at - runner.sent_at  # the round trip, not our bookkeeping
        # the request and reply themselves are harness cost, not the candidate's: an empty
        # batch measures them (the faster of two); on a call of a few microseconds they
        # were most of the gap on a loaded 2-core machine
        floor = []
        for _ in range(2):
            runner.ask({"op": "batch_go"}, deadline)
            floor.append(runner.replied_at - runner.sent_at)
    except RunnerFailure as e:
        return _failed(res, e)
    res.host_ms = max(wall - min(floor), 0.0) * 1e3 / m
    last = fresh_inputs(pool[(m - 1) % len(pool)], seeds[-1])
    cmp = compare(_owned(reply["outputs"]), I.run_forward(ref, last, seed), problem.precision)
    if not cmp.ok:
        return _flag(res, "batch_output_mismatch",
                     f"the last call of a back-to-back batch returned a wrong result "
                     f"({cmp.message}): work deferred across calls")
    return None


def _speed_of_light(problem: Problem, ref: Any, w: Workload, inputs: list[Any],
                    opts: EvalOptions, res: WorkloadResult) -> None:
    try:
        from solforge.sol.hooks import annotate_workload
    except ImportError:
        return
    annotate_workload(problem, ref, w, inputs, opts, res)
