"""The candidate runner: the only process that executes solution code.

Started by the judge (``python -m solforge.bench.runner.process --fd N --device D``) inside the
sandbox (see ``bench/runner/sandbox.py``), one runner per candidate; on a CPU, forked
instead from the judge's runner zygote (``zygote.py``), which ran :func:`preload` once.
It speaks only over the private channel; its stdout/stderr are captured for the error
message and prove nothing.

The operations themselves (``load``, ``build``, ``run``, ``time``, ``fetch``,
``batch_prepare`` / ``batch_go``, ``trace``, ``profile``, ``exit``) are :class:`Runner`'s,
in ``bench/runner/operations.py``; here: the loop that serves them, the tamper check after
each (``integrity.py``), failures turned into replies, and the runner's start-up.

A failure replies ``{"ok": False, "status": ..., "message": ...}``; after a CUDA error that
poisons the context (illegal address, ...) the reply says ``fatal`` and the judge replaces
this process.

Everything here can be rewritten by the candidate at run time: nothing this process
reports is trusted by itself. The judge checks outputs it receives, inputs it owns, and
its own clock.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
from typing import Any

from solforge.bench.runner.operations import Runner

__all__ = ["SLOT_WAIT_S", "Runner", "classify", "explain", "main", "preload", "run",
           "serve"]


def explain(exc: BaseException) -> str:
    """The message a record shows for ``exc``: resource exhaustion named as such."""
    text = f"{type(exc).__name__}: {exc}"
    name = type(exc).__name__
    if name == "OutOfMemoryError" or "CUDA out of memory" in str(exc):
        return f"GPU out of memory (the candidate asked for more device memory than is " \
               f"free): {text}"
    if isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) \
            or "not enough memory" in str(exc):
        return f"host memory exhausted (the candidate's memory limit was reached): {text}"
    if isinstance(exc, BlockingIOError) and "fork" in "".join(
            traceback.format_tb(exc.__traceback__)[-2:]).lower():
        return f"process limit reached (fork failed): {text}"
    return text


def classify(exc: BaseException, phase: str) -> tuple[str, bool]:
    """Map an exception to (status, fatal)."""
    name = type(exc).__name__
    text = str(exc)
    fatal = any(s in text for s in (
        "illegal memory access", "illegal instruction", "misaligned address",
        "unspecified launch failure", "device-side assert", "CUDA error: an illegal",
        "uncorrectable ECC", "context is destroyed", "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA_ERROR_LAUNCH_FAILED"))
    if isinstance(exc, SyntaxError):
        return "COMPILE_ERROR", False
    compile_names = ("CompilationError", "CompileError", "NVRTCError", "BuildError",
                     "DSLRuntimeError", "DSLAstPreprocessorError")
    if name in compile_names or "Error building extension" in text \
            or "nvrtc" in name.lower():
        return "COMPILE_ERROR", False
    if phase in ("import", "build") and isinstance(exc, (ImportError, AttributeError,
                                                         NameError)):
        return "COMPILE_ERROR", False
    return "RUNTIME_ERROR", fatal


def serve(channel: Any, device: str) -> None:
    # snapshot them before any candidate code runs
    from solforge.bench.measure import compare, inputs, timing  # noqa: F401
    from solforge.bench.policy import rules  # noqa: F401
    from solforge.bench.runner import integrity  # noqa: F401

    runner = Runner(device)
    if device.startswith("cuda"):
        import torch.profiler  # noqa: F401 (snapshot it before any candidate code runs)
    baseline = integrity.snapshot()
    check = integrity.changed
    channel.send({"op": "ready", "pid": os.getpid()})
    phase = "import"
    while True:
        msg = channel.recv()
        op = msg.get("op")
        if op == "exit":
            try:
                runner.op_exit(msg)
            finally:
                channel.send({"ok": True})
            return
        handler = getattr(runner, f"op_{op}", None)
        if handler is None:
            channel.send({"ok": False, "status": "RUNTIME_ERROR", "message": f"unknown op {op}"})
            continue
        phase = {"load": "import", "build": "build"}.get(op, op)
        t0 = time.perf_counter()
        try:
            reply = handler(msg)
        except BaseException as e:  # noqa: BLE001 - everything a candidate raises is data
            if isinstance(e, (KeyboardInterrupt,)):
                raise
            status, fatal = classify(e, phase)
            tb = traceback.format_exc(limit=8)
            reply = {"ok": False, "status": status, "fatal": fatal,
                     "message": explain(e)[:4000], "traceback": tb[-6000:]}
        reply["elapsed_s"] = time.perf_counter() - t0
        patched = check(baseline)
        if patched:
            reply = {"ok": False, "status": "REWARD_HACK", "flag": "harness_patched",
                     "message": "the solution replaced functions the harness measures or "
                                f"reports with: {', '.join(patched[:8])}"}
        try:
            channel.send(reply)
        except Exception as e:  # an unpicklable output, typically
            channel.send({"ok": False, "status": "RUNTIME_ERROR",
                          "message": f"the result could not be sent back: {e}"[:2000]})


def _warm_profiler(device: str) -> None:
    """Start and stop the CUDA profiler once (CUPTI's first start takes a while): a spare
    runner does it while it waits rather than inside the candidate's first timing."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            torch.ones(1, device=device).add_(1)
            torch.cuda.synchronize(device)
    except Exception:  # noqa: BLE001 - only a warm-up: the real timing reports any failure
        pass


# Longest a runner's CUDA start-up waits for the device's slot before going ahead anyway
# (a judge's whole evaluation holds it for seconds; a stuck holder must not stall a spare).
SLOT_WAIT_S = 120.0


def _start_cuda(device: str) -> None:
    """The GPU stage of start-up (CUDA context, CUPTI's first start), inside the device's
    slot: a spare starting while another candidate is timed must not disturb the timing.
    Held shared: nothing is timed here, so it goes on beside other evaluators' trials and
    compiles (held exclusively, the start-ups took 28 s of a KernelBench run's 180 s of
    exclusive holds on an H100: ``benchmarks/results/2026-12-06-h100-s24``)."""
    import torch

    from solforge.bench.measure.slots import RUNNER_START, device_slot

    def start() -> None:
        torch.cuda.init()
        torch.cuda.set_device(torch.device(device).index or 0)
        _warm_profiler(device)

    try:
        with device_slot(device, timeout_s=SLOT_WAIT_S, purpose=RUNNER_START, shared=True):
            start()
            return
    except TimeoutError:
        pass
    start()


def preload() -> None:
    """What a runner imports before it serves: torch, ``torch._dynamo`` (the policy
    trace's dispatch mode imports it on first use: over a second of every evaluation when
    paid there; a spare runner, or the zygote, pays it while it waits) and the modules
    :func:`serve` snapshots. The runner zygote (``zygote.py``) runs it once and forks
    CPU runners from the result."""
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401

    from solforge.bench.measure import compare, inputs, timing  # noqa: F401
    from solforge.bench.policy import rules  # noqa: F401
    from solforge.bench.runner import channel, integrity  # noqa: F401


def freeze_imports() -> None:
    """Move what this process holds after its start-up (torch's and solforge's modules:
    about 320,000 objects) out of the cyclic garbage collector's reach (``gc.freeze``):
    every later full collection (the judge's ``memory.release`` after each evaluation, a
    runner's before it exits) then walks only what was made since (0.12-0.15 s each on
    the CI machine, before; microseconds after). Called by the judge before its first
    evaluation, by the runner zygote before its first fork (Python's documented use: the
    forked runners' collections no longer touch the parent's pages) and by a runner
    before it loads its candidate. Garbage is collected first, so only live objects are
    frozen.

    Not covered: a cycle among start-up objects that becomes garbage later is never
    collected (its memory stays until the process exits; reference counting still frees
    everything not in a cycle), and the judge's ``memory.live_tensor_mb`` no longer sees
    a tensor made at start-up (``gc.get_objects`` skips frozen objects): its idle floor
    and every later level leave it out alike, and no evaluation's tensor exists yet."""
    gc.collect()
    gc.freeze()


def run(fd: int, device: str) -> None:
    """The runner from its sandbox on: serve the judge on the channel ``fd``, then exit.
    An exec'd runner comes here from :func:`main`, a forked one from the zygote."""
    from solforge.bench.runner.channel import Channel
    from solforge.bench.runner.confinement import enter_sandbox

    enter_sandbox(device)
    channel = Channel.from_fd(fd)
    preload()
    freeze_imports()  # a forked runner's were frozen by its zygote: this finds little
    if device.startswith("cuda"):
        _start_cuda(device)
    serve(channel, device)
    sys.stdout.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="solforge candidate runner (internal)")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    run(a.fd, a.device)


if __name__ == "__main__":
    # run under the module's real name, so its classes are the ones other modules import
    from solforge.bench.runner.process import main as _main

    _main()
