"""The judge: the trusted process that owns one device and decides every verdict.

It builds the reference, draws the inputs, runs the baselines, starts and talks to the
candidate runners, compares outputs and writes the evaluation record. It never imports a
candidate's code. One judge per device; the CLI (or a planner) talks to it through
:class:`solforge.bench.evaluator.Evaluator`.

A runner is started ahead of need (a "spare": Python, torch and the CUDA context already
up), so a candidate's evaluation does not wait for process start. Each runner serves
exactly one candidate and is then killed with all its descendants (and any orphan of it
the judge adopted as subreaper).

While it waits for a runner the judge watches it: host memory, the number of processes
(a fork bomb), the volume of output (a flood), and, from the timing phase on, the CPU
the runner's processes burn *between* requests, when an honest runner is idle
(background work: a thread that finishes the call's work after it returned, or that
slows the baselines timed meanwhile). Compilers and compile workers are left out of
that count.

After every evaluation the judge compares its own files with the manifest it took at
start (``guard.py``); a change marks that evaluation ``evaluator_tampered`` and the judge
refuses every later request.

Requests (plain dicts over the judge's channel): ``evaluate`` and ``shutdown``. While it
works, the judge sends ``{"event": "phase", ...}`` messages so the caller can tell a broken
reference (judge died while building the reference) from anything else.

A judge whose CUDA context is lost (a sticky error: an illegal access in the reference)
answers with ``{"event": "fault"}`` and exits: the caller runs the evaluation once more on
a new judge (``evaluator.py``), and keeps this record only if that one fails the same way.

After every evaluation the judge releases what it holds and measures what is left
(``bench/judge/memory.py``); a judge that stays above its idle floor answers the next request with
``{"event": "recycle"}`` and exits, and the caller sends that request to a new judge.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from multiprocessing.connection import Connection

from solforge.bench.judge import install
from solforge.bench.judge.pipeline import evaluate, profile
from solforge.bench.judge.state import DEFAULT_MEMORY_MB, Judge
from solforge.bench.runner.process import freeze_imports
from solforge.bench.runner.sandbox import become_subreaper, containment_note


def serve(conn: Connection, device: str, expected_digest: str | None = None) -> None:
    become_subreaper()
    judge = Judge(device, conn)
    if expected_digest and judge.guard.digest() != expected_digest:
        judge.refused = ("the evaluator's files changed between the caller's start and this "
                         "judge's: no verdict can be trusted. Reinstall solforge and start "
                         "a new evaluator.")
    judge.refused = judge.refused or install.install_refusal() or None
    freeze_imports()  # before the first evaluation: each release's collection is short
    conn.send({"event": "ready", "pid": os.getpid(), "refused": judge.refused,
               "containment": containment_note(device)})
    if not judge.refused:  # the first candidate's runner starts now, not when it is needed
        judge.replenish(DEFAULT_MEMORY_MB)
    try:
        while True:
            try:
                req = conn.recv()
            except EOFError:
                return
            if req.get("op") == "shutdown":
                conn.send({"event": "bye"})
                return
            if judge.refused:
                conn.send({"event": "refused", "message": judge.refused})
                continue
            if judge.memory.unfit:
                # memory the last evaluation left behind that no release gave back: a new
                # judge takes this request (the caller starts it and sends it again)
                conn.send({"event": "recycle", "message": judge.memory.unfit})
                return
            judge.memory.begin()
            try:
                if req.get("op") == "profile":
                    prof = profile(judge, req["problem"], req["solution"], req.get("language"),
                                   req["options"])
                    checked = judge.after_evaluation({"message": prof.get("message", "")})
                    if judge.refused:
                        prof = {"ok": False, "message": checked["message"],
                                "flags": checked["flags"]}
                    conn.send({"event": "result", "profile": prof})
                    judge.memory.settle()
                    continue
                record = evaluate(judge, req["problem"], req["solution"], req.get("language"),
                                  req["options"])
                record = judge.after_evaluation(record)
                lost = cuda_context_lost(device)
                if lost:  # nothing this judge measured now can be trusted: a new one
                    conn.send({"event": "fault", "message": lost, "record": record})
                    return
                record["judge_memory"] = judge.memory.figures().model_dump()
                if not judge.refused:
                    judge.replenish(int(req["options"].get("memory_mb", DEFAULT_MEMORY_MB)))
                conn.send({"event": "result", "record": record})
                # after the reply: the release overlaps the caller's own work on the record
                judge.memory.settle()
            except Exception as e:  # a bug of ours: say so, keep serving
                lost = cuda_context_lost(device)
                if lost:
                    conn.send({"event": "fault", "message": lost})
                    return
                conn.send({"event": "error", "message": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc()})
    finally:
        judge.close()


def cuda_context_lost(device: str) -> str:
    """'' while this judge's CUDA context works; else the error it now raises on every
    call (an illegal access in the reference poisons it for good)."""
    if not device.startswith("cuda"):
        return ""
    import torch

    try:
        torch.cuda.synchronize(device)
        torch.ones(1, device=device).add_(1).item()
        return ""
    except Exception as e:  # noqa: BLE001 - any failure here means the context is gone
        return f"{type(e).__name__}: {e}"[:1000]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="solforge judge (internal)")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--guard-digest", default=None)
    a = ap.parse_args(argv)
    conn = Connection(a.fd)
    serve(conn, a.device, a.guard_digest)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    # run under the module's real name, so its classes are the ones other modules import
    from solforge.bench.judge.process import main as _main

    _main()

__all__ = ["main", "serve"]
