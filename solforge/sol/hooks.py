"""The evaluator's entry into this package: annotate one timed workload with its SOL.

``solforge.bench.judge.performance`` calls :func:`count_workload` while it still holds the device's
slot (counting runs the reference once on the device: its kernels would time-slice with
another evaluator's measurement), then :func:`annotate_workload` after a workload's timing
and baselines. It counts the reference's work on the timing inputs (declared counts win), loads
the device's ceilings, fills the SOL fields (the units follow PyTorch's math settings in the
judge, those its baselines ran under: ``units.py``), and turns a physically impossible time into
``REWARD_HACK`` with the flag ``faster_than_sol`` (EVALUATION.md: a candidate measured below
T_SOL is flagged, never rewarded).

Not covered: anything the evaluator itself decides (which workloads are timed, the record's
status from its workloads). A reference whose work cannot be counted leaves SOL unknown
with the reason in the message; it never fails the evaluation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from solforge.records.evaluation import Status, WorkloadResult
from solforge.sol.annotate import annotate, baseline_time
from solforge.sol.profile import load_profile
from solforge.sol.roofline import faster_than_sol
from solforge.sol.work import Work, count_work

if TYPE_CHECKING:
    from solforge.records.options import EvalOptions
    from solforge.problems.spec import Problem, Workload

FASTER_THAN_SOL = "faster_than_sol"


def count_workload(problem: Problem, ref: Any, workload: Workload, inputs: list[Any]
                   ) -> Work | str:
    """The reference's work on ``inputs`` (declared counts win), or why it could not be
    counted. Runs the reference once on the inputs' device."""
    try:
        return count_work(ref, inputs).with_declared(problem.declared_flops(workload),
                                                     problem.declared_bytes(workload))
    except Exception as e:  # noqa: BLE001  (a reference the counter cannot run: SOL unknown)
        return f"{type(e).__name__}: {e}"


def annotate_workload(problem: Problem, ref: Any, workload: Workload, inputs: list[Any],
                      opts: EvalOptions, res: WorkloadResult,
                      work: Work | str | None = None) -> None:
    """Fill ``res``'s SOL fields; mark it REWARD_HACK if its time is faster than light.
    ``work`` is :func:`count_workload`'s answer when the caller counted already."""
    if work is None:
        work = count_workload(problem, ref, workload, inputs)
    if isinstance(work, str):
        res.message = (f"{res.message}; " if res.message else "") + (
            f"SOL unknown: counting the reference failed ({work})")
        return
    profile = load_profile(opts.device)
    annotate(res, work, profile, problem.unit, baseline_time(res, opts.sol_baseline))
    if profile is not None and faster_than_sol(res.time_ms, res.sol_ms, work.bytes,
                                               profile.llc_bytes, res.sol_compute_ms):
        if FASTER_THAN_SOL not in res.flags:
            res.flags.append(FASTER_THAN_SOL)
        res.status = Status.REWARD_HACK
        res.correct = False
