"""Where measured baselines are kept, and under which keys.

Keyed by problem content hash, workload (name and params), device name, library versions
(torch, triton), the baseline kind (``eager``, ``compile:default``, ...) and the timing
configuration, so a changed problem, card or library never reuses a stale figure. Stored
in SQLite (WAL) under the solforge cache directory, safe for several judges at once. The
same file holds the facts about a baseline that hold for every timing configuration
(found unavailable, its warm-up time: :func:`unavailable_key`, ``slow.py``) and the
reference's counted work (``work_counts.py``), each under a key of its own.

Not covered: invalidation when the machine's clocks or load change between runs; use
``--fresh-baselines`` (or a new cache directory) to force a new measurement.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from solforge import env
from solforge.bench.measure.machine import device_name, library_versions
from solforge.records import EvalOptions, WorkloadResult

if TYPE_CHECKING:
    from solforge.bench.measure.timing import TimingConfig
    from solforge.problems.spec import Problem, Workload


def baseline_key(problem_hash: str, workload: str, params: dict[str, Any], device: str,
                 kind: str, timing: dict[str, Any]) -> str:
    blob = json.dumps([problem_hash, workload, params, device, kind, library_versions(),
                       timing], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class BaselineCache:
    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path or env.cache_dir() / "baselines.sqlite")
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


def label(kind: str, opts: EvalOptions) -> str:
    """A baseline kind as keys and records name it: ``eager``, ``compile:<mode>``."""
    return "eager" if kind == "eager" else f"compile:{opts.compile_mode}"


def workload_key(problem: Problem, w: Workload, opts: EvalOptions, name: str,
                 facts: dict[str, Any]) -> str:
    """The key of figure ``name`` of this workload on this device, for ``facts`` (a timing
    configuration, or the kind of fact kept)."""
    return baseline_key(problem.content_hash, w.name, w.params_json(),
                        device_name(opts.device), name, facts)


def figure_key(problem: Problem, w: Workload, opts: EvalOptions, name: str,
               cfg: TimingConfig) -> str:
    """A measured figure's key: it holds for one timing configuration and thread count."""
    return workload_key(problem, w, opts, name,
                        {"budget_ms": cfg.budget_ms, "max_calls": cfg.max_calls,
                         "threads": torch.get_num_threads()})


def unavailable_key(problem: Problem, w: Workload, opts: EvalOptions, name: str) -> str:
    """Where a baseline found unavailable is remembered: a property of the reference, the
    device and the libraries, not of a timing budget, so every timing configuration (an
    agent's short exploring budget, a re-measurement's rounds) and a fresh re-measurement
    read it too: a compile that never settles costs its warm-up limit once per workload,
    not once per evaluation."""
    return workload_key(problem, w, opts, name, {"unavailable": True})


def tolerance_key(problem: Problem, w: Workload, opts: EvalOptions, name: str) -> str:
    """Where a compile baseline's agreement with the reference, at the problem's own
    tolerance, is remembered: like unavailability, a property of the reference, the device
    and the libraries, read by every timing configuration. Judged since session 29 on a
    candidate's correctness trials, not one input set: the key says so, and a verdict
    kept under the old key is not read."""
    return workload_key(problem, w, opts, name, {"within_tolerance": "trials"})


def cached_entries(opts: EvalOptions, key_of: Callable[[str], str]) -> dict[str, dict]:
    """Per baseline kind of ``opts``, the cache's entry under ``key_of(label)``, where it
    has one."""
    cache = BaselineCache()
    try:
        out = {}
        for kind in opts.baselines:
            hit = cache.get(key_of(label(kind, opts)))
            if hit is not None:
                out[kind] = hit
        return out
    finally:
        cache.close()


def known_unavailable(problem: Problem, w: Workload, opts: EvalOptions) -> dict[str, str]:
    """The baseline kinds of ``opts`` already found unavailable for this workload, with why
    (the cache's answer; empty when nothing is known, or when the user asked for fresh
    baselines: ``--fresh-baselines`` tries again)."""
    if opts.fresh_baselines:
        return {}
    found = cached_entries(opts, lambda name: unavailable_key(problem, w, opts, name))
    return {kind: str(hit.get("unavailable", "")) for kind, hit in found.items()}


def note_unavailable(res: WorkloadResult, opts: EvalOptions, known: dict[str, str]) -> None:
    """Say in the record which baselines are unavailable (found so before) and why."""
    for kind, why in known.items():
        res.note(f"{label(kind, opts)} baseline unavailable: {why}")
