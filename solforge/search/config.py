"""What one search worker may spend on one problem, and the choices it makes
(:class:`SearchConfig`). Not covered: budgets across problems (the planner's)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from solforge.bench import TimingConfig


class SearchConfig(BaseModel):
    """Budgets and choices of one search worker on one problem."""

    worker: str = Field("search", description="worker name in the ledger")
    role: str = Field("optimizer", description="the role its attempts are recorded under")
    families: list[str] | None = Field(
        None, description="generators to use (None: every registered one)")
    max_candidates: int | None = Field(
        None, ge=1, description="candidates evaluated per problem (None: 12 on a GPU, 6 on "
        "a CPU)")
    gpu_seconds: float = Field(
        1800.0, gt=0, description="wall seconds of the candidates' own evaluation phases per "
        "problem (trials, policy probe, timing; not the runner's start-up nor the "
        "baselines' preparation), on the evaluation device (a CPU's seconds on a CPU)")
    compile_seconds: float = Field(
        900.0, gt=0, description="seconds the evaluator spends building, loading and "
        "checking candidates (compilation included) per problem")
    family_failures: int = Field(
        2, ge=1, description="failed candidates after which a family's others are skipped")
    verdict_tries: int = Field(
        2, ge=1, description="passing candidates given the final verdict (all workloads, "
        "re-measured), best first, until one passes it")
    rounds: int = Field(3, ge=1, description="interleaved rounds of the final verdict's "
                        "re-measurement")
    explore_budget_ms: float = Field(
        250.0, gt=0, description="timed-loop budget per workload while exploring (never "
        "more than the evaluator's own): exploring only ranks candidates, which needs less "
        "precision than the reported figure; the final verdict re-measures the winner with "
        "the evaluator's full budget")
    explore_max_calls: int = Field(
        50, ge=TimingConfig.min_calls, description="timed calls per workload while "
        "exploring, at most (never more than the evaluator's own; at least the timing's "
        "minimum of calls): ranking needs less precision than the reported figure, which "
        "the final verdict measures with the evaluator's full count")
    graph_candidates: int = Field(
        1, ge=0, description="CUDA-graph candidates evaluated per problem, the replay of "
        "the best candidate so far first: the ranking figure is device kernel time, where "
        "a replay's copies in and out count and its gain (no launch gaps) does not show, so "
        "a graph candidate is rarely kept and each costs the device's slot "
        "(benchmarks/results/2026-12-01-h200-s5, 2026-12-02-h200-s8)")
    slow_compile_s: float = Field(
        45.0, gt=0, description="compiled candidates are skipped when preparing the "
        "reference's baselines took longer (torch.compile recompiling on data-dependent "
        "values) or its compile baseline was found unavailable: a compiled candidate "
        "recompiles as long at each correctness trial, inside the device's slot")
    oom_retries: int = Field(
        1, ge=0, description="evaluations a candidate that ran out of GPU memory gets again "
        "(another evaluator sharing the GPU may have held the memory)")
    sol_done: float = Field(
        0.9, gt=0, le=1.0, description="the exploration ends once a passing candidate's "
        "SOL score (geomean over the visible workloads) reaches this: the gap to the "
        "hardware's limit is closed, more candidates would only spend the device's slot")
    roofline_done: float = Field(
        0.95, gt=0, le=1.0, description="the exploration ends once a passing candidate as "
        "fast as the best baseline (within 1%) runs at this fraction of its speed-of-light "
        "bound (budget.roofline_fraction over the visible workloads): no program is more "
        "than 1/fraction faster. A reference at its bound scores 0.5 (as fast as its "
        "baselines) however near it is, so the SOL score alone never ended the search of "
        "KernelBench's sum and mean over a dim, at 98.5% of DRAM bandwidth "
        "(benchmarks/results/2026-12-07-h100-s33)")
    budget_by_gap: bool = Field(
        True, description="scale ``gpu_seconds`` and ``compile_seconds`` by the reference's "
        "measured gap to speed of light: (1 - T_SOL / T) / 0.5, clamped to [0.5, 2.0] (a "
        "reference at half its bound keeps the budgets as set; one at 10% gets 1.8x; one at "
        "90% or nearer half), and for a problem taken from a model by its share of the "
        "model's time (share / 0.1, clamped to [0.5, 2.0]); no bound (no ceilings, no work "
        "counts): the SOL score stands in, or the budgets as set (budget.gap_scale)")
    resume: bool = Field(True, description="reuse earlier search attempts and evaluations "
                         "of the same source on this problem (a later unit goes on where "
                         "an earlier one stopped)")
