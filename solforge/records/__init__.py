"""The formats every layer reads: the evaluation record, the evaluation options, and the
figures derived from them. They sit at the bottom of the package (they import nothing of
solforge's but each other), so the judge, the planner, agents, reports and the CLI all
read one definition.

Not covered: the run ledger's tables (``orchestrate/ledger.py``) and the problem format
(``problems/spec.py``), which are formats of their own layers.
"""

from solforge.records.evaluation import (
    EVALUATION_SCHEMA,
    EvaluationRecord,
    Finding,
    JudgeMemory,
    MemoryPlan,
    Status,
    WorkloadResult,
    speedup_vs_best,
)
from solforge.records.figures import best_baseline_ms, geomean, median
from solforge.records.options import EvalOptions

__all__ = ["EVALUATION_SCHEMA", "EvalOptions", "EvaluationRecord", "Finding", "JudgeMemory",
           "MemoryPlan", "Status", "WorkloadResult", "best_baseline_ms", "geomean", "median",
           "speedup_vs_best"]
