"""One workload's evaluation as the judge's phases share it: the problem and its module,
the built reference, the workload, the candidate's runner, the options, the deadline and
seed, the result being filled, the memory plan and admission ticket, the policy's
findings and the workload's baselines.

Built by ``pipeline.py`` once per workload and handed to the correctness trials
(``correctness.py``), the policy probe (``probes.py``) and the timing phase
(``performance.py``) instead of a dozen arguments each.

Not covered: anything that spans workloads (the evaluation record, the runner's start-up,
the build step): those stay in the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from solforge.bench.baselines import WorkloadBaselines
from solforge.bench.judge.admission import Sizes, Ticket
from solforge.bench.judge.state import Judge
from solforge.bench.policy.solution import Language
from solforge.bench.runner.handle import RunnerHandle
from solforge.problems.spec import Problem, Workload
from solforge.records import EvalOptions, Finding, MemoryPlan, WorkloadResult


@dataclass
class WorkloadContext:
    judge: Judge
    problem: Problem
    module: Any                 # the problem's file, imported in the judge
    workload: Workload
    timed: bool                 # False: checked for correctness only (a small cpu workload)
    runner: RunnerHandle
    opts: EvalOptions
    deadline: float             # on ``slots.clock``: the candidate's time only
    seed: int
    res: WorkloadResult
    plan: MemoryPlan
    ticket: Ticket
    lang: Language | None       # None: the evaluator's own reference-as-solution (no policy)
    sizes: Sizes = field(default_factory=Sizes)  # what the memory plan was made of
    found: list[Finding] = field(default_factory=list)  # the policy's dynamic findings
    ref: Any = None             # the reference model, built on the device
    baselines: WorkloadBaselines = field(init=False)

    def __post_init__(self) -> None:
        self.baselines = WorkloadBaselines(self.problem, self.workload, self.opts,
                                           self.judge.phase)

    @property
    def device(self) -> torch.device:
        return torch.device(self.opts.device)

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """A request to the candidate's runner under the evaluation's deadline."""
        return self.runner.ask(request, self.deadline)
