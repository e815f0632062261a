"""How close an extracted module already runs to its speed of light, inside the model.

``solforge extract`` times every captured call in the live model (``capture.profile_modules``).
For a problem file it has just written, :func:`roofline_fraction` builds the problem's
reference (its ``Model`` and ``get_inputs``, as the judge does) on the extraction device, counts
each workload's work once (``sol.work.count_work``: FLOPs and bytes) and bounds it with the
device's ceilings (``sol.profile.load_profile``: a stored calibration, else the datasheet). The
fraction is the bound over the time measured in the model, summed over the workloads weighted
by their calls::

    fraction = sum(max(T_SOL, launch floor) * calls) / sum(measured ms of those calls)

1.0 says the model already runs the module at the roofline; 0.1, that a kernel could be up to
10x as fast. The planner ranks a problem nobody tried yet by ``share * (1 - fraction)`` (the
share of model time a perfect kernel would give back), so a norm at 10% of its bound goes
before a GEMM at 90% of its own even when the GEMM's share is larger.

Not covered: backward problems (their reference recomputes the forward, so its counted work
is not the backward's alone); the fraction is an estimate before any search: the measured times come from
one profiled pass (hooks around each call, so a call of a few microseconds reads high), and a
module whose work cannot be counted, or a device with no ceilings, gives None (the planner
then ranks by share alone). It says nothing of how much of that headroom a kernel can reach.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from solforge.bench.measure.inputs import build_model, init_args, make_inputs
from solforge.problems.loader import import_file
from solforge.problems.spec import problem_from_module
from solforge.sol.profile import load_profile
from solforge.sol.roofline import sol_time
from solforge.sol.work import count_work


def roofline_fraction(path: Path, device: torch.device, measured_ms: dict[str, float],
                      calls: dict[str, int]) -> dict[str, Any] | None:
    """``{"fraction", "sol_ms", "measured_ms", "device", "workloads": {name: {...}}}`` for the
    problem file at ``path`` (module docstring), or None when the device has no ceilings,
    nothing was measured or no workload's work could be counted (``"error"`` says why)."""
    total_ms = sum(measured_ms.get(k, 0.0) for k in calls)
    if total_ms <= 0:
        return None
    profile = load_profile(str(device) if device.type == "cuda" else "cpu")
    if profile is None:
        return None
    # one import: the spec (workloads, precision) read from the module that builds them
    module = import_file(path, prefix="solforge_extract_roofline")
    problem = problem_from_module(module, Path(path))
    per: dict[str, dict[str, float]] = {}
    errors: list[str] = []
    for w in problem.workloads:
        if w.name not in calls or measured_ms.get(w.name, 0.0) <= 0:
            continue
        try:
            model = build_model(module.Model, init_args(module, w.params), device,
                                eval_mode=True)
            inputs = make_inputs(module, w.params, seed=0, distribution="normal",
                                 device=device)
            work = count_work(model, inputs)
            sol_ms, bound = sol_time(work, profile, problem.unit)
        except Exception as e:  # noqa: BLE001  (an uncountable module: no estimate for it)
            errors.append(f"{w.name}: {type(e).__name__}: {e}")
            continue
        finally:
            model = inputs = None
        floor = profile.empty_kernel_ms or 0.0
        per[w.name] = {"sol_ms": round(max(sol_ms, floor), 6), "bound": bound,
                       "calls": calls[w.name], "measured_ms": round(measured_ms[w.name], 6)}
    if not per:
        return {"fraction": None, "error": "; ".join(errors) or "no workload measured"}
    sol_total = sum(v["sol_ms"] * v["calls"] for v in per.values())
    measured = sum(v["measured_ms"] for v in per.values())
    # six significant digits, not six decimals: a small model on a CPU sits at 1e-4 of its
    # bound, where six decimals kept two digits (0.00013 for 0.000130371)
    return {"fraction": float(f"{min(1.0, sol_total / measured):.6g}"),
            "sol_ms": round(sol_total, 6), "measured_ms": round(measured, 6),
            "device": profile.name, "workloads": per,
            **({"error": "; ".join(errors)} if errors else {})}
