"""Where a patched model's time goes: each step replayed from a CUDA graph, and each patched
module's host and device cost, original against patched.

An eager model step at batch 1 is often bound by the host: the Python and launch cost of its
few hundred kernels is longer than the kernels themselves (a 2-layer Llama-8B-wide step on
the H200: about 4.8 ms of wall time, session 16). A kernel that is 8x faster on the device
then saves nothing, and one whose launch costs more host time (a Triton launch against a
few ATen ones) makes the step slower. These figures say which case a report is in:

- :func:`graphed_latency`: each side's step (original, patched) captured once in a CUDA
  graph and replayed, the two interleaved round by round; a replay has no host cost per
  kernel, so its time is the step's device time, the one CUDA-graph serving (vLLM's and
  SGLang's decode) pays. A step that cannot be captured (a host sync inside, a dynamic
  shape) is reported with why, not timed.
- :func:`module_costs`: one patched module called back to back on random inputs of a
  verified signature: host microseconds per call (the enqueue time, no sync inside the
  loop) and device microseconds per call (the same calls queued behind a sleeping kernel,
  so launch gaps do not count), for the original forward and for the dispatcher with the
  kept solution. On a CPU the two are the same wall time.

Not covered: CUDA graphs on several devices or streams, the host cost of the model's code
between modules, and modules whose forward takes non-tensor arguments (their inputs cannot
be drawn from a signature).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any, Callable

import torch

from solforge.models.apply import Patch, _Dispatch
from solforge.models.source import BuiltModel


def step_inputs(built: BuiltModel, patch: Patch, mode: str, batch: int, seq: int,
            seed: int) -> Any:
    """One step's inputs; a decode step's cache always comes from the original model, so
    both sides of a comparison decode from the same cache."""
    kept, patch.enabled = patch.enabled, False
    try:
        return built.inputs(mode, batch, seq, seed=seed)
    finally:
        patch.enabled = kept


def graphed_latency(built: BuiltModel, patch: Patch, mode: str, batch: int, seq: int,
                    rounds: int = 5, replays: int = 10) -> dict[str, Any]:
    """Median device ms of one step from CUDA-graph replays, original and patched."""
    if built.device.type != "cuda":
        return {"skipped": "CUDA graphs need a CUDA device"}
    graphs: dict[str, Any] = {}
    for label, on in (("original", False), ("patched", True)):
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.no_grad(), torch.cuda.stream(side):
                for w in range(3):  # warm-up: autotuners and lazy inits run outside capture
                    inputs = step_inputs(built, patch, mode, batch, seq, seed=w)
                    patch.enabled = on
                    built.call(inputs)
            torch.cuda.current_stream().wait_stream(side)
            inputs = step_inputs(built, patch, mode, batch, seq, seed=0)
            patch.enabled = on
            g = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(g):
                built.call(inputs)
            graphs[label] = (g, inputs)  # the inputs stay alive with their graph
        except Exception as e:
            with contextlib.suppress(Exception):  # what the failed capture left queued
                torch.cuda.synchronize()
            return {"skipped": f"the {label} {mode} step could not be captured in a CUDA "
                               f"graph: {type(e).__name__}: {str(e)[:200]}"}
        finally:
            patch.enabled = True
    times: dict[str, list[float]] = {"original": [], "patched": []}
    for r in range(rounds + 1):
        order = ("original", "patched") if r % 2 else ("patched", "original")
        for label in order:
            g = graphs[label][0]
            g.replay()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(replays):
                g.replay()
            end.record()
            end.synchronize()
            if r:  # round 0 warms both up
                times[label].append(start.elapsed_time(end) / replays)
    del graphs
    o, p = statistics.median(times["original"]), statistics.median(times["patched"])
    return {"original_ms": o, "patched_ms": p, "speedup": o / p if p else None,
            "rounds": rounds, "replays": replays}


def _per_call(fn: Callable[[], Any], device: torch.device, calls: int) -> tuple[float, float]:
    """(host us, device us) per call of ``fn``, back to back."""
    cuda = device.type == "cuda"
    for _ in range(3):
        fn()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e6
    if not cuda:
        return host, host
    torch.cuda.synchronize()
    # queue the calls behind a sleeping kernel longer than their enqueue (at ~2 GHz, with
    # room): the events then time the kernels alone, not the launch gaps between them
    torch.cuda._sleep(int(host * calls * 2e3 * 2) + 1_000_000)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return host, start.elapsed_time(end) * 1e3 / calls


def _draw(signature: tuple, device: torch.device, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _, shape, dtype in signature:
        dt = getattr(torch, dtype)
        if dt.is_floating_point:
            t = torch.randn(shape, generator=g).to(dt)
        else:  # token ids and the like: small non-negative values are valid for most
            t = torch.randint(0, 2, shape, generator=g).to(dt)
        out.append(t.to(device))
    return out


def module_costs(patch: Patch, calls: int = 50) -> dict[str, dict[str, Any]]:
    """Per patched problem, for its first module path and each verified signature: host
    and device microseconds per call, original forward against the patched one."""
    out: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    kept_enabled = patch.enabled
    try:
        for path, d in patch.modules.items():
            if d.kept.problem in seen:
                continue
            seen.add(d.kept.problem)
            out[d.kept.problem] = {"path": path, "signatures": _costs(patch, d, calls)}
    finally:
        patch.enabled = kept_enabled
    return out


def _costs(patch: Patch, d: _Dispatch, calls: int) -> list[dict[str, Any]]:
    device = torch.device(d.kept.device_type)
    rows = []
    for i, sig in enumerate(sorted(d.signatures)):
        try:
            args = _draw(sig, device, seed=i)
            row: dict[str, Any] = {"signature": [[n, list(s), dt] for n, s, dt in sig]}
            with torch.no_grad():
                for label, on in (("original", False), ("patched", True)):
                    patch.enabled = on
                    host, dev = _per_call(lambda: d(*args), device, calls)
                    row[label] = {"host_us": round(host, 2), "device_us": round(dev, 2)}
        except Exception as e:  # a module that cannot run on drawn inputs: said, not timed
            row = {"signature": [[n, list(s), dt] for n, s, dt in sig],
                   "skipped": f"{type(e).__name__}: {str(e)[:200]}"}
        rows.append(row)
    return rows
