"""The evaluator as callers see it: ``Evaluator(device).evaluate(problem, solution)``.

The caller's process (the CLI, an agent, a planner) never runs a reference or a
candidate: it starts one judge process per device (``bench/judge/process.py``) and exchanges plain
dicts with it. If the judge itself dies in the middle of an evaluation (killed), or says
its CUDA context is lost, a new judge runs that evaluation once more and the record's
``judge_fault`` says what happened: nothing is charged to the candidate. Only when the
second judge fails the same way (a reference that segfaults, a candidate that kills its
judge) is the record the one it earned: the status that fits the phase the judge died in.

The judge's environment is the caller's minus anything named like a secret (keys,
tokens, passwords): a candidate must not find them one process up. When the judge
reports that the evaluator's own files changed (``guard.py``), this handle raises
:class:`~solforge.bench.judge.guard.EvaluatorTampered` for that evaluation's caller to see and
for every later call: it will not start another judge on files it cannot trust.

Not covered: several devices per judge (use one Evaluator per device), remote judges
(the Ray backend runs Evaluators inside judge actors, ``orchestrate/ray_backend.py``;
docs/SCALE.md).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from solforge.bench.judge import install
from solforge.bench.judge.build import judge_build
from solforge.bench.judge.guard import EvaluatorTampered, solforge_digest
from solforge.problems.spec import Problem
from solforge.records.evaluation import EvaluationRecord, Status
from solforge.records.options import EvalOptions


class Evaluator:
    """A handle on one judge process for one device."""

    def __init__(self, options: EvalOptions | None = None,
                 on_phase: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.options = options or EvalOptions()
        self.on_phase = on_phase
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.digest: str | None = None
        self.tampered: str | None = None
        self.phase = ""  # the judge's phase in the evaluation under way ('' between them)
        # set by close() (a caller stopping a stalled evaluation, say) until the next start:
        # a judge that dies because it was closed is not a fault to run again
        self._closing = False

    # -- judge process -------------------------------------------------------------------
    def _start(self) -> None:
        if self.tampered:
            raise EvaluatorTampered(self.tampered)
        if self.digest is None:
            refused = install.install_refusal()  # a tampered install is never used (install.py)
            if refused:
                self._refuse(refused)
            self.digest = solforge_digest()
        ours, theirs = socket.socketpair()
        theirs.set_inheritable(True)
        from solforge.bench.runner.sandbox import judge_env

        env = judge_env(dict(os.environ))
        src_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH"))
                                            if p)
        from solforge.bench.baselines.prewarm import compile_env
        from solforge.bench.runner.sandbox import QUIET_THREADS

        env.update(compile_env())
        env.update(QUIET_THREADS)
        if self.options.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "solforge.bench.judge.process", "--fd", str(theirs.fileno()),
             "--device", self.options.device, "--guard-digest", self.digest],
            pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        theirs.close()
        self.conn = Connection(ours.detach())
        msg = self._recv(deadline=time.monotonic() + 300)
        if msg is None or msg.get("event") != "ready":
            err = self._stderr()
            self.close()
            raise RuntimeError(f"the evaluator process did not start: {err}")
        if msg.get("refused"):
            self._refuse(msg["refused"])
        self._closing = False
        _say_once(str(msg.get("containment") or ""))

    def _renew(self) -> None:
        """Let the old judge finish exiting, then start a new one."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.close()
        self._start()

    def _refuse(self, message: str) -> None:
        self.tampered = message
        self.close()
        raise EvaluatorTampered(message)

    def _stderr(self) -> str:
        if self.proc is None or self.proc.stderr is None:
            return ""
        try:  # a process that just closed its channel is usually exiting: let it finish
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            return ""
        try:
            return self.proc.stderr.read().decode(errors="replace")[-3000:]
        except Exception:
            return ""

    def _recv(self, deadline: float) -> dict[str, Any] | None:
        assert self.conn is not None and self.proc is not None
        while time.monotonic() < deadline:
            if self.conn.poll(0.2):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    return None
            if self.proc.poll() is not None and not self.conn.poll(0):
                return None
        return None

    def close(self) -> None:
        self._closing = True
        if self.conn is not None and self.proc is not None and self.proc.poll() is None:
            try:
                self.conn.send({"op": "shutdown"})
                self._recv(time.monotonic() + 10)
            except Exception:
                pass
        if self.proc is not None:
            from solforge.bench.runner.proctree import kill_tree

            # always: the judge's session may hold compile workers it leaves behind
            kill_tree(self.proc.pid)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.proc = None
        self.conn = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- evaluation ----------------------------------------------------------------------
    def profile(self, problem: Problem | str | Path, solution: str | Path,
                language: str | None = None, **overrides: Any) -> dict[str, Any]:
        """Per-kernel (GPU) or per-operator (CPU) time of the candidate on its first timed
        workload; ``{"ok": False, "message": ...}`` when it cannot run."""
        opts = self.options.model_copy(update=overrides) if overrides else self.options
        problem_path = str(problem.path if isinstance(problem, Problem) else problem)
        if self.proc is None or self.proc.poll() is not None:
            try:
                self._start()
            except EvaluatorTampered:
                raise
            except RuntimeError as e:
                return {"ok": False, "message": str(e)}
        request = {"op": "profile", "problem": problem_path, "solution": str(solution),
                   "language": language, "options": opts.model_dump()}
        assert self.conn is not None
        self.conn.send(request)
        deadline = time.monotonic() + opts.timeout_s * 2 + 300
        while True:
            msg = self._recv(deadline)
            if msg is None:
                self.close()
                return {"ok": False, "message": "the evaluator process died while profiling"}
            if msg.get("event") == "recycle":
                try:
                    self._renew()
                except RuntimeError as e:
                    return {"ok": False, "message": str(e)}
                assert self.conn is not None
                self.conn.send(request)
                continue
            if msg.get("event") == "result":
                if "evaluator_tampered" in msg["profile"].get("flags", []):
                    self._refuse(msg["profile"]["message"])
                return msg["profile"]
            if msg.get("event") == "refused":
                self._refuse(msg.get("message", ""))
            if msg.get("event") == "error":
                return {"ok": False, "message": msg.get("message", "")}

    def evaluate(self, problem: Problem | str | Path, solution: str | Path,
                 language: str | None = None, **overrides: Any) -> EvaluationRecord:
        """Evaluate ``solution`` on ``problem``; always returns a record, never raises for
        anything the problem or the solution did, with one exception: a solution that
        changed the evaluator's own files gets its record (``evaluator_tampered``), and
        every later call raises :class:`EvaluatorTampered`."""
        if self.tampered:
            raise EvaluatorTampered(self.tampered)
        opts = self.options.model_copy(update=overrides) if overrides else self.options
        problem_path = str(problem.path if isinstance(problem, Problem) else problem)
        name = problem.name if isinstance(problem, Problem) else Path(problem_path).stem
        if self.proc is None or self.proc.poll() is not None:
            try:
                self._start()
            except EvaluatorTampered:
                raise
            except RuntimeError as e:
                return _record(name, solution, opts, Status.RUNTIME_ERROR, str(e))
        request = {"op": "evaluate", "problem": problem_path, "solution": str(solution),
                   "language": language, "options": opts.model_dump()}
        assert self.conn is not None
        self.conn.send(request)
        replaced = ""
        # the first judge's failure (killed, its CUDA context lost), after which a new
        # judge runs the evaluation once more: nothing is charged to the candidate unless
        # the second judge fails too
        fault = ""
        # the judge enforces the candidate's limit; this one covers baselines and builds
        deadline = time.monotonic() + opts.timeout_s * 2 + 1800
        phase = "starting"
        spent: dict[str, float] = {}
        since = time.monotonic()

        def lap() -> None:
            nonlocal since
            now = time.monotonic()
            spent[phase] = spent.get(phase, 0.0) + now - since
            since = now

        def resend() -> EvaluationRecord | None:
            """Send the request to a new judge; a record when none can be started."""
            try:
                self._renew()
            except RuntimeError as e:
                return _record(name, solution, opts, Status.RUNTIME_ERROR, str(e))
            assert self.conn is not None
            self.conn.send(request)
            return None

        def again(why: str) -> EvaluationRecord | None:
            """A judge fault (``why``): the request once more, on a new judge."""
            nonlocal fault, phase
            fault = why[:3000]
            phase = self.phase = "starting"
            return resend()

        while True:
            msg = self._recv(deadline)
            if msg is None:
                closed = self._closing  # by another thread: not a fault
                judge = self.proc
                if judge is not None:
                    try:  # its channel closes a moment before it can be reaped
                        judge.wait(timeout=2)
                    except subprocess.TimeoutExpired:
                        pass
                died = judge is not None and judge.poll() is not None
                how = _exit(self.proc)
                err = self._stderr()
                self.close()
                if died and not fault and not closed:
                    failed = again(f"the judge {how} during the {phase} phase; a new judge "
                                   f"ran the evaluation again. {err[-1000:]}")
                    if failed is None:
                        continue
                    return failed
                status = Status.INVALID_REFERENCE if phase in ("reference", "baseline") \
                    else Status.RUNTIME_ERROR
                what = "died" if died else "stopped answering"
                twice = (" again, on a second judge: it is what the evaluation runs (the "
                         "candidate, or the reference) that ends the judge" if fault else "")
                self.phase = ""
                rec = _record(name, solution, opts, status,
                              f"the evaluator process {what} during the {phase} phase"
                              f"{' (the reference crashed it)' if status is Status.INVALID_REFERENCE else ''}"
                              f"{twice}. {err[-1500:]}")
                rec.judge_fault = fault
                return rec
            event = msg.get("event")
            if event == "phase":
                lap()
                phase = self.phase = msg.get("phase", phase)
                if self.on_phase:
                    self.on_phase(msg)
            elif event == "fault":
                # the judge's CUDA context was lost: it exits; its record is not trusted
                # unless a second judge loses its context on the same evaluation too
                if not fault:
                    failed = again(f"the judge lost its CUDA context during the {phase} "
                                   f"phase ({msg.get('message', '')}); a new judge ran the "
                                   "evaluation again")
                    if failed is None:
                        continue
                    return failed
                self.close()
                self.phase = ""
                if msg.get("record"):
                    record = EvaluationRecord.from_json(msg["record"])
                else:
                    record = _record(name, solution, opts, Status.RUNTIME_ERROR,
                                     f"the judge lost its CUDA context again: "
                                     f"{msg.get('message', '')}")
                record.judge_fault = fault
                return record
            elif event == "recycle":
                # the judge kept memory it could not give back: a new one takes the request
                replaced = str(msg.get("message", ""))
                if (failed := resend()) is not None:
                    return failed
            elif event == "result":
                record = EvaluationRecord.from_json(msg["record"])
                lap()
                self.phase = ""
                record.judge_fault = fault
                record.phase_seconds = {k: round(v, 3) for k, v in spent.items()}
                if replaced and record.judge_memory is not None:
                    record.judge_memory.replaced_before = replaced
                if "evaluator_tampered" in record.flags:
                    self.tampered = record.message
                    self.close()
                return record
            elif event == "refused":
                self._refuse(msg.get("message", ""))
            elif event == "error":
                return _record(name, solution, opts, Status.RUNTIME_ERROR,
                               f"internal evaluator error: {msg.get('message')}\n"
                               f"{msg.get('traceback', '')[-3000:]}")


_SAID: set[str] = set()


def _say_once(note: str) -> None:
    """Print a judge's containment note on the console, once per process and note."""
    if note and note not in _SAID:
        _SAID.add(note)
        print(f"solforge: candidate containment: {note}", file=sys.stderr)


def _exit(proc: subprocess.Popen | None) -> str:
    rc = proc.poll() if proc is not None else None
    if rc is None:
        return "stopped answering"
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with code {rc}"


def _record(problem: str, solution: Any, opts: EvalOptions, status: Status, message: str
            ) -> EvaluationRecord:
    return EvaluationRecord(problem=problem, solution=str(solution), device=opts.device,
                            status=status, message=message, policy=opts.policy,
                            versions={"solforge": judge_build()})
