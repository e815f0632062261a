"""What a policy may read of a verdict: the visible workloads' part, as the LLM worker's
``evaluate`` tool reports it (``agents/report.py``).

Held-out workloads decide the reward; their shapes and numbers must not reach the policy,
or it learns them. :func:`visible_feedback` keeps the verdict's status, flags and visible
workloads, and when the verdict was decided by a held-out workload it says only that (a
held-out workload failed, with its status), not the message that would name the shape.

Not covered: hiding what a solution can learn by running itself (its own prints reach
nobody: the runner's output goes to the judge only).
"""

from __future__ import annotations

from solforge.agents.report import evaluation_report
from solforge.records.evaluation import EvaluationRecord


def visible_feedback(record: EvaluationRecord, title: str = "verdict") -> str:
    """The report of ``record`` with its held-out workloads removed (see module doc)."""
    held = [w for w in record.workloads if not w.visible]
    if not held:
        return evaluation_report(record, title=title)
    seen = record.model_copy(deep=True)
    seen.workloads = [w for w in seen.workloads if w.visible]
    failed_held = [w for w in held if not w.correct and w.status is not None]
    if not record.passed and failed_held and all(w.correct for w in seen.workloads):
        seen.message = (f"a held-out workload failed ({failed_held[0].status.value}); the "
                        "visible ones passed: the solution does not generalise to other "
                        "shapes (check tails, masks and shape assumptions)")
    else:
        for w in held:  # a message naming a held-out workload says nothing more than that
            if w.name and w.name in seen.message:
                seen.message = seen.message.replace(w.name, "<held-out>")
    report = evaluation_report(seen, title=title)
    return report + f"\n({len(held)} held-out workload(s) counted in the verdict, not shown)"
