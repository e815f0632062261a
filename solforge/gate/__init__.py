"""The CI gate (``solforge ci``): kept kernels judged again on fresh seeds and timed in
interleaved rounds beside fresh baselines; a wrong kernel or a slowdown beyond the measured
noise fails. ``baseline.py`` is the reviewed file's format and figures, ``kept.py`` finds
the kernels, ``check.py`` measures and compares, ``outputs.py`` writes JUnit and markdown.

Not covered: reading or drawing runs (``solforge.report``), choosing which kernels to keep
(the run's ledger did).
"""

from solforge.gate.baseline import (
           BaselineError,
           CiBaseline,
           read_baseline,
           write_baseline,
)
from solforge.gate.check import (
           DEFAULT_ROUNDS,
           GateReport,
           Outcome,
           run_gate,
           updated_baseline,
)
from solforge.gate.kept import kept_kernels
from solforge.gate.outputs import markdown, write_outputs

__all__ = ["DEFAULT_ROUNDS", "BaselineError", "CiBaseline", "GateReport", "Outcome",
           "kept_kernels", "markdown", "read_baseline", "run_gate", "updated_baseline",
           "write_baseline", "write_outputs"]
