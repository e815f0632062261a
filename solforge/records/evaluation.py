"""The evaluation record: what the evaluator says about one solution on one problem.

Schema ``solforge.evaluation/1``. Every consumer (CLI tables, the ledger, agents, reports,
the RL reward, the CI gate) reads these models and nothing else. New optional fields may
be added within a schema version; renaming or removing one bumps the version.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field

from solforge.records.figures import best_baseline_ms, geomean

EVALUATION_SCHEMA = "solforge.evaluation/1"


class Status(str, Enum):
    """The SOL-ExecBench status vocabulary, in order of how early each is decided."""

    PASSED = "PASSED"
    COMPILE_ERROR = "COMPILE_ERROR"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIMEOUT = "TIMEOUT"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    REWARD_HACK = "REWARD_HACK"
    INVALID_REFERENCE = "INVALID_REFERENCE"


class Finding(BaseModel):
    """One piece of policy evidence: which rule, where, and why (``bench/policy/rules.py``).

    A finding on a passing record is information; under ``--policy strict`` it rejects
    the solution (``REWARD_HACK``). ``line`` is the solution's source line for static
    rules, ``workload`` the workload a dynamic rule observed.
    """

    rule: str
    flag: str
    message: str
    line: int | None = None
    workload: str | None = None

    def describe(self) -> str:
        where = f"line {self.line}: " if self.line else (
            f"workload {self.workload}: " if self.workload else "")
        return f"{self.flag} [{self.rule}] {where}{self.message}"


class WorkloadResult(BaseModel):
    """Per-workload numbers. Times are milliseconds; ``time_ms`` is device kernel time."""

    name: str
    visible: bool = True
    params: dict[str, Any] = Field(default_factory=dict)
    correct: bool = False
    status: Status | None = None
    message: str = ""
    trials: int = 0
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_ratio: float | None = None
    error_by_distribution: dict[str, list[float]] = Field(
        default_factory=dict, description="per input distribution of the trials: "
        "[max abs error, max rel error] over the trials drawn from it")
    golden_max_abs_error: float | None = Field(
        None, description="candidate against a float64 run of the reference, where affordable")
    reference_golden_max_abs_error: float | None = Field(
        None, description="the reference itself against its float64 run (the noise floor)")
    time_ms: float | None = Field(None, description="median device kernel time per call")
    latency_ms: float | None = Field(None, description="median per-call latency, device-wide sync")
    host_ms: float | None = Field(None, description="host wall clock per call over a batch")
    time_spread: float | None = Field(
        None, description="(p75 - p25) / median of the kernel times: the run's own noise")
    timed_calls: int = 0
    round_ms: list[float] = Field(
        default_factory=list, description="interleaved rounds (rounds > 1): the candidate's "
        "median kernel time of each round, in order")
    round_baseline_ms: dict[str, list[float]] = Field(
        default_factory=dict, description="interleaved rounds: per baseline (eager, "
        "compile) its median kernel time of each round, beside round_ms")
    idle_cpu_s: float | None = Field(
        None, description="CPU seconds the candidate's processes used while the runner had "
        "no request during this workload's timing (the background_work check)")
    idle_wall_s: float | None = Field(
        None, description="wall seconds of those idle windows")
    eager_ms: float | None = None
    compile_ms: float | None = None
    compile_within_tolerance: bool | None = Field(
        None, description="the compile baseline's own outputs pass the problem's tolerance "
        "(checked once per workload when it is compiled; None: not known). False: its time "
        "is kept, but it is not the best baseline")
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    kernels: list[str] = Field(default_factory=list, description="kernel names one call launched")
    flags: list[str] = Field(default_factory=list, description="anti-cheat flags of this workload")
    # speed of light (filled by solforge.sol)
    flops: float | None = None
    bytes: float | None = None
    sol_ms: float | None = None
    sol_floor_ms: float | None = None
    sol_compute_ms: float | None = None  # the compute term alone (cache-proof lower bound)
    sol_score: float | None = None
    bound: str | None = None
    sol_unit: str | None = Field(
        None, description="the unit(s) the tensor FLOPs were bounded at, the term taking "
        "longest first, e.g. 'tf32' or 'tf32+fp32' (None: no tensor FLOPs)")
    sol_unit_reason: str | None = Field(
        None, description="per part of the tensor work (op family and dtype): its unit and "
        "why, e.g. \"conv float32: tf32 (cuDNN fp32 conv: torch.backends.cudnn.conv."
        "fp32_precision='tf32' (PyTorch's default))\"")
    memory: MemoryPlan | None = None

    def note(self, text: str) -> None:
        """Add ``text`` to the message, once (a note found now and later read back from a
        cache is said once)."""
        if text not in self.message:
            self.message = (self.message + "; " + text).strip("; ")


class JudgeMemory(BaseModel):
    """The judge process's device memory around one evaluation (MiB; ``bench/judge/memory.py``).

    ``idle_before_mb`` is the level the judge started the evaluation from, after releasing
    everything of the one before (the GPU allocator's reserved bytes; on a CPU the live
    tensors); ``floor_mb`` the lowest idle level this judge has had; ``peak_mb`` the
    allocator's peak during the evaluation (GPU only). A judge whose idle level stays
    above its floor by more than the slack is replaced: ``replaced_before`` says this
    evaluation ran on a new judge for that reason."""

    pid: int | None = None
    floor_mb: float | None = None
    idle_before_mb: float | None = None
    live_tensors_before_mb: float | None = None
    peak_mb: float | None = None
    device_used_mb: float | None = Field(None, description="every process's use of the "
                                         "device when the evaluation ended")
    device_total_mb: float | None = None
    replaced_before: str = Field("", description="why the previous judge was replaced")


class MemoryPlan(BaseModel):
    """How one workload's device memory was planned and admitted (``admission.py``)."""

    estimate_mb: float | None = Field(None, description="footprint estimated before it ran: "
                                      "inputs times input sets in flight, weights, outputs, "
                                      "the float64 golden")
    measured_mb: float | None = Field(None, description="the estimate once the reference's "
                                      "and the candidate's first calls were measured")
    input_sets: int | None = Field(None, description="timing input sets in flight (fewer "
                                   "for large problems; fresh values and addresses per call "
                                   "either way)")
    waited_s: float = Field(0.0, description="seconds waited for room beside other "
                            "evaluations on the device")
    neighbours: int = Field(0, description="other evaluations admitted on the device while "
                            "this workload was")
    alone: bool = False
    inputs_mb: float | None = Field(None, description="one input set, counted on the meta device")
    weights_mb: float | None = Field(None, description="the reference's parameters and buffers")
    runner_peak_mb: float | None = Field(None, description="the candidate process's device "
                                         "memory peak, as it reported it")


