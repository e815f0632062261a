"""An evaluator that never evaluates the same thing twice within a run.

Workers call ``evaluate(problem, solution_path, language, **overrides)`` as on a plain
:class:`~solforge.bench.evaluator.Evaluator`. This wrapper keys each call on the problem,
the solution file's content, the language and the options that change a verdict, and keeps
every finished record in the run's ledger (table ``evalcache``). A run resumed after a
crash regenerates the same candidates and gets their finished verdicts back at once: only
the evaluation that was in flight when the run died is redone. A run resumed by a newer
solforge, whose judge code differs (``judge/build.py``), judges everything again.

Re-measurements (``rounds`` > 1) are never served from the cache: a fresh figure is their
point; nor are records about the evaluator rather than the solution (its process died, its
own files changed). Not covered: two workers evaluating the same source at the same moment (both run;
the second result wins the cache entry).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from solforge.bench import Evaluator
from solforge.bench.judge.build import judge_build
from solforge.orchestrate.ledger import Ledger
from solforge.problems.spec import Problem
from solforge.records.evaluation import EvaluationRecord
from solforge.records.options import EvalOptions

# options that do not change what a verdict says (only how fast it is reached or shown)
_IRRELEVANT = {"timeout_s"}


def _verdict_of_the_solution(record: EvaluationRecord) -> bool:
    """False for records that say something about the evaluator, not the solution (its
    process died, it found its own files changed): those are never served again."""
    if "evaluator_tampered" in record.flags:
        return False
    text = record.message.lower()
    return not ("the evaluator process" in text or "internal evaluator error" in text)


class CachedEvaluator:
    """Wraps an :class:`Evaluator`; same methods, plus ``hits``/``misses`` counters."""

    def __init__(self, evaluator: Evaluator, ledger: Ledger) -> None:
        self.inner = evaluator
        self.ledger = ledger
        self.hits = 0
        self.misses = 0

    @property
    def options(self) -> EvalOptions:
        return self.inner.options

    def _key(self, problem: Problem | str | Path, solution: str | Path, language: str | None,
             overrides: dict[str, Any]) -> str:
        opts = self.inner.options.model_copy(update=overrides) if overrides else \
            self.inner.options
        relevant = {k: v for k, v in opts.model_dump(mode="json").items()
                    if k not in _IRRELEVANT}
        name = problem.name if isinstance(problem, Problem) else str(problem)
        phash = problem.content_hash if isinstance(problem, Problem) else ""
        source = hashlib.sha256(Path(solution).read_bytes()).hexdigest()
        # the judge's own code: a record of an older judge is not served (judge/build.py)
        blob = json.dumps([name, phash, source, language, relevant, judge_build()],
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def evaluate(self, problem: Problem | str | Path, solution: str | Path,
                 language: str | None = None, **overrides: Any) -> EvaluationRecord:
        fresh = overrides.get("rounds", self.inner.options.rounds) > 1
        key = None if fresh else self._key(problem, solution, language, overrides)
        if key is not None:
            found = self.ledger.cached_evaluation(key)
            if found is not None:
                self.hits += 1
                return EvaluationRecord.from_json(found)
        self.misses += 1
        record = self.inner.evaluate(problem, solution, language, **overrides)
        if key is not None and _verdict_of_the_solution(record):
            self.ledger.cache_evaluation(key, record.to_json())
        return record

    def profile(self, problem: Problem | str | Path, solution: str | Path,
                language: str | None = None, **overrides: Any) -> dict[str, Any]:
        return self.inner.profile(problem, solution, language, **overrides)

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> CachedEvaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
