"""Every ``SOLFORGE_*`` environment variable solforge reads: one getter each, read when
called (a test or a child process may set one at any time).

:data:`KNOBS` lists them with what each does. Those marked ``verdict`` can change a
verdict or a figure in it (containment, input sets, where timings run, which baselines
are reused); :func:`verdict_knobs` gives the ones set, and the judge writes them into
every evaluation record (``EvaluationRecord.knobs``) so a record says under which
settings it was made.

A malformed value of a knob that sizes or places work is an error that names the
variable and what to give, never a silent default.

Not covered: variables of other tools that solforge passes on or sets for its children
(``TRITON_INTERPRET``, ``TORCH_CUDA_ARCH_LIST``, ``CUDA_VISIBLE_DEVICES``,
``OMP_NUM_THREADS``); those are named where they are used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CACHE = "SOLFORGE_CACHE"
SLOTS = "SOLFORGE_SLOTS"
SLOT_HELD = "SOLFORGE_SLOT_HELD"
TIMING_CORE = "SOLFORGE_TIMING_CORE"
QUIET_DEVICE = "SOLFORGE_QUIET_DEVICE"
DEVICE_MEMORY_MB = "SOLFORGE_DEVICE_MEMORY_MB"
JUDGE_SLACK_MB = "SOLFORGE_JUDGE_SLACK_MB"
SPARES = "SOLFORGE_SPARES"
HARDEN_GPU = "SOLFORGE_HARDEN_GPU"
FS_VIEW = "SOLFORGE_FS_VIEW"
CUDA_ARCH = "SOLFORGE_CUDA_ARCH"
LLM_CONFIG = "SOLFORGE_LLM_CONFIG"
SERVE_TOKEN = "SOLFORGE_SERVE_TOKEN"
SERVE_URL = "SOLFORGE_SERVE_URL"
RAY_ACTOR = "SOLFORGE_RAY_ACTOR"
RUNNER_FORK = "SOLFORGE_RUNNER_FORK"
COMPILE_WARMUP_S = "SOLFORGE_COMPILE_WARMUP_S"


@dataclass(frozen=True)
class Knob:
    name: str
    does: str
    verdict: bool = False  # True: can change a verdict or a figure in it (recorded)


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob(CACHE, "the cache root (baselines, work counts, builds, device profiles); "
                "default ~/.cache/solforge", verdict=True),
    Knob(SLOTS, "the machine's GPU slot directory; default /tmp/solforge-slots"),
    Knob(SLOT_HELD, "set by solforge for a child started inside a slot hold it must not "
                    "wait for (internal)"),
    Knob(TIMING_CORE, "the CPU core CPU timings run on; default the highest allowed core",
         verdict=True),
    Knob(QUIET_DEVICE, "1: other evaluators' runners are paused while one is timed",
         verdict=True),
    Knob(DEVICE_MEMORY_MB, "the device memory (MiB) admitted workloads may use; default "
                           "the GPU's total less 10%", verdict=True),
    Knob(JUDGE_SLACK_MB, "how far (MiB) above its idle floor a judge may stay before it is "
                         "replaced; default 1024 on a GPU, 256 on a CPU"),
    Knob(SPARES, "runners a judge keeps started ahead of need"),
    Knob(RUNNER_FORK, "0: every CPU runner starts as a new Python process instead of being "
                      "forked from the judge's runner zygote (bench/runner/zygote.py)"),
    Knob(COMPILE_WARMUP_S, "seconds a torch.compile baseline may spend compiling one "
                           "workload before it is recorded unavailable (default 90); a "
                           "cached verdict stands until --fresh-baselines", verdict=True),
    Knob(HARDEN_GPU, "1: GPU runs get the CPU runs' capability drop and non-dumpable judge",
         verdict=True),
    Knob(FS_VIEW, "0: runners and shell commands see the filesystem as this user does "
                  "(no read-only view; the evaluator's self-check still detects changes)",
         verdict=True),
    Knob(CUDA_ARCH, "the architecture CUDA C++ solutions compile for (sm_90a, ...)",
         verdict=True),
    Knob(LLM_CONFIG, "the LLM endpoints' TOML file; default ~/.config/solforge/llm.toml"),
    Knob(SERVE_TOKEN, "the bearer token `solforge serve` requires and its clients send "
                      "(never passed to a judge: secret-looking names are dropped)"),
    Knob(SERVE_URL, "the reward server the trainer adapters call; default "
                    "http://127.0.0.1:8471"),
    Knob(RAY_ACTOR, "set by solforge in a Ray judge actor, inherited by its judges: the "
                    "mark its orphan guard kills by once the actor is gone"),
)}


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


def _number(name: str, what: str) -> float | None:
    v = _raw(name)
    if not v:
        return None
    try:
        return float(v)
    except ValueError:
        raise ValueError(f"{name}={v!r}: give {what}") from None


def cache_dir() -> Path:
    """The solforge cache root (created): ``$SOLFORGE_CACHE``, else ``~/.cache/solforge``."""
    v = _raw(CACHE)
    root = Path(v).expanduser() if v else Path.home() / ".cache" / "solforge"
    root.mkdir(parents=True, exist_ok=True)
    return root


def slots_dir() -> Path | None:
    """``$SOLFORGE_SLOTS`` when set (the slot directory is chosen in ``measure/slots.py``)."""
    v = _raw(SLOTS)
    return Path(v) if v else None


def held_slots() -> list[str]:
    """The slot locks a parent process holds for this one (``slots.slot_env``)."""
    return [p for p in os.environ.get(SLOT_HELD, "").split(os.pathsep) if p]


def timing_core() -> int | None:
    """``$SOLFORGE_TIMING_CORE``, or None when unset or not a core number."""
    v = _raw(TIMING_CORE)
    return int(v) if v.isdigit() else None


def quiet_device() -> bool:
    return _raw(QUIET_DEVICE) == "1"


def device_memory_mb() -> float | None:
    return _number(DEVICE_MEMORY_MB, "the device's memory in MiB")


def judge_slack_mb() -> float | None:
    """``$SOLFORGE_JUDGE_SLACK_MB``, or None when unset or not a number."""
    try:
        return _number(JUDGE_SLACK_MB, "MiB")
    except ValueError:
        return None


def spares() -> int | None:
    v = _raw(SPARES)
    return int(v) if v.isdigit() else None


def runner_fork() -> bool:
    """Whether CPU runners are forked from a runner zygote (default on)."""
    return _raw(RUNNER_FORK) != "0"


def compile_warmup_s() -> float | None:
    """``$SOLFORGE_COMPILE_WARMUP_S``, or None when unset (a malformed or non-positive
    value is an error naming the variable)."""
    v = _number(COMPILE_WARMUP_S, "seconds, a number above 0")
    if v is not None and v <= 0:
        raise ValueError(f"{COMPILE_WARMUP_S}={_raw(COMPILE_WARMUP_S)!r}: give seconds, "
                         "a number above 0")
    return v


def harden_gpu() -> bool:
    return _raw(HARDEN_GPU) == "1"


def fs_view() -> bool:
    """Whether contained children get the read-only filesystem view (default on)."""
    return _raw(FS_VIEW) != "0"


def cuda_arch() -> str | None:
    return _raw(CUDA_ARCH) or None


def llm_config() -> Path | None:
    v = _raw(LLM_CONFIG)
    return Path(v).expanduser() if v else None


def serve_token() -> str | None:
    """``$SOLFORGE_SERVE_TOKEN``: the reward server's bearer token, or None when unset."""
    return _raw(SERVE_TOKEN) or None


def serve_url() -> str | None:
    """``$SOLFORGE_SERVE_URL``: where the trainer adapters find the reward server."""
    return _raw(SERVE_URL) or None


def verdict_knobs() -> dict[str, str]:
    """The knobs that can change a verdict and are set now, with their values."""
    return {name: _raw(name) for name, k in KNOBS.items() if k.verdict and _raw(name)}
