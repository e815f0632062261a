"""The baseline cache: eager and ``torch.compile`` times of references, measured once.

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
from typing import Any

from solforge.bench.sandbox import cache_dir


def library_versions() -> dict[str, str]:
    import torch

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
