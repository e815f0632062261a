"""Reading a run for people: the self-contained HTML report (``solforge report``) and the
live dashboard (``solforge dashboard``), both from one :class:`RunView` of the ledger.

Not covered: the CI gate (``solforge.gate``), writing to a run (the report and the dashboard
open the ledger read-only).
"""

from solforge.orchestrate.locate import Located, LocateError, locate
from solforge.report.view import ProblemView, RunView, build_view

__all__ = ["LocateError", "Located", "ProblemView", "RunView", "build_view", "locate"]
