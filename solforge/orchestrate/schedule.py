"""What the planner knows of each problem, and how it ranks them: :class:`ProblemState`
(units run, best so far, whether it converged or was surveyed) and :func:`headroom`.

Headroom, the rule the planner picks the next problem by (``planner.py``'s docstring says
why each part is there):

- untried: ``2 x weight x gap``, the gap ``1 - f`` (at least ``UNTRIED_FLOOR``) where ``f``
  is the fraction of speed of light the survey measured (the best of the reference and
  its baselines) or, without a survey, the extraction's ``model_roofline``; 1 with
  neither, so an unmeasured problem comes before every tried one;
- tried, with a SOL score: ``weight x max(1 - SOL score, 1 - best speedup vs the best
  baseline)`` (slower than a baseline is headroom whatever the score says);
- tried, no SOL: ``weight / best speedup``.

The weight is 1, or for a problem ``solforge extract`` wrote, its share of the model's
time. Not covered: a problem's cost (a slow-to-evaluate problem ranks as a fast one).
"""

from __future__ import annotations

from dataclasses import dataclass

from solforge.problems.spec import Problem

# an untried problem keeps at least this fraction of its weight as headroom: the survey's
# and the extraction's estimates come from one evaluation or one profiled pass, not a search
UNTRIED_FLOOR = 0.1


def weight_of(p: Problem) -> float:
    """1, or the problem's share of its model's time (Amdahl) when it was extracted."""
    return 1.0 if p.model_share is None else p.model_share


@dataclass
class ProblemState:
    problem: Problem
    weight: float = 1.0
    units: int = 0
    stale: int = 0
    best_speedup: float | None = None
    best_sol: float | None = None
    converged: str = ""         # why, once it is
    busy: bool = False
    open_until: int = 0         # reopened: not ended before this many units
    surveyed: bool = False      # its reference judged by the survey (or a unit ran)
    survey_roofline: float | None = None  # the best it had, as a fraction of SOL
    floored: bool = False       # given its one unit after a budget ended the run


def headroom(ps: ProblemState) -> float:
    """How much ``ps`` has left to give (see the module docstring)."""
    if ps.best_speedup is None:
        roof = ps.survey_roofline if ps.survey_roofline is not None \
            else ps.problem.model_roofline
        gap = 1.0 if roof is None else max(UNTRIED_FLOOR, 1.0 - roof)
        return ps.weight * 2.0 * gap
    if ps.best_sol is not None:
        behind = max(0.0, 1.0 - ps.best_speedup)
        return ps.weight * max(0.0, 1.0 - ps.best_sol, behind)
    return ps.weight / max(ps.best_speedup, 1e-6)
