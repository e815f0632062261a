"""Baselines: eager and ``torch.compile`` times of references, measured once and cached.

The judge times the reference with the same function, inputs and seeds as the candidate
(:func:`time_baselines`), plus its own wall clock over a batch (:func:`host_clock`); a
re-measurement times fresh baselines round by round beside the candidate
(:class:`Interleaved`).

Keyed by problem content hash, workload (name and params), device name, library versions
(torch, triton), the baseline kind (``eager``, ``compile:default``, ...) and the timing
configuration, so a changed problem, card or library never reuses a stale figure. Stored
in SQLite (WAL) under the solforge cache directory, safe for several judges at once.

Not covered: invalidation when the machine's clocks or load change between runs; use
``--fresh-baselines`` (or a new cache directory) to force a new measurement.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from solforge.bench import inputs as I
from solforge.bench import slow_baselines
from solforge.bench.options import EvalOptions
from solforge.bench.records import WorkloadResult
from solforge.bench.sandbox import cache_dir
from solforge.bench.timing import RETAIN_BYTES, Timing, TimingConfig, fresh_inputs, measure

if TYPE_CHECKING:
    from solforge.bench.judge import Judge
    from solforge.problems.spec import Problem, Workload

BATCH_TARGET_MS = 60.0  # length of a wall-clock batch
BATCH_MAX_BYTES = 2 << 30


def library_versions() -> dict[str, str]:
    v = {"torch": torch.__version__, "cuda": str(torch.version.cuda or "none")}
    try:
        import triton

        v["triton"] = triton.__version__
    except Exception:
        v["triton"] = "none"
    return v


def baseline_key(problem_hash: str, workload: str, params: dict[str, Any], device: str,
                 kind: str, timing: dict[str, Any]) -> str:
    blob = json.dumps([problem_hash, workload, params, device, kind, library_versions(),
                       timing], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class BaselineCache:
    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path or cache_dir() / "baselines.sqlite")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS baselines (key TEXT PRIMARY KEY, value TEXT, "
            "created REAL)")

    def get(self, key: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT value FROM baselines WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        self.db.execute("INSERT OR REPLACE INTO baselines VALUES (?,?,?)",
                        (key, json.dumps(value), time.time()))

    def close(self) -> None:
        self.db.close()


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    ys = sorted(xs)
    m = len(ys) // 2
    return ys[m] if len(ys) % 2 else 0.5 * (ys[m - 1] + ys[m])


def _key(problem: Problem, w: Workload, opts: EvalOptions, label: str, cfg: TimingConfig
         ) -> str:
    from solforge.bench.verdict import device_name

    return baseline_key(problem.content_hash, w.name, w.params_json(),
                        device_name(opts.device), label,
                        {"budget_ms": cfg.budget_ms, "max_calls": cfg.max_calls,
                         "threads": torch.get_num_threads()})


def _label(kind: str, opts: EvalOptions) -> str:
    return "eager" if kind == "eager" else f"compile:{opts.compile_mode}"


def _unavailable_key(problem: Problem, w: Workload, opts: EvalOptions, label: str) -> str:
    """Where a baseline found unavailable is remembered: a property of the reference, the
    device and the libraries, not of a timing budget, so every timing configuration (an
    agent's short exploring budget, a re-measurement's rounds) and a fresh re-measurement
    read it too. On the H200 a fresh re-measurement otherwise spent the 90 s warm-up of a
    compile that never settles again, per workload, holding the device's slot."""
    from solforge.bench.verdict import device_name

    return baseline_key(problem.content_hash, w.name, w.params_json(),
                        device_name(opts.device), label, {"unavailable": True})


def known_unavailable(problem: Problem, w: Workload, opts: EvalOptions) -> dict[str, str]:
    """The baseline kinds of ``opts`` already found unavailable for this workload, with why
    (the cache's answer; empty when nothing is known, or when the user asked for fresh
    baselines: ``--fresh-baselines`` tries again)."""
    if opts.fresh_baselines:
        return {}
    found = cached_entries(opts, lambda label: _unavailable_key(problem, w, opts, label))
    return {kind: str(hit.get("unavailable", "")) for kind, hit in found.items()}


