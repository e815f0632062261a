"""Tamper evidence inside the runner: identities of what the harness relies on.

Before the candidate's module is imported, the runner records the identity of every
function and method its measurements and replies go through (clocks, synchronisation,
events, the profiler, the harness's own timing, comparison, policy probes and channel
code), and of the code object of each Python function among them (so swapping
``f.__code__`` in place is seen too). After each operation it checks them again; a
difference is reported as the flag ``harness_patched`` and the judge rejects the
candidate (``REWARD_HACK``).

This is evidence, not a wall: code in the runner's process can defeat any check made in
that process (by patching C state, or this module's captured references through frame
hacks). The verdict does not rest on it: outputs are checked by the judge, and the
runner's timings are cross-checked against the judge's own clock (``bench/judge/performance.py``). It
catches the usual monkey-patching cheaply and names it.
"""

from __future__ import annotations

import importlib
from typing import Any

_TARGETS = (
    ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "monotonic"),
    ("time", "time"), ("torch", "equal"), ("torch", "allclose"), ("torch.cuda", "synchronize"),
    ("torch.cuda", "Event"), ("torch.cuda.Event", "record"),
    ("torch.cuda.Event", "elapsed_time"), ("torch.cuda.Event", "synchronize"),
    ("torch.profiler", "profile"), ("torch.profiler", "record_function"),
    ("torch.Tensor", "clone"), ("torch.Tensor", "copy_"),
    ("solforge.bench.measure.timing", "measure"),
    ("solforge.bench.measure.timing", "_kernel_times"),
    ("solforge.bench.measure.timing", "_profiled_loop"),
    ("solforge.bench.measure.timing", "_latency_loop"),
    ("solforge.bench.measure.timing", "measure_latency"),
    ("solforge.bench.measure.timing", "fresh_inputs"),
    ("solforge.bench.runner.channel", "dumps"), ("solforge.bench.runner.channel", "Channel"),
    ("solforge.bench.runner.channel.Channel", "send"),
    ("solforge.bench.measure.compare", "compare"),
    ("solforge.bench.measure.inputs", "run_forward"),
    ("solforge.bench.runner.process", "Runner"), ("solforge.bench.runner.process", "serve"),
    ("solforge.bench.runner.process.Runner", "op_time"),
    ("solforge.bench.runner.process.Runner", "op_run"),
    ("solforge.bench.runner.process.Runner", "op_trace"),
    ("solforge.bench.runner.process.Runner", "op_batch_go"),
    ("solforge.bench.runner.process.Runner", "op_latency"),
    ("solforge.bench.measure.timing", "_Keeper"), ("solforge.bench.policy.rules", "aten_trace"),
    ("solforge.bench.policy.rules", "ReferenceTripwire"), ("threading", "active_count"),
    ("sys", "setprofile"), ("threading", "setprofile"), ("solforge.records.figures", "median"),
)


def _resolve(owner: str) -> Any:
    parts = owner.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(owner)


def snapshot() -> dict[str, int]:
    """``{"module.attr": id(object)}`` for every target that exists here."""
    out = {}
    for owner, attr in _TARGETS:
        try:
            obj = getattr(_resolve(owner), attr)
        except (ImportError, AttributeError):
            continue
        out[f"{owner}.{attr}"] = id(obj)
        code = getattr(obj, "__code__", None)
        if code is not None:
            out[f"{owner}.{attr}.__code__"] = id(code)
    return out


def changed(before: dict[str, int]) -> list[str]:
    """Names whose object is no longer the one recorded in ``before``."""
    now = snapshot()
    return sorted(k for k, v in before.items() if now.get(k) != v)
