"""Trusted-side checks of *how* a candidate works, beside the checks of what it returns.

- :func:`policy_probe`: one traced call in the runner (``bench/policy/rules.py``'s dynamic rules:
  ATen coverage against the reference traced here, code from the problem's file
  executed), after the correctness trials passed.
- :func:`clock_check`: the runner's time per call against the judge's own wall clock
  over a batch. On a GPU a gap far beyond the reference's own overhead is work off the
  device (``off_device_work``); on a CPU, where both clocks measure the whole call, a
  reported time several times below the judge's is a time that does not cover the call:
  forged from inside the runner, or work finished after the call returned
  (``timing_mismatch``).
- :func:`idle_check`: CPU the runner's processes burnt between requests during the
  timing phase, when an honest runner waits for its next request (``background_work``).
  Compilers and compile workers are not counted; an idle thread pool costs nothing; a
  thread count is not a criterion (compilers, autotuners and pools start threads
  honestly).

Not covered: background work on the GPU by a process that holds no CPU (the kernel-time
window and the judge's clock see the device side), and work whose CPU cost is below the
thresholds (then it also cannot have bought much time).
"""

from __future__ import annotations

from solforge.bench.judge.context import WorkloadContext
from solforge.bench.judge.outcome import for_runner
from solforge.bench.measure import inputs as I
from solforge.bench.policy.rules import (
    AtenTrace,
    aten_trace,
    coverage_finding,
    reference_finding,
)
from solforge.bench.runner.handle import RunnerFailure, RunnerHandle
from solforge.records import Finding, Status, WorkloadResult

OFF_DEVICE_MIN_MS = 0.1
# The candidate runs in the sandboxed runner, whose call path (guards, IPC-shared inputs, one
# CPU thread) costs more host time than the judge's own baseline calls: the reference as its
# own candidate shows up to 1.5x the baselines' off-device time plus about 0.05 ms
# (benchmarks/results/2026-12-01-h200). Hence 3x and a fixed 0.2 ms.
OFF_DEVICE_OWN_RATIO = 3.0
RUNNER_PATH_MS = 0.2
CPU_CLOCK_RATIO = 3.0   # judge's clock over the runner's time before a CPU run is flagged
CPU_MIN_GAP_MS = 0.01   # ... and the gap must exceed this plus the reference's own gap
# A gap under CPU_SMALL_GAP_MS is flagged only at CPU_SMALL_GAP_RATIO times the runner's
# figure: on a busy host the scheduler adds tens of microseconds to each tiny call of the
# judge's batch (an honest 8 us reference of an extracted DeepSeek-V3 projection read 3.8x
# with four processes on two cores, session 17), while a rewritten time is off by orders
# (tests/fixtures/hacks/frame_walk_timing.py: 100x)
CPU_SMALL_GAP_MS = 0.1
CPU_SMALL_GAP_RATIO = 10.0
IDLE_PROBE_S = 0.15     # explicit idle wait at the end of a workload's timing
IDLE_MIN_CPU_S = 0.05   # background CPU below this is noise
IDLE_MAX_SHARE = 0.5    # ... and so is less than half a core over the idle windows
IDLE_PROBE_MIN_CPU_S = 0.04  # the probe's window alone: most of its 0.15 s on a core
# A probe window that shows CPU above noise but under half a core is extended, up to
# IDLE_PROBE_WINDOWS windows, and judged over all of them at a third of a core: on CI's
# shared 2-core machines a spinning thread got under half a core even in the probe (stop
# 39: PASSED), while an idle honest runner burns next to nothing in 0.6 s of waiting.
IDLE_PROBE_NOISE_S = 0.01
IDLE_PROBE_WINDOWS = 4
IDLE_PROBE_LONG_SHARE = 0.33
IDLE_PROBE_LONG_MIN_CPU_S = 0.08


def flag(res: WorkloadResult, name: str, message: str,
         status: Status = Status.REWARD_HACK) -> Status:
    if name not in res.flags:
        res.flags.append(name)
    if res.status is Status.REWARD_HACK and res.message:  # a second finding adds to the first
        res.message = f"{res.message}; {message.strip()}"[:6000]
        return res.status
    res.status = status
    res.message = message.strip()[:6000]
    res.correct = False
    return status


def policy_probe(ctx: WorkloadContext, own_kernels: bool
                 ) -> tuple[list[Finding], RunnerFailure | None]:
    """Findings of one traced candidate call; a fatal runner failure is returned to be
    recorded as the failure it is (a trace that merely raised proves nothing: no finding)."""
    w, ref, res, seed = ctx.workload, ctx.ref, ctx.res, ctx.seed
    x = I.make_inputs(ctx.module, w.params, seed, "normal", ctx.device)
    try:
        reply = ctx.ask({"op": "trace", "inputs": for_runner(x, ctx.device), "seed": seed,
                         "aten": own_kernels})
    except RunnerFailure as e:
        if e.fatal or e.status in ("TIMEOUT", "REWARD_HACK") or not ctx.runner.proc.alive():
            return [], e
        res.message = (res.message + f"; policy trace skipped ({e.status}: "
                       f"{e.message[:200]})").strip("; ")
        return [], None
    found = []
    f = reference_finding(int(reply.get("reference_calls", 0)),
                          list(reply.get("reference_where", [])), w.name)
    if f:
        found.append(f)
    if own_kernels:
        mine = aten_trace(lambda: I.run_forward(ref, I.clone_all(x), seed))
        f = coverage_finding(mine, AtenTrace.from_json(reply.get("aten") or {}), w.name)
        if f:
            found.append(f)
    return found, None


