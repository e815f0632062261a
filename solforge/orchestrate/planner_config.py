"""The planner's settings, as a format: how it spreads work (``PlannerConfig``) and the
limits of a whole run (``Budgets``). ``planner.py`` reads them; the CLI and the run's
spec write them.

Not covered: per-problem budgets (a problem's units are bounded by ``max_units`` and
``patience`` only).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class Budgets(BaseModel):
    """Limits for a whole run; 0 turns one off."""

    wall_s: float = Field(0.0, ge=0, description="seconds since the run (re)started")
    device_s: float = Field(0.0, ge=0, description="seconds of evaluations on GPU devices")
    tokens: int = Field(0, ge=0, description="model tokens over all workers")
    cost_usd: float = Field(0.0, ge=0, description="model cost over all workers")
    attempts: int = Field(0, ge=0, description="candidates over all problems")


# the floor window's least length by default (``PlannerConfig.floor_s``): a floor unit of
# a large problem (its compile baseline and a final verdict) takes a minute or two
FLOOR_MIN_S = 120.0


class PlannerConfig(BaseModel):
    """How the planner spreads work."""

    agents: list[str] = Field(default_factory=lambda: ["search"],
                              description="worker kinds, cycled over the workers")
    workers: int = Field(1, ge=1)
    devices: list[str] = Field(default_factory=lambda: ["cpu"])
    roles: list[str] = Field(default_factory=lambda: ["optimizer"],
                             description="roles per problem, in turn (LLM workers)")
    converge_sol: float = Field(0.95, description="a SOL score that ends a problem")
    patience: int = Field(2, ge=1, description="units without 1% gain that end a problem")
    max_units: int = Field(3, ge=1, description="units per problem, at most")
    reopen: list[str] = Field(default_factory=list,
                              description="problems given one more unit whatever ended "
                                          "them (a resumed run, after solforge gained "
                                          "candidates or kernels for them)")
    unit_timeout_s: float = Field(0.0, ge=0, description="a unit longer is stalled (0: off)")
    survey: bool = Field(True, description="with more problems than workers, judge every "
                         "problem's reference first (workers that can: the search) and "
                         "search the problems furthest from their speed of light first")
    floor_s: float | None = Field(None, ge=0, description="after a budget ended, how long "
                                  "(seconds) surveyed problems no unit reached still get "
                                  "their floor unit; none: half the wall budget, at least "
                                  "FLOOR_MIN_S, no limit without a wall budget; 0: no floor "
                                  "units")
    final_rounds: int = Field(3, ge=0, description="interleaved rounds of the final check "
                              "(0: no final verification)")
    budgets: Budgets = Field(default_factory=Budgets)
    backend: str = Field("local", description="where judges run: local (judge processes "
                         "here) or ray (one judge actor per GPU of a Ray cluster; "
                         "orchestrate/backend.py)")
    address: str | None = Field(None, description="the Ray cluster to join (auto, "
                                "ray://host:10001); none: a Ray instance started here")


def unknown_reopened(reopen: list[str], names: list[str]) -> str:
    """What is wrong with ``PlannerConfig.reopen`` for a run of the problems ``names``, or
    "" when every problem to reopen is one of them."""
    unknown = [r for r in reopen if r not in names]
    if not unknown:
        return ""
    return (f"cannot reopen {', '.join(unknown)}: not a problem of this run "
            f"(its problems: {', '.join(names)})")
