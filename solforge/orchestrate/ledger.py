"""The run's ledger: one SQLite file (WAL) that keeps everything a run did.

Tables (``SCHEMA_VERSION`` in ``meta``):

- ``meta``: key/value: schema version, the run spec, the run status.
- ``problems``: the run's problems, their weight and state (pending, active, converged,
  exhausted, failed).
- ``attempts``: every candidate: source, language, parent attempt, agent, role, worker,
  the agent's stated reasoning, the levers it used.
- ``evaluations``: the full evaluation record of an attempt (``kind``: ``visible`` for an
  agent's own check, ``full`` for a verdict on all workloads, ``final`` for the re-measured
  winner), with the figures the planner sorts by pulled out into columns.
- ``work``: units of work handed to workers (queued, running, done, failed), so a crashed
  run resumes without redoing finished work.
- ``usage``: model calls' tokens and cost, per worker and problem.
- ``events``: a timestamped log (worker started, budget spent, ...).
- ``evalcache``: finished verdicts by content key (``evalcache.py``), so a resumed run
  does not redo them.

Recording is idempotent where a resumed worker repeats itself: the same source from the
same agent and worker is one attempt, and the same verdict of an attempt is one row.

Many workers may write at once: every write is its own short transaction, SQLite's WAL
and busy timeout serialise them; a killed writer loses at most its uncommitted row.

Not covered: several machines writing one ledger over a network filesystem (the Ray
backend keeps the ledger on the driver, whose workers write it; judge actors only return
records).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from solforge.records import speedup_vs_best

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS problems (
    name TEXT PRIMARY KEY, path TEXT, category TEXT, weight REAL DEFAULT 1.0,
    state TEXT DEFAULT 'pending', info TEXT DEFAULT '{}');
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, problem TEXT NOT NULL, parent INTEGER,
    agent TEXT, role TEXT, worker TEXT, language TEXT, source TEXT, source_hash TEXT,
    path TEXT, reasoning TEXT, levers TEXT DEFAULT '[]', created REAL);
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, attempt INTEGER, problem TEXT NOT NULL,
    kind TEXT NOT NULL, status TEXT, speedup_vs_eager REAL, speedup_vs_compile REAL,
    speedup_vs_best REAL, sol_score REAL, record TEXT, created REAL);
CREATE TABLE IF NOT EXISTS work (
    id INTEGER PRIMARY KEY AUTOINCREMENT, problem TEXT, worker TEXT, kind TEXT,
    state TEXT DEFAULT 'queued', data TEXT DEFAULT '{}', started REAL, finished REAL);
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL, worker TEXT, problem TEXT, model TEXT,
    input_tokens INTEGER, output_tokens INTEGER, cost_usd REAL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL, kind TEXT, problem TEXT, worker TEXT,
    data TEXT DEFAULT '{}');
CREATE TABLE IF NOT EXISTS evalcache (key TEXT PRIMARY KEY, record TEXT, created REAL);
CREATE INDEX IF NOT EXISTS evaluations_problem ON evaluations(problem, kind, status);
CREATE INDEX IF NOT EXISTS attempts_problem ON attempts(problem);
"""