def clock_gap(res: WorkloadResult, base: dict[str, dict], device: str) -> tuple[str, str] | None:
    """(flag, message) when the runner's time and the judge's clock disagree (see the
    module docstring), else None.

    On a GPU the allowance is the baselines' own off-device time (tripled: eager launches,
    compiled guards, and the runner's slower call path) plus max(0.1 ms, the reference's
    kernel time) plus 0.2 ms: moving any meaningful share of the work to the host costs far
    more than that. Not covered: host work smaller than that allowance (on a reference with
    a Python loop over the batch, several milliseconds). On a CPU the judge's clock must
    exceed the runner's figure ``CPU_CLOCK_RATIO`` times the reference's own ratio of the two
    clocks (at least 1: the batch's inputs are cold in cache, the timed calls' warm), by
    more than twice the reference's own gap plus 0.01 ms (honest runs: about 1.2x); a gap
    under 0.1 ms needs ``CPU_SMALL_GAP_RATIO`` (10x) instead of 3x. Not covered on a CPU: a
    time rewritten by less than 10x on a call of a few microseconds.
    """
    if not res.time_ms:
        return None
    own = [b.get(k, 0.0) - b["kernel_ms"] for b in base.values() for k in ("latency_ms",
                                                                             "host_ms")
           if b.get(k) is not None and b.get("kernel_ms") is not None]
    if device == "cpu":
        # the judge's batch runs on inputs prepared ahead (cold in cache), the runner's
        # timed calls on inputs written just before (warm): the reference's own ratio of
        # the two clocks is the honest part of the candidate's
        ratios = [b["host_ms"] / b["kernel_ms"] for b in base.values()
                  if b.get("host_ms") and b.get("kernel_ms")]
        if res.host_ms is None:
            return None
        bar = CPU_CLOCK_RATIO if res.host_ms - res.time_ms >= CPU_SMALL_GAP_MS \
            else CPU_SMALL_GAP_RATIO
        if res.host_ms <= bar * max([1.0, *ratios]) * res.time_ms:
            return None
        if res.host_ms - res.time_ms <= 2 * max([*own, 0.0]) + CPU_MIN_GAP_MS:
            return None
        return ("timing_mismatch",
                f"the runner reports {res.time_ms:.3g} ms per call but the judge's own clock "
                f"measured {res.host_ms:.3g} ms per call over a batch: the reported time does "
                "not cover the call (rewritten from inside the process, or work completed "
                "after the call returned)")
    if not base:
        return None
    ker_ref = min((b["kernel_ms"] for b in base.values() if b.get("kernel_ms")), default=0.0)
    allowance = (OFF_DEVICE_OWN_RATIO * max([*own, 0.0]) + max(OFF_DEVICE_MIN_MS, ker_ref)
                 + RUNNER_PATH_MS)
    off = max((t - res.time_ms for t in (res.latency_ms, res.host_ms) if t is not None),
              default=0.0)
    if off <= allowance:
        return None
    return ("off_device_work",
            f"each call spends {off:.3g} ms outside device kernels against {allowance:.3g} ms "
            "allowed by the reference's own overhead: work done on the host, or a kernel "
            "time that does not cover the call")


def clock_check(res: WorkloadResult, base: dict[str, dict], device: str) -> Status | None:
    """Flag the workload when :func:`clock_gap` finds a gap."""
    gap = clock_gap(res, base, device)
    return flag(res, *gap) if gap else None


def _busy(cpu: float, wall: float, min_cpu: float) -> bool:
    return cpu >= min_cpu and cpu > IDLE_MAX_SHARE * wall


def idle_check(runner: RunnerHandle, res: WorkloadResult) -> Status | None:
    """Flag CPU burnt by the runner while it had no request (see the module docstring)."""
    probe_cpu, probe_wall = runner.idle_probe(IDLE_PROBE_S)
    windows = 1
    while (windows < IDLE_PROBE_WINDOWS and probe_cpu >= IDLE_PROBE_NOISE_S * windows
           and not _busy(probe_cpu, probe_wall, IDLE_PROBE_MIN_CPU_S)):
        more_cpu, more_wall = runner.idle_probe(IDLE_PROBE_S)
        probe_cpu, probe_wall, windows = probe_cpu + more_cpu, probe_wall + more_wall, windows + 1
    cpu, wall = runner.idle_cpu_s, runner.idle_wall_s
    runner.watch_idle = False
    res.idle_cpu_s, res.idle_wall_s = round(cpu, 4), round(wall, 4)
    # all the idle windows, or the probe's alone: elsewhere the judge works meanwhile, and
    # on a loaded machine (2 cores in CI) a spinning thread then got under half a core
    if not _busy(cpu, wall, IDLE_MIN_CPU_S):
        long_busy = (windows > 1 and probe_cpu >= IDLE_PROBE_LONG_MIN_CPU_S
                     and probe_cpu > IDLE_PROBE_LONG_SHARE * probe_wall)
        if not (_busy(probe_cpu, probe_wall, IDLE_PROBE_MIN_CPU_S) or long_busy):
            return None
        cpu, wall = probe_cpu, probe_wall
    return flag(res, "background_work",
                f"the candidate's processes used {cpu:.2f} s of CPU in {wall:.2f} s during "
                "which the runner had no request (after its calls had returned): work "
                "continuing in the background (threads or child processes), which also "
                "disturbs the baselines timed meanwhile")


__all__ = ["clock_check", "clock_gap", "flag", "idle_check", "policy_probe"]
