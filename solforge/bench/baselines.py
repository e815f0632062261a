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
from typing import TYPE_CHECKING, Any

import torch

from solforge.bench import inputs as I
from solforge.bench.options import EvalOptions
from solforge.bench.records import WorkloadResult
from solforge.bench.sandbox import cache_dir
from solforge.bench.timing import Timing, TimingConfig, fresh_inputs, measure

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


def time_baselines(judge: Judge, problem: Problem, ref: Any, w: Workload, pool: list[list[Any]],
               seeds: list[int], cfg: TimingConfig, opts: EvalOptions,
               res: WorkloadResult) -> dict[str, dict]:
    """Time (or fetch cached) baselines; fill the result's eager/compile fields."""
    from solforge.bench.verdict import device_name

    device = torch.device(opts.device)
    cache = BaselineCache()
    found: dict[str, dict] = {}
    try:
        for kind in opts.baselines:
            label = "eager" if kind == "eager" else f"compile:{opts.compile_mode}"
            key = baseline_key(problem.content_hash, w.name, w.params_json(),
                               device_name(opts.device), label,
                               {"budget_ms": cfg.budget_ms, "max_calls": cfg.max_calls,
                                "threads": torch.get_num_threads()})
            hit = None if opts.fresh_baselines else cache.get(key)
            if hit is None:
                judge.phase("baseline", workload=w.name, kind=label)
                try:
                    hit = time_reference(ref, kind, opts, pool, seeds, cfg, device)
                except Exception as e:
                    note = f"{label} baseline failed: {type(e).__name__}: {str(e)[:300]}"
                    res.message = (res.message + "; " + note).strip("; ")
                    continue
                cache.put(key, hit)
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


def time_reference(ref: Any, kind: str, opts: EvalOptions, pool: list[list[Any]],
                    seeds: list[int], cfg: TimingConfig, device: torch.device) -> dict:
    fn = baseline_fn(ref, kind, opts)
    with torch.no_grad():
        t: Timing = measure(fn, pool, device, cfg, seeds=seeds)
        host = host_clock(fn, pool, seeds, device, t.median_latency_ms or 0.1)
    return {"kernel_ms": t.median_kernel_ms, "latency_ms": t.median_latency_ms,
            "host_ms": host, "spread": t.spread, "calls": len(t.kernel_ms),
            "kernels": t.kernels[:64], "measured_at": time.time()}


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

    def __init__(self, ref: Any, opts: EvalOptions, pool: list[list[Any]], cfg: TimingConfig,
                 device: torch.device) -> None:
        self.pool, self.cfg, self.device = pool, cfg, device
        self.fns: dict[str, Any] = {}
        self.lists: dict[str, dict[str, list[float]]] = {}
        self.errors: dict[str, str] = {}
        for kind in opts.baselines:
            try:
                self.fns[kind] = baseline_fn(ref, kind, opts)
            except Exception as e:
                self.errors[kind] = f"{type(e).__name__}: {str(e)[:300]}"

    def measure(self, seeds: list[int]) -> None:
        for kind, fn in list(self.fns.items()):
            try:
                with torch.no_grad():
                    t = measure(fn, self.pool, self.device, self.cfg, seeds=seeds)
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
