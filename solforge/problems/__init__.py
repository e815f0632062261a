"""Problems: the KernelBench-format reference, its metadata and workloads, and the corpus."""

from solforge.problems import gen
from solforge.problems.loader import (
    builtin_problems,
    find_builtin,
    load_problem,
    register_corpus,
    resolve_target,
)
from solforge.problems.precision import PrecisionClass, get_precision, register_precision
from solforge.problems.spec import Problem, ProblemError, Workload

__all__ = [
    "gen", "Problem", "ProblemError", "Workload", "PrecisionClass", "get_precision",
    "register_precision", "load_problem", "builtin_problems", "find_builtin",
    "resolve_target", "register_corpus",
]