def cached_entries(opts: EvalOptions, key_of: Callable[[str], str]) -> dict[str, dict]:
    """Per baseline kind of ``opts``, the cache's entry under ``key_of(label)``, where it
    has one."""
    cache = BaselineCache()
    try:
        out = {}
        for kind in opts.baselines:
            hit = cache.get(key_of(_label(kind, opts)))
            if hit is not None:
                out[kind] = hit
        return out
    finally:
        cache.close()


def note_unavailable(res: WorkloadResult, opts: EvalOptions, known: dict[str, str]) -> None:
    """Say in the record which baselines are unavailable (found so before) and why."""
    for kind, why in known.items():
        _note(res, f"{_label(kind, opts)} baseline unavailable: {why}")


def missing_baselines(problem: Problem, w: Workload, cfg: TimingConfig, opts: EvalOptions,
                      fresh: bool = False) -> list[str]:
    """The baseline kinds this workload has no cached figure for, nor a verdict that the
    kind is unavailable (that one holds for fresh measurements too)."""
    unavailable = known_unavailable(problem, w, opts)
    kinds = [k for k in opts.baselines if k not in unavailable]
    if fresh or opts.fresh_baselines:
        slow = slow_baselines.too_slow(problem, w, opts)  # reused, not compiled again
        return [k for k in kinds if k not in slow]
    cache = BaselineCache()
    try:
        return [k for k in kinds
                if cache.get(_key(problem, w, opts, _label(k, opts), cfg)) is None]
    finally:
        cache.close()


def prepare_baselines(judge: Judge, problem: Problem, ref: Any, w: Workload,
                      pool: list[list[Any]], seeds: list[int], cfg: TimingConfig,
                      opts: EvalOptions, res: WorkloadResult, kinds: list[str]
                      ) -> dict[str, Any]:
    """The baselines ``kinds`` (those :func:`missing_baselines` found), compiled and
    warmed up ahead of timing.

    The caller holds the device's slot: the warm-up runs the reference's kernels. A
    reference that ``torch.compile`` cannot settle on (it recompiles on data-dependent
    values, a Python loop over a batch of lengths, say) once held an H200's slot for more
    than seven minutes while every other evaluator waited. So a compile baseline gets
    :data:`COMPILE_WARMUP_S` per workload to compile for each input set of the pool; past
    that, or when a second pass still compiles, it is recorded as unavailable (in the
    cache too, under a key of its own that every timing configuration and a fresh
    re-measurement read, so no later evaluation pays again; ``--fresh-baselines``
    retries) and the evaluation goes on.
    """
    out: dict[str, Any] = {}
    cache = BaselineCache()
    try:
        for kind in kinds:
            label = _label(kind, opts)
            if kind == "eager":
                out[kind] = ref
                continue
            judge.phase("baseline", workload=w.name, kind=label)
            t0 = time.monotonic()
            try:
                fn, why = warmed_compile(ref, opts, pool, seeds, torch.device(opts.device))
            except Exception as e:
                _note(res, f"{label} baseline failed: {type(e).__name__}: {str(e)[:300]}")
                continue
            if fn is None:
                _note(res, f"{label} baseline unavailable: {why}")
                # found now, fresh or not: it holds for every later measurement
                cache.put(_unavailable_key(problem, w, opts, label), {"unavailable": why})
                continue
            out[kind] = fn
            slow_baselines.remember(problem, w, opts, label, warmup_s=time.monotonic() - t0)
    finally:
        cache.close()
    return out


def _note(res: WorkloadResult, note: str) -> None:
    if note not in res.message:  # found now, then read back from the cache: said once
        res.message = (res.message + "; " + note).strip("; ")