class EvaluationRecord(BaseModel):
    """One solution on one problem: status, flags, per-workload results, geomeans."""

    schema_: str = Field(EVALUATION_SCHEMA, alias="schema")
    problem: str
    solution: str
    language: str = "pytorch"
    device: str = "cpu"
    status: Status
    flags: list[str] = Field(default_factory=list)
    findings: list[Finding] = Field(
        default_factory=list, description="policy evidence behind policy flags (policy.py)")
    message: str = ""
    workloads: list[WorkloadResult] = Field(default_factory=list)
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    sol_score: float | None = None
    policy: str = "default"
    held_out_included: bool = True
    duration_s: float | None = None
    # wall seconds per judge phase (starting, reference, candidate, timing, baseline, ...),
    # as the caller saw them: where an evaluation's time went
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    # seconds the runner reports for each of its operations (its own clock, so untrusted:
    # for finding where evaluation time goes, never for a verdict)
    runner_seconds: dict[str, float] = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    judge_memory: JudgeMemory | None = None
    retried_alone: str = Field("", description="the out-of-memory of a first attempt beside "
                               "other evaluations, after which this one ran alone")
    knobs: dict[str, str] = Field(
        default_factory=dict, description="the SOLFORGE_* settings that can change a verdict "
        "and were set in the judge's environment (solforge/env.py)")
    containment: str = Field("", description="'' when the candidate's runner had the "
                             "read-only filesystem view (bench/runner/fsview.py); else what "
                             "it had instead and why")
    judge_fault: str = Field("", description="how a first judge failed during this "
                             "evaluation (killed, or its CUDA context lost) before a new "
                             "judge ran it again; '' when none did")
    baseline_itself: str = Field(
        "", description="'eager' or 'compile' when the solution is that baseline's own "
        "program (the reference unchanged, or the reference compiled in the baseline's "
        "mode: the search agent's ``reference`` and ``compile`` candidates, marked on their "
        "final verdict); its speedup against the best baseline is then taken from the "
        "judge's timing of that baseline in the same rounds, not from a second timing of "
        "the same program (``speedup_vs_best``); '' otherwise")

    model_config = {"populate_by_name": True}

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EvaluationRecord:
        return cls.model_validate(data)

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED

    def finalize(self) -> EvaluationRecord:
        """Fill the problem-level geometric means from the workloads."""
        self.speedup_vs_eager = geomean([w.speedup_vs_eager for w in self.workloads])
        self.speedup_vs_compile = geomean([w.speedup_vs_compile for w in self.workloads])
        self.sol_score = geomean([w.sol_score for w in self.workloads])
        return self


def speedup_vs_best(record: EvaluationRecord | Mapping[str, Any]) -> float | None:
    """Geomean over a record's timed workloads of best(eager, compile) / its time (a
    compile baseline outside the problem's tolerance does not count); None when no
    workload has both. Takes the record or its JSON form (a ledger row).

    A record whose solution is a baseline's own program (``baseline_itself``) takes that
    baseline's time in place of its own: the reference kept as it is reads exactly 1.0
    where eager is the faster baseline, and compile's ratio to eager where compile is (a
    real shortfall still shows); two timings of one program differ by the noise alone
    (0.999x for KernelBench's ``51_Argmax`` kept as the reference, session 22)."""
    if isinstance(record, Mapping):
        workloads, itself = record.get("workloads", []), record.get("baseline_itself", "")
    else:
        workloads = [w.model_dump() for w in record.workloads]
        itself = record.baseline_itself
    ratios = []
    for w in workloads:
        base = best_baseline_ms(w.get("eager_ms"), w.get("compile_ms"),
                                w.get("compile_within_tolerance") is not False)
        own = w.get(f"{itself}_ms") if itself in ("eager", "compile") else None
        if base is not None and w.get("time_ms"):
            ratios.append(base / (own or w["time_ms"]))
    return geomean(ratios)