class Ledger:
    """A connection to a run's ledger (one per thread; the class hands them out)."""

    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        """``readonly``: SQLite refuses every write of this connection, and nothing is
        created beside the file (a report or the dashboard reading a run)."""
        self.path = Path(path)
        self.readonly = readonly
        self._local = threading.local()
        if readonly:
            if not self.path.is_file():
                raise FileNotFoundError(f"{self.path}: no ledger here")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # executescript commits on its own: the schema is created outside a transaction
        # (every statement in it is idempotent)
        self._db().executescript(_SCHEMA)
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        found = int(self.get_meta("schema") or SCHEMA_VERSION)
        if found > SCHEMA_VERSION:
            raise RuntimeError(f"{self.path}: ledger schema {found} is newer than this "
                               f"solforge ({SCHEMA_VERSION}); upgrade solforge")

    # -- connection --------------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None and self.readonly:
            # a writer in WAL mode keeps a -wal file beside the ledger: read it with locks;
            # without one no writer is there, and 'immutable' reads the file without
            # creating the -shm and -wal files a locked read-only open would leave behind
            live = Path(f"{self.path}-wal").exists()
            uri = f"{self.path.resolve().as_uri()}?mode=ro" + ("" if live else "&immutable=1")
            db = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None,
                                 check_same_thread=False)
        elif db is None:
            db = sqlite3.connect(str(self.path), timeout=60, isolation_level=None,
                                 check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
        if getattr(self._local, "db", None) is None:
            db.row_factory = sqlite3.Row
            self._local.db = db
        return db

    class _Tx:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE")
            return self.db

        def __exit__(self, exc_type: Any, *rest: Any) -> None:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")

    def _tx(self) -> Ledger._Tx:
        return Ledger._Tx(self._db())

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # -- meta ------------------------------------------------------------------------------
    def set_meta(self, key: str, value: Any) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                       (key, value if isinstance(value, str) else json.dumps(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._db().execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    # -- problems --------------------------------------------------------------------------
    def add_problem(self, name: str, path: str, category: str = "", weight: float = 1.0,
                    info: dict | None = None) -> None:
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO problems (name, path, category, weight, info) "
                       "VALUES (?,?,?,?,?)", (name, path, category, weight,
                                              json.dumps(info or {})))

    def set_problem_state(self, name: str, state: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE problems SET state=? WHERE name=?", (state, name))

    def problems(self) -> list[dict[str, Any]]:
        rows = self._db().execute("SELECT * FROM problems ORDER BY rowid").fetchall()
        return [dict(r) | {"info": json.loads(r["info"] or "{}")} for r in rows]

    # -- attempts and evaluations ----------------------------------------------------------
    def add_attempt(self, problem: str, source: str, language: str, *, agent: str,
                    role: str = "optimizer", worker: str = "", parent: int | None = None,
                    reasoning: str = "", levers: list[str] | None = None,
                    path: str = "") -> int:
        import hashlib

        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        with self._tx() as db:
            same = db.execute("SELECT id FROM attempts WHERE problem=? AND agent=? AND "
                              "worker=? AND source_hash=? ORDER BY id LIMIT 1",
                              (problem, agent, worker, digest)).fetchone()
            if same is not None:
                return int(same[0])
            cur = db.execute(
                "INSERT INTO attempts (problem, parent, agent, role, worker, language, source,"
                " source_hash, path, reasoning, levers, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (problem, parent, agent, role, worker, language, source, digest, path,
                 reasoning,
                 json.dumps(levers or []), time.time()))
            return int(cur.lastrowid)

    def attempt(self, attempt_id: int) -> dict[str, Any] | None:
        r = self._db().execute("SELECT * FROM attempts WHERE id=?", (attempt_id,)).fetchone()
        return None if r is None else dict(r) | {"levers": json.loads(r["levers"] or "[]")}

    def attempts(self, problem: str | None = None) -> list[dict[str, Any]]:
        q, args = "SELECT * FROM attempts", ()
        if problem:
            q, args = q + " WHERE problem=?", (problem,)
        return [dict(r) | {"levers": json.loads(r["levers"] or "[]")}
                for r in self._db().execute(q + " ORDER BY id", args).fetchall()]

    def add_evaluation(self, problem: str, record: dict[str, Any], kind: str = "full",
                       attempt: int | None = None) -> int:
        text = json.dumps(record)
        with self._tx() as db:
            if attempt is not None:
                same = db.execute("SELECT id FROM evaluations WHERE attempt=? AND kind=? AND "
                                  "record=? LIMIT 1", (attempt, kind, text)).fetchone()
                if same is not None:
                    return int(same[0])
            cur = db.execute(
                "INSERT INTO evaluations (attempt, problem, kind, status, speedup_vs_eager, "
                "speedup_vs_compile, speedup_vs_best, sol_score, record, created) "
                "VALUES (?,?,?,?,?,?,?,?,?,?)",
                (attempt, problem, kind, record.get("status"), record.get("speedup_vs_eager"),
                 record.get("speedup_vs_compile"), speedup_vs_best(record),
                 record.get("sol_score"), text, time.time()))
            return int(cur.lastrowid)

    def evaluations(self, problem: str | None = None, kind: str | None = None
                    ) -> list[dict[str, Any]]:
        q, args = "SELECT * FROM evaluations WHERE 1=1", []
        if problem:
            q += " AND problem=?"
            args.append(problem)
        if kind:
            q += " AND kind=?"
            args.append(kind)
        rows = self._db().execute(q + " ORDER BY id", args).fetchall()
        return [dict(r) | {"record": json.loads(r["record"])} for r in rows]

    def judged(self, kinds: tuple[str, ...] = ("final", "full")) -> set[str]:
        """The problems with an evaluation of one of ``kinds`` (any status), records unread."""
        marks = ",".join("?" * len(kinds))
        rows = self._db().execute(f"SELECT DISTINCT problem FROM evaluations WHERE kind IN "
                                  f"({marks})", kinds).fetchall()
        return {r[0] for r in rows}

    def count_evaluations(self) -> int:
        return int(self._db().execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])

    def best(self, problem: str) -> dict[str, Any] | None:
        """The best passing verdict: a re-measured ``final`` one if any, else ``full``
        (attempts whose ``final`` re-measurement failed are excluded). An attempt judged
        more than once in a kind stands by its latest record: a later one is a newer judge's
        (a resumed run re-judges an older judge's records, ``judge/build.py``) or a later
        re-measurement, and an earlier, higher figure is not kept beside it."""
        for kind in ("final", "full"):
            # an attempt whose re-measurement failed is not a winner any more
            row = self._db().execute(
                "SELECT * FROM evaluations e WHERE problem=? AND kind=? AND status='PASSED' "
                "AND COALESCE(attempt, -1) NOT IN (SELECT attempt FROM evaluations WHERE "
                "problem=? AND kind='final' AND status!='PASSED' AND attempt IS NOT NULL) "
                "AND (attempt IS NULL OR id = (SELECT MAX(id) FROM evaluations WHERE "
                "problem=e.problem AND kind=e.kind AND attempt=e.attempt)) "
                "ORDER BY COALESCE(speedup_vs_best, 0) DESC, id LIMIT 1",
                (problem, kind, problem)).fetchone()
            if row is not None:
                return dict(row) | {"record": json.loads(row["record"])}
        return None

    def cached_evaluation(self, key: str) -> dict[str, Any] | None:
        row = self._db().execute("SELECT record FROM evalcache WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def cache_evaluation(self, key: str, record: dict[str, Any]) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO evalcache VALUES (?,?,?)",
                       (key, json.dumps(record), time.time()))

    # -- work units (resume) ----------------------------------------------------------------
    def add_work(self, problem: str, kind: str, data: dict | None = None,
                 worker: str = "") -> int:
        with self._tx() as db:
            cur = db.execute("INSERT INTO work (problem, worker, kind, data) VALUES (?,?,?,?)",
                             (problem, worker, kind, json.dumps(data or {})))
            return int(cur.lastrowid)

    def set_work(self, work_id: int, state: str, worker: str | None = None,
                 data: dict | None = None) -> None:
        now = time.time()
        with self._tx() as db:
            if state == "running":
                db.execute("UPDATE work SET state=?, worker=COALESCE(?, worker), started=? "
                           "WHERE id=?", (state, worker, now, work_id))
            else:
                db.execute("UPDATE work SET state=?, finished=?, data=COALESCE(?, data) "
                           "WHERE id=?", (state, now, json.dumps(data) if data else None,
                                          work_id))

    def work(self, state: str | None = None) -> list[dict[str, Any]]:
        q, args = "SELECT * FROM work", ()
        if state:
            q, args = q + " WHERE state=?", (state,)
        return [dict(r) | {"data": json.loads(r["data"] or "{}")}
                for r in self._db().execute(q + " ORDER BY id", args).fetchall()]

    # -- usage and events -------------------------------------------------------------------
    def add_usage(self, worker: str, problem: str, model: str, input_tokens: int,
                  output_tokens: int, cost_usd: float) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO usage (ts, worker, problem, model, input_tokens, "
                       "output_tokens, cost_usd) VALUES (?,?,?,?,?,?,?)",
                       (time.time(), worker, problem, model, input_tokens, output_tokens,
                        cost_usd))

    def usage_totals(self) -> dict[str, float]:
        r = self._db().execute("SELECT COALESCE(SUM(input_tokens),0), COALESCE(SUM("
                               "output_tokens),0), COALESCE(SUM(cost_usd),0) FROM usage"
                               ).fetchone()
        return {"input_tokens": int(r[0]), "output_tokens": int(r[1]), "cost_usd": float(r[2])}

    def usage_rows(self) -> list[dict[str, Any]]:
        """Every model call's row (ts, worker, problem, model, tokens, cost), in order."""
        return [dict(r) for r in self._db().execute("SELECT * FROM usage ORDER BY id")]

    def event(self, kind: str, problem: str = "", worker: str = "", **data: Any) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO events (ts, kind, problem, worker, data) VALUES (?,?,?,?,?)",
                       (time.time(), kind, problem, worker, json.dumps(data, default=str)))

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        q, args = "SELECT * FROM events", ()
        if kind:
            q, args = q + " WHERE kind=?", (kind,)
        return [dict(r) | {"data": json.loads(r["data"] or "{}")}
                for r in self._db().execute(q + " ORDER BY id", args).fetchall()]
