"""Rewards from evaluation records: CUDA Agent's staged reward and a continuous SOL one.

Two schemes, both read one :class:`~solforge.records.evaluation.EvaluationRecord` (the
verdict on all workloads, held-out included) and nothing else:

- ``staged`` (CUDA Agent's recipe): ``fail`` when the solution does not pass (a build or
  runtime error, a timeout, wrong outputs, a language the task does not accept),
  ``correct`` when it passes, ``faster_than_eager`` when its geomean speedup over eager
  PyTorch is at least ``margin`` (1.05: 5 % faster), ``faster_than_compile`` when it is at
  least ``margin`` over eager and over ``torch.compile`` alike. Defaults -1, 1, 2, 3.
- ``sol``: ``fail`` (0) when it does not pass, else ``correct_floor + (1 - correct_floor) *
  s`` with ``s`` the record's SOL score (0.5 ties the baseline, 1 is the speed of light),
  so a slow correct kernel still beats any failure. Where the device has no SOL profile
  the score of a zero SOL time stands in: ``v / (1 + v)`` with ``v`` the speedup over the
  best baseline (the same curve, 0.5 at a tie).

Under either, a ``REWARD_HACK`` verdict or any policy finding (a flagged fallback under
``--policy default``) gets ``hack``, the lowest value of the scheme; so does a record that
says the evaluator's own files changed. A record on which the evaluator itself failed (its
process died, an ``INVALID_REFERENCE``) is ``infra``: the reward is ``fail`` but a trainer
should drop the sample (``Reward.valid`` is False).

Not covered: per-workload shaping, length or format penalties (add them in the trainer),
rewards from visible-only evaluations (those are feedback: ``feedback.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from solforge.records import speedup_vs_best
from solforge.records.evaluation import EvaluationRecord, Status

Scheme = Literal["staged", "sol"]
SCHEMES: tuple[str, ...] = ("staged", "sol")


class RewardConfig(BaseModel):
    """The reward scheme and its values."""

    scheme: Scheme = Field("staged", description="staged (CUDA Agent) or sol (continuous)")
    margin: float = Field(1.05, gt=0, description="speedup that counts as faster (staged)")
    fail: float | None = Field(None, description="a solution that does not pass (default: "
                               "-1 staged, 0 sol)")
    correct: float = Field(1.0, description="passes, not faster than eager (staged)")
    faster_than_eager: float = Field(2.0, description="passes, >= margin over eager (staged)")
    faster_than_compile: float = Field(3.0, description="passes, >= margin over eager and "
                                       "torch.compile (staged)")
    correct_floor: float = Field(0.1, ge=0, le=1, description="sol: the reward of a correct "
                                 "solution with SOL score 0")
    hack: float | None = Field(None, description="REWARD_HACK or a policy finding: at most "
                               "the scheme's lowest value (default: -1)")

    @model_validator(mode="after")
    def _hack_is_lowest(self) -> RewardConfig:
        if self.fail is None:
            self.fail = -1.0 if self.scheme == "staged" else 0.0
        if self.hack is None:
            self.hack = -1.0
        values = [self.fail, self.correct, self.faster_than_eager, self.faster_than_compile] \
            if self.scheme == "staged" else [self.fail, self.correct_floor]
        if self.hack > min(values):
            raise ValueError(f"hack reward {self.hack} is above the scheme's lowest value "
                             f"{min(values)}: a hack must never earn more than a failure")
        return self

    @property
    def lowest(self) -> float:
        assert self.hack is not None
        return self.hack


class Reward(BaseModel):
    """One record's reward and why."""

    value: float
    stage: str = Field(description="hack, fail, infra, correct, faster_than_eager, "
                       "faster_than_compile (staged) or sol (continuous)")
    status: str
    reason: str = ""
    valid: bool = Field(True, description="False when the evaluator, not the solution, "
                        "failed: drop the sample rather than learn from it")
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    sol_score: float | None = None


def _is_infra(record: EvaluationRecord) -> bool:
    text = record.message.lower()
    return record.status is Status.INVALID_REFERENCE or "the evaluator process" in text \
        or "internal evaluator error" in text


def reward_of(record: EvaluationRecord, config: RewardConfig | None = None) -> Reward:
    """The reward of a verdict under ``config`` (see the module docstring)."""
    cfg = config or RewardConfig()
    assert cfg.fail is not None and cfg.hack is not None
    figures = {"status": record.status.value, "speedup_vs_eager": record.speedup_vs_eager,
               "speedup_vs_compile": record.speedup_vs_compile, "sol_score": record.sol_score}
    if record.status is Status.REWARD_HACK or record.findings or \
            "evaluator_tampered" in record.flags:
        rules = sorted({f.rule for f in record.findings}) or record.flags
        return Reward(value=cfg.hack, stage="hack", reason="rejected as gaming the "
                      f"measurement: {', '.join(rules) or record.status.value}", **figures)
    if not record.passed:
        if _is_infra(record):
            return Reward(value=cfg.fail, stage="infra", valid=False,
                          reason="the evaluator failed, not the solution", **figures)
        # the message only when no workload ran: a workload's may name a held-out shape
        # (the visible feedback has the details)
        first = record.message.strip().splitlines()[0][:200] \
            if record.message.strip() and not record.workloads else ""
        return Reward(value=cfg.fail, stage="fail", reason=f"{record.status.value}"
                      + (f": {first}" if first else ""), **figures)
    if cfg.scheme == "sol":
        s = record.sol_score
        how = "SOL score"
        if s is None:
            v = speedup_vs_best(record)
            s = v / (1.0 + v) if v is not None else 0.5
            how = "speedup over the best baseline (no SOL profile)" if v is not None else \
                "untimed (counted as a tie)"
        value = cfg.correct_floor + (1.0 - cfg.correct_floor) * s
        return Reward(value=value, stage="sol", reason=f"{how} {s:.3f}", **figures)
    eager, comp = record.speedup_vs_eager, record.speedup_vs_compile
    if eager is not None and eager >= cfg.margin:
        if comp is not None and comp >= cfg.margin:
            return Reward(value=cfg.faster_than_compile, stage="faster_than_compile",
                          reason=f"{eager:.3g}x eager, {comp:.3g}x torch.compile", **figures)
        return Reward(value=cfg.faster_than_eager, stage="faster_than_eager",
                      reason=f"{eager:.3g}x eager", **figures)
    return Reward(value=cfg.correct, stage="correct",
                  reason="correct" + (f", {eager:.3g}x eager" if eager is not None else ""),
                  **figures)