COMPILE_WARMUP_S = 90.0  # compile time a compile baseline may spend on one workload


def warmed_compile(ref: Any, opts: EvalOptions, pool: list[list[Any]], seeds: list[int],
                   device: torch.device, budget_s: float = COMPILE_WARMUP_S
                   ) -> tuple[Any, str | None]:
    """``torch.compile(ref)`` run on every input set of the pool, twice: (fn, None) once
    a second pass compiles nothing new, else (None, why). Bounded by ``budget_s`` checked
    between calls (one call's compile can overrun it)."""
    from torch._dynamo.utils import counters

    fn = baseline_fn(ref, "compile", opts)
    t0 = time.monotonic()
    with torch.no_grad():
        for rnd in range(2):
            before = counters["stats"]["unique_graphs"]
            for i, args in enumerate(pool):
                fn(*fresh_inputs(args, seeds[i % len(seeds)] + 17 * (rnd + 1)))
                I.synchronize(device)
                spent = time.monotonic() - t0
                if spent > budget_s:
                    return None, (f"torch.compile was still compiling after {spent:.0f} s "
                                  f"(limit {budget_s:.0f} s per workload)")
            if rnd == 1 and counters["stats"]["unique_graphs"] > before:
                return None, ("torch.compile compiled new graphs for inputs it had already "
                              "seen: its time would include compilation")
    return fn, None


def time_baselines(judge: Judge, problem: Problem, ref: Any, w: Workload, pool: list[list[Any]],
               seeds: list[int], cfg: TimingConfig, opts: EvalOptions,
               res: WorkloadResult, prepared: dict[str, Any] | None = None) -> dict[str, dict]:
    """Time (or fetch cached) baselines; fill the result's eager/compile fields.

    ``prepared`` holds the functions :func:`prepare_baselines` made for the kinds without
    a cached figure; a kind in neither is unavailable (its note is already recorded).
    """
    device = torch.device(opts.device)
    prepared = {} if prepared is None else prepared
    cache = BaselineCache()
    found: dict[str, dict] = {}
    unavailable = known_unavailable(problem, w, opts)
    note_unavailable(res, opts, unavailable)
    try:
        for kind in opts.baselines:
            if kind in unavailable:
                continue
            label = _label(kind, opts)
            key = _key(problem, w, opts, label, cfg)
            hit = None if opts.fresh_baselines else cache.get(key)
            if hit is not None and hit.get("unavailable"):  # kept there by earlier versions
                _note(res, f"{label} baseline unavailable: {hit['unavailable']}")
                continue
            if hit is None:
                fn = prepared.get(kind)
                if fn is None:
                    continue
                judge.phase("baseline", workload=w.name, kind=label)
                try:
                    hit = time_fn(fn, pool, seeds, cfg, device)
                except Exception as e:
                    _note(res, f"{label} baseline failed: {type(e).__name__}: {str(e)[:300]}")
                    continue
                cache.put(key, hit)
                if kind != "eager":  # the figure a slow warm-up's re-measurement reuses
                    slow_baselines.remember(problem, w, opts, label, figure=hit)
            found[kind] = hit
            if kind == "eager":
                res.eager_ms = hit["kernel_ms"]
            else:
                res.compile_ms = hit["kernel_ms"]
    finally:
        cache.close()
    return found


def baseline_fn(ref: Any, kind: str, opts: EvalOptions) -> Any:
    """The reference as baseline ``kind`` runs it: eager, or freshly ``torch.compile``d."""
    if kind == "eager":
        return ref
    if kind != "compile":
        raise ValueError(f"unknown baseline {kind!r}; use eager or compile")
    from torch import _dynamo

    _dynamo.reset()  # a fresh graph per workload: no recompile limit, no stale guards
    return torch.compile(ref, mode=None if opts.compile_mode == "default" else opts.compile_mode)


