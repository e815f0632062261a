"""Evaluation options: one pydantic model, passed from the CLI (or an agent) to the judge."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator


class EvalOptions(BaseModel):
    """How one evaluation is run. Every field has a default a user can trust."""

    device: str = Field("cpu", description="cpu, cuda or cuda:N")
    timeout_s: float = Field(300.0, description="wall-clock limit for the candidate's part")
    workloads: str | list[str] = Field(
        "all", description="'all' (the verdict), 'visible' (what agents see), or names")
    trials: int = Field(5, ge=1, description="correctness trials per workload, fresh inputs each")
    seed: int | None = Field(None, description="base seed of the trials; None: fresh each run")
    timing: bool = Field(True, description="measure time (False: correctness only)")
    baselines: list[str] = Field(
        default_factory=lambda: ["eager", "compile"],
        description="reference baselines to time: eager, compile")
    compile_mode: str = Field("default", description="torch.compile mode of the baseline")
    fresh_baselines: bool = Field(False, description="ignore cached baseline times")
    rounds: int = Field(1, ge=1, description="interleaved rounds of candidate and fresh "
                        "baselines (>1: the re-measurement of a winner)")
    budget_ms: float = Field(0.0, description="timed-loop budget per workload (0: by device)")
    max_calls: int = Field(200, description="timed calls per workload, at most")
    min_calls: int = Field(10, ge=1, description="timed calls per workload, at least (when "
                           "it exceeds max_calls it wins): fewer give a cheaper, noisier "
                           "figure, for calls that take seconds (Triton's interpreter on a "
                           "CPU) where only correctness matters")
    policy: str = Field("default", description="default (flag) or strict (reject) fallbacks")
    languages: list[str] | None = Field(None, description="languages that count (None: all)")
    memory_mb: int = Field(16384, description="host memory limit of the candidate")
    cpu_threads: int = Field(1, ge=1, description="intra-op threads on a CPU device, for the "
                             "candidate and the reference alike (several threads on a small "
                             "CPU make tiny ops 4x slower at random: thread wake-ups)")
    sol_baseline: str = Field("best", description="T_b of the SOL score: eager, compile, best")
    compile_failed: dict[str, str] = Field(
        default_factory=dict,
        description="workload name -> message: where the compile baseline's own program, "
        "judged as a candidate in an earlier evaluation of this problem, failed the "
        "correctness trials (an agent passes its compile candidate's record): the compile "
        "figure is kept there but is not the best baseline")

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        if v not in ("default", "strict"):
            raise ValueError("policy is 'default' (flag fallbacks) or 'strict' (reject them)")
        return v

    def timing_budget_ms(self) -> float:
        if self.budget_ms > 0:
            return self.budget_ms
        return 300.0 if self.device == "cpu" else 1000.0
