"""A workload's outcome as the judge records it, and the runner's outputs it may keep.

Small helpers both halves of a workload's verdict use (``bench/judge/correctness.py``, ``bench/judge/performance.py``): set
a failing status and its message, record a runner's failure or a hack's flag, copy what
the runner sent before using it, what the judge sends it, and tell whether inputs came
back unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

from solforge.bench.measure.compare import same_outputs
from solforge.bench.runner.handle import RunnerFailure
from solforge.records.evaluation import Status, WorkloadResult


def fail(res: WorkloadResult, status: Status | str, message: str) -> Status:
    res.status = Status(status)
    res.message = message.strip()[:6000]
    res.correct = False
    return res.status


def runner_failed(res: WorkloadResult, e: RunnerFailure) -> Status:
    if e.flag and e.flag not in res.flags:
        res.flags.append(e.flag)
    return fail(res, e.status, e.message)


def hacked(res: WorkloadResult, flag: str, message: str) -> Status:
    if flag not in res.flags:
        res.flags.append(flag)
    return fail(res, Status.REWARD_HACK, message)


def owned(xs: list[Any]) -> list[Any]:
    """Copies of what the runner sent: CUDA IPC views stay mapped to its memory."""
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


def for_runner(xs: list[Any], device: torch.device) -> list[Any]:
    """What the judge sends the runner of its own tensors: on a GPU a copy (the runner
    maps the judge's memory over CUDA IPC and could write to it); on a CPU the tensors
    themselves, since the channel sends their bytes (``runner/channel.py``)."""
    if device.type == "cuda":
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
    return list(xs)


def unchanged(before: list[Any], after: list[Any]) -> bool:
    """True when every input tensor still holds what the judge put in it."""
    pairs = [(a, b) for a, b in zip(before, after)
             if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)]
    return all(same_outputs(a, b.to(a.device)) for a, b in pairs)
