"""Speed-of-light fields of a workload result, and the baseline they are scored against.

``annotate`` fills ``flops``, ``bytes``, ``sol_ms``, ``sol_floor_ms``, ``sol_score``, ``bound``,
and ``sol_unit`` with ``sol_unit_reason`` (the unit each part of the tensor work was bounded
at, and why: ``roofline.tensor_terms``) of a :class:`~solforge.records.evaluation.WorkloadResult`.
The score is taken against T_SOL' = max(sol_ms, sol_floor_ms): the floor is the device's
empty-kernel time, so a decode-sized workload whose roofline is a few nanoseconds is scored
against something a real launch can reach. ``bound`` names the roofline term that wins, not
the floor.

Baselines (T_b): ``eager``, ``compile``, ``best`` (the faster of the two, the default), or a
mapping of workload name to a stored time from an earlier run ("optimized PyTorch").

Not covered: deciding the record's status. A result faster than light gets score 0 and a
note in its message here; marking the record ``REWARD_HACK`` is the evaluator's call.
"""

from __future__ import annotations

from collections.abc import Mapping

from solforge.records.evaluation import WorkloadResult
from solforge.problems.precision import PrecisionClass
from solforge.sol.profile import DeviceProfile
from solforge.sol.roofline import (
    compute_time,
    faster_than_sol,
    sol_score,
    sol_time,
    tensor_terms,
)
from solforge.sol.units import MathFlags, read_math_flags
from solforge.sol.work import Work

Baseline = str | Mapping[str, float]
BASELINES = ("eager", "compile", "best")


def baseline_time(result: WorkloadResult, baseline: Baseline = "best") -> float | None:
    """T_b for ``result`` under ``baseline`` (None when that time was not measured)."""
    if isinstance(baseline, Mapping):
        t = baseline.get(result.name)
        return float(t) if t is not None else None
    if baseline == "eager":
        return result.eager_ms
    if baseline == "compile":
        return result.compile_ms
    if baseline == "best":
        # a compile baseline outside the problem's tolerance is no bar for a correct one
        compile_ms = result.compile_ms if result.compile_within_tolerance is not False else None
        known = [t for t in (result.eager_ms, compile_ms) if t is not None]
        return min(known) if known else None
    raise ValueError(f"unknown baseline {baseline!r}; use one of {BASELINES} or a mapping of "
                     f"workload name to milliseconds")


def workload_score(result: WorkloadResult, t_b: float | None, llc_bytes: int | None
                   ) -> float | None:
    """The SOL score of an annotated result against baseline time ``t_b``: 0 when the result
    is incorrect or faster than light, None when its SOL, its time or ``t_b`` is unknown."""
    if result.sol_ms is None:
        return None
    if not result.correct:
        return 0.0
    if result.time_ms is None or t_b is None:
        return None
    if faster_than_sol(result.time_ms, result.sol_ms, result.bytes, llc_bytes,
                       result.sol_compute_ms):
        return 0.0
    t_sol = max(result.sol_ms, result.sol_floor_ms or 0.0)
    return sol_score(result.time_ms, t_b, t_sol)


def annotate(result: WorkloadResult, work: Work | None, profile: DeviceProfile | None,
             precision: PrecisionClass | str, baseline_ms: float | None,
             flags: MathFlags | None = None) -> WorkloadResult:
    """Fill the SOL fields of ``result`` in place and return it.

    ``flops``/``bytes`` are filled whenever ``work`` is known (they do not depend on the
    device); the SOL fields stay None, with the reason appended to ``message``, when the
    work or the device's ceilings are unknown. ``flags``: PyTorch's math settings the units
    follow (``units.py``), read now if None (in the judge: the settings the baselines ran
    under).
    """
    if work is None:
        _note(result, "SOL unknown: the work of this workload could not be counted")
        return result
    result.flops, result.bytes = work.flops, work.bytes
    if profile is None:
        _note(result, "SOL unknown: no ceilings for this device (run `solforge calibrate`)")
        return result
    flags = flags or read_math_flags()
    try:
        result.sol_ms, result.bound = sol_time(work, profile, precision, flags)
        terms = sorted(tensor_terms(work, profile, precision, flags), key=lambda t: -t.ms)
    except ValueError as e:  # a profile that lacks the rate this work needs
        _note(result, f"SOL unknown: {e}")
        return result
    if terms:
        result.sol_unit = "+".join(dict.fromkeys(t.unit for t in terms))
        result.sol_unit_reason = "; ".join(f"{t.what}: {t.unit} ({t.why})" for t in terms)
    result.sol_floor_ms = profile.empty_kernel_ms
    result.sol_compute_ms = compute_time(work, profile, precision, flags)
    result.sol_score = workload_score(result, baseline_ms, profile.llc_bytes)
    if faster_than_sol(result.time_ms, result.sol_ms, work.bytes, profile.llc_bytes,
                       result.sol_compute_ms):
        _note(result, f"faster than the speed of light: {result.time_ms:.4g} ms against a "
              f"roofline of {result.sol_ms:.4g} ms ({result.bound}-bound); the count or the "
              f"timing is wrong, or the result is a hack")
    return result


def _note(result: WorkloadResult, text: str) -> None:
    result.message = f"{result.message}; {text}" if result.message else text