def time_fn(fn: Any, pool: list[list[Any]], seeds: list[int], cfg: TimingConfig,
            device: torch.device) -> dict:
    """One baseline's figures: the timing loop's kernel and latency times, and the judge's
    wall clock over a batch."""
    with torch.no_grad():
        t: Timing = measure(fn, pool, device, cfg, seeds=seeds, retain_bytes=_kept(device))
        host = host_clock(fn, pool, seeds, device, t.median_latency_ms or 0.1)
    return {"kernel_ms": t.median_kernel_ms, "latency_ms": t.median_latency_ms,
            "host_ms": host, "spread": t.spread, "calls": len(t.kernel_ms),
            "kernels": t.kernels[:64], "measured_at": time.time()}


def _kept(device: torch.device) -> int:
    """Outputs a baseline's timing keeps: on a CPU as many as a candidate's timing keeps
    (``timing.RETAIN_BYTES``: allocation is part of a CPU call's time); none on a GPU,
    where kernel time leaves allocation out and kept outputs would only take memory."""
    return RETAIN_BYTES if device.type == "cpu" else 0


def batch_size(pool: list[list[Any]], latency_ms: float) -> int:
    per = sum(x.numel() * x.element_size() for x in pool[0] if isinstance(x, torch.Tensor))
    by_mem = max(2, BATCH_MAX_BYTES // max(per, 1))
    return int(max(3, min(200, by_mem, BATCH_TARGET_MS / max(latency_ms, 0.005))))


def host_clock(fn: Any, pool: list[list[Any]], seeds: list[int], device: torch.device,
                latency_ms: float) -> float:
    """Wall clock per call over back-to-back calls on prepared fresh inputs (trusted side)."""
    m = batch_size(pool, latency_ms)
    batch = [fresh_inputs(pool[i % len(pool)], seeds[i % len(seeds)] + 3) for i in range(m)]
    I.synchronize(device)
    t0 = time.perf_counter()
    for args in batch:
        fn(*args)
    I.synchronize(device)
    return (time.perf_counter() - t0) * 1e3 / m


class Interleaved:
    """Fresh baselines measured round by round beside the candidate (never cached)."""

    def __init__(self, prepared: dict[str, Any], pool: list[list[Any]], cfg: TimingConfig,
                 device: torch.device) -> None:
        """``prepared``: :func:`prepare_baselines` of every available kind (unavailable kinds
        are absent; their notes are recorded already)."""
        self.pool, self.cfg, self.device = pool, cfg, device
        self.fns: dict[str, Any] = dict(prepared)
        self.lists: dict[str, dict[str, list[float]]] = {}
        self.errors: dict[str, str] = {}

    def measure(self, seeds: list[int]) -> None:
        for kind, fn in list(self.fns.items()):
            try:
                with torch.no_grad():
                    t = measure(fn, self.pool, self.device, self.cfg, seeds=seeds,
                                retain_bytes=_kept(self.device))
                    host = host_clock(fn, self.pool, seeds, self.device,
                                       t.median_latency_ms or 0.1)
            except Exception as e:
                self.errors[kind] = f"{type(e).__name__}: {str(e)[:300]}"
                del self.fns[kind]
                continue
            acc = self.lists.setdefault(kind, {"kernel": [], "latency": [], "host": []})
            acc["kernel"] += t.kernel_ms
            acc["latency"] += t.latency_ms
            acc["host"].append(host)

    def results(self, res: WorkloadResult) -> dict[str, dict]:
        out = {}
        for kind, acc in self.lists.items():
            out[kind] = {"kernel_ms": _median(acc["kernel"]),
                         "latency_ms": _median(acc["latency"]),
                         "host_ms": _median(acc["host"])}
            if kind == "eager":
                res.eager_ms = out[kind]["kernel_ms"]
            else:
                res.compile_ms = out[kind]["kernel_ms"]
        for kind, err in self.errors.items():
            res.message = (res.message + f"; {kind} baseline failed: {err}").strip("; ")
        return out
