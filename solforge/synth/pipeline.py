"""One batch: draw, dedupe, filter, until ``n`` problems are accepted or the draws run out.

Draws are numbered from 0; draw ``i`` is :func:`compose.draw` of ``(seed, i)``, so the
accepted set depends only on the seed, the options and the references (a candidate near a
reference or an earlier accepted one is a ``duplicate``; see ``dedupe.py``), and on the
filters' verdicts, which are deterministic except the eager-time window (a CPU's window is
wide enough that only a runaway candidate meets it). With an LLM, the first ``llm_n``
problems are asked of the model (each request once, at most ``2 * llm_n`` requests) and
the catalogue fills the rest.

Not covered: parallel screening (one candidate at a time; a compile check is seconds on
a CPU), and resuming a batch that was stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from solforge.synth.compose import draw
from solforge.synth.dedupe import (
    THRESHOLD,
    Deduper,
    builtin_files,
    fingerprint,
    reference_files,
)
from solforge.synth.filters import FilterConfig, Tally, check_source, check_source_isolated
from solforge.synth.write import Accepted

REPORT_SCHEMA = "solforge.synth-report/1"


@dataclass(frozen=True)
class SynthConfig:
    """What one batch is made of."""

    n: int                                          # problems wanted
    seed: int = 0
    ops: list[str] | None = None                    # None: the whole catalogue
    max_ops: int = 5                                # ops per composition, 1 to 5
    references: list[Path] = field(default_factory=list)   # KernelBench / earlier output
    builtin_reference: bool = True                  # dedupe against the built-in corpus
    threshold: float = THRESHOLD                    # AST similarity above which: duplicate
    filters: FilterConfig = field(default_factory=FilterConfig)
    max_draws: int | None = None                    # None: 50 * n
    llm_n: int = 0                                  # problems asked of the LLM first


@dataclass
class Batch:
    """The accepted problems, the tally per reason, and the draws made."""

    accepted: list[Accepted] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    draws: int = 0
    llm_requests: int = 0

    def report(self, config: SynthConfig) -> dict:
        """The batch's report as written (no times, paths or messages: reproducible)."""
        return {"schema": REPORT_SCHEMA, "seed": config.seed, "requested": config.n,
                "accepted": len(self.accepted), "draws": self.draws,
                "llm_requests": self.llm_requests, "max_ops": config.max_ops,
                "ops": config.ops or "all", "compile_check": config.filters.compile_check,
                "device": config.filters.device, "threshold": config.threshold,
                "references": len(config.references) + int(config.builtin_reference),
                "counts": dict(sorted(self.tally.counts.items()))}


OnDraw = Callable[[int, str, int], None]   # (draw, reason, accepted so far)


def references(config: SynthConfig) -> Deduper:
    """The deduper loaded with the built-in corpus and every ``--reference`` folder."""
    d = Deduper(threshold=config.threshold)
    if config.builtin_reference:
        d.add_files(builtin_files())
    for folder in config.references:
        d.add_files(reference_files(folder))
    return d


def _screen(batch: Batch, dedupe: Deduper, name: str, code: str, meta: dict,
            config: SynthConfig, isolated: bool = False) -> str:
    """The reason for one candidate (``ok``: kept, and added to the references)."""
    try:
        fp = fingerprint(code)
    except SyntaxError as e:
        batch.tally.add("load_error", str(e), name)
        return "load_error"
    near = dedupe.match(fp)
    if near is not None:
        batch.tally.add("duplicate", f"similarity {near[1]:.3f} to {near[0]}", name)
        return "duplicate"
    verdict = (check_source_isolated(code, meta, config.filters) if isolated
               else check_source(code, meta, config.filters))
    batch.tally.add(verdict.reason, verdict.detail, name)
    if verdict.ok:
        dedupe.references.append((name, fp))
    return verdict.reason


def synthesize(config: SynthConfig, on_draw: OnDraw | None = None, client=None) -> Batch:
    """Make one batch (``client``: a model client, for ``config.llm_n`` LLM problems)."""
    if config.n < 1:
        raise ValueError(f"--n must be at least 1, got {config.n}")
    dedupe = references(config)
    batch = Batch()
    if config.llm_n and client is not None:
        _llm_part(batch, dedupe, config, client, on_draw)
    limit = config.max_draws if config.max_draws is not None else 50 * config.n
    i = 0
    while len(batch.accepted) < config.n and i < limit:
        c = draw(config.seed, i, config.ops, config.max_ops)
        i += 1
        if c is None:
            batch.tally.add("no_applicable_op", "no op accepts the drawn input")
            reason = "no_applicable_op"
        else:
            code = c.code()
            reason = _screen(batch, dedupe, c.name, code, c.meta(), config)
            if reason == "ok":
                batch.accepted.append(Accepted(c.name, c.ops, code, c.problem_text()))
        if on_draw:
            on_draw(i, reason, len(batch.accepted))
    batch.draws = i
    return batch


def _llm_part(batch: Batch, dedupe: Deduper, config: SynthConfig, client, on_draw) -> None:
    from solforge.agents.errors import ModelError
    from solforge.synth.llm import ReplyError, ask, pick_ops

    wanted = min(config.llm_n, config.n)
    for k in range(2 * wanted):
        if len(batch.accepted) >= wanted:
            break
        ops = pick_ops(config.seed, k, config.ops, config.max_ops)
        batch.llm_requests += 1
        try:
            d = ask(client, config.seed, k, ops)
        except ReplyError as e:
            batch.tally.add("llm_unusable", str(e), f"llm request {k}")
            reason = "llm_unusable"
        except ModelError as e:
            batch.tally.add("llm_error", str(e), f"llm request {k}")
            reason = "llm_error"
        else:
            # a model's code runs in a process of its own: a hang or a crash is a reason
            reason = _screen(batch, dedupe, d.name, d.code, d.meta, config, isolated=True)
            if reason == "ok":
                batch.accepted.append(Accepted(d.name, d.ops, d.code, d.problem_text(), "llm"))
        if on_draw:
            on_draw(k + 1, reason, len(batch.accepted))
