"""Speed of light: necessary work, device ceilings, the roofline time and the SOL score.

The evaluator's path through this package, per workload::

    work = count_work(model, inputs).with_declared(problem.declared_flops(w),
                                                   problem.declared_bytes(w))
    profile = load_profile(device_name)          # calibrated > datasheet table > None
    annotate(result, work, profile, problem.unit, baseline_time(result, "best"))
    # units: the fastest of the problem's, and what PyTorch's settings give each op (units.py)

(``hooks.annotate_workload`` does this for the evaluator, and marks a faster-than-light time
``REWARD_HACK``), and per suite, ``summarize(records, device)``. ``solforge calibrate``
measures a device (``calibrate``) and stores its profile (``save_profile``) for
``load_profile`` to prefer.
"""

from solforge.sol.annotate import BASELINES, annotate, baseline_time, workload_score
from solforge.sol.calibrate import calibrate
from solforge.sol.devices import DEVICE_TABLE, DeviceSpec, match_device
from solforge.sol.profile import (
    DeviceProfile,
    load_profile,
    profile_path,
    resolve_device_name,
    save_profile,
)
from solforge.sol.roofline import (
    TensorTerm,
    compute_time,
    faster_than_sol,
    sol_score,
    sol_time,
    tensor_peak,
    tensor_terms,
    tensor_unit,
)
from solforge.sol.summary import record_sol_score, summarize
from solforge.sol.units import FAMILIES, MathFlags, library_units, read_math_flags
from solforge.sol.work import TensorPart, Work, count_work

__all__ = [
    "BASELINES", "DEVICE_TABLE", "FAMILIES", "DeviceProfile", "DeviceSpec", "MathFlags",
    "TensorPart", "TensorTerm", "Work", "annotate", "baseline_time", "calibrate",
    "compute_time", "count_work", "faster_than_sol", "library_units", "load_profile",
    "match_device", "profile_path", "read_math_flags", "record_sol_score",
    "resolve_device_name", "save_profile", "sol_score", "sol_time",
    "summarize", "tensor_peak", "tensor_terms", "tensor_unit", "workload_score",
]
