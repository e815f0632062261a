"""The built-in search agent: candidate solutions from a registry of generators (compile
modes, CUDA graphs, TF32, channels-last and cuDNN autotuning, library kernels substituted
into the reference's traced graph), judged by the evaluator, the best re-measured.

``run_search_worker(run, problem, evaluator, SearchConfig())`` searches one problem;
``SearchWorker`` is the planner's worker kind ``search`` around it (``agent.py``). Generators and patterns are open to plug-ins through
:func:`register_generator` / :func:`register_pattern` (and the
``solforge.search_generators`` entry point).
"""

from solforge.search.agent import SearchConfig, SearchWorker, run_search_worker
from solforge.search.align import trace_reference
from solforge.search.candidates import (
    LEVERS,
    Candidate,
    SearchContext,
    generate_candidates,
    register_generator,
    search_context,
)
from solforge.search.match import (
    Match,
    Pattern,
    find_matches,
    register_pattern,
    substitute,
)
from solforge.search.trace import TracedReference, TraceError

__all__ = [
    "LEVERS", "Candidate", "Match", "Pattern", "SearchConfig", "SearchContext",
    "SearchWorker", "TraceError", "TracedReference", "find_matches", "generate_candidates",
    "register_generator", "register_pattern", "run_search_worker", "search_context",
    "substitute", "trace_reference",
]
