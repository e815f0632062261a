"""The memory side of one evaluation: each workload's planned footprint, its admission, its
re-sizing from measured peaks, and an out-of-memory charged to whoever caused it.

Before a workload is built its footprint is estimated and the number of timing input sets
chosen (``admission.py``); a workload that cannot fit the device even alone with one input
set is the reference's (``INVALID_REFERENCE``), said then instead of an out-of-memory in
the middle of its evaluation; the evaluation then waits, not on the candidate's time,
until the workload fits beside the others on the device (the phase :data:`MEMORY_WAIT`),
and after its first trials it is sized again from the real peaks of the judge and the
runner. An out-of-memory on the device alone is the candidate's (``RUNTIME_ERROR``) or the
reference's (``INVALID_REFERENCE``), with its figures in the record's message.

Not covered: the ledger of tickets and the estimates themselves (``admission.py``), the
judge's own memory release and measurement (``memory.py``), running an evaluation again
alone after an out-of-memory beside others (``pipeline.py``), and a device out-of-memory
of the judge's own work for a workload (``workload.py``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from solforge.bench.judge import admission, memory
from solforge.bench.judge.context import WorkloadContext
from solforge.bench.judge.state import Judge
from solforge.bench.measure import inputs as I
from solforge.bench.measure.slots import not_the_candidates_time
from solforge.problems.spec import Workload
from solforge.records import EvaluationRecord, MemoryPlan, Status, WorkloadResult

# The phase an evaluation is in while it waits for room on the device (``admission.py``)
MEMORY_WAIT = "memory_wait"


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


def _plan(judge: Judge, module: Any, w: Workload, alone: bool
          ) -> tuple[MemoryPlan, admission.Sizes]:
    """The workload's estimated footprint and input sets, before any of it is built."""
    try:
        sizes = admission.estimate(module, w.params, I.init_args(module, w.params))
    except Exception:  # noqa: BLE001 - a constructor argument that fails shows up later
        sizes = admission.Sizes()
    sets = admission.input_sets(sizes, judge.ledger.capacity)
    plan = MemoryPlan(estimate_mb=round(admission.footprint(sizes, sets), 1),
                      input_sets=sets, alone=alone, inputs_mb=_r(sizes.inputs_mb),
                      weights_mb=_r(sizes.weights_mb))
    return plan, sizes


def _refused(judge: Judge, w: Workload, plan: MemoryPlan, sizes: admission.Sizes
             ) -> WorkloadResult | None:
    """The workload's result when it cannot fit the device even alone with one input set
    (``admission.refusal``): the reference's, said before anything of it is built."""
    why = admission.refusal(sizes, judge.ledger.capacity)
    if why is None:
        return None
    return WorkloadResult(name=w.name, visible=w.visible, params=w.params_json(),
                          status=Status.INVALID_REFERENCE, message=why, correct=False,
                          memory=plan)


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


def _measured(ctx: WorkloadContext) -> None:
    """Size the workload again from the first trials' real peaks (judge and runner), its
    outputs (known now) and the later phases' estimates (``admission.measured_footprint``),
    and update its ticket: to less than the estimate when the outputs turned out smaller
    than the inputs they were taken to be."""
    judge, plan, runner = ctx.judge, ctx.plan, ctx.runner
    jp = judge.memory.workload_peak()
    if jp is None:
        return
    sizes, sets = ctx.sizes, plan.input_sets or 1
    if sizes.inputs_mb is None:  # the trials held an input set and a copy of it
        sizes = dataclasses.replace(sizes, inputs_mb=jp / 2)
    plan.measured_mb = round(admission.measured_footprint(sizes, sets, jp,
                                                          runner.peak_mb or 0.0), 1)
    judge.ledger.resize(ctx.ticket, max(admission.footprint(sizes, sets), plan.measured_mb))
