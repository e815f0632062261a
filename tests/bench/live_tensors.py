"""A test instrument: the peak bytes of live CPU tensors in a process, per phase and per
function of the harness, written as JSON.

Installed by a problem file (the judge imports it at the start of every evaluation), so
that the judge runs unchanged: a
dispatch mode pushed for good on the process's mode stack sees every ATen op, and keeps
the storages (1 MiB and more) of its outputs and arguments with the number of live
Python tensors on each; a storage counts until its last tensor dies. In the judge the
phase is the one it reports (``Judge._send_phase``), and each allocation is also charged
to the innermost ``solforge.bench`` function on the stack.

Not covered: storages made outside the dispatcher and never passed to an op
(``torch.frombuffer``), bytes that are not tensors (the channel's pickles), storages a
C++ object keeps after its last Python tensor died; the runner (its file system is read-only
to it but for its own directories).
"""

from __future__ import annotations

import json
import os
import sys
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

MIN_BYTES = 1 << 20
_installed: dict[str, Any] = {}


class LiveTensors(TorchDispatchMode):
    """Live storages by address, their bytes, and the peaks (see the module docstring)."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.out = out
        self.bytes: dict[int, int] = {}     # storage address -> bytes
        self.refs: dict[int, int] = {}      # storage address -> live Python tensors on it
        self.seen: set[int] = set()         # ids of the Python tensors being followed
        self.now = 0
        self.phase = "start"
        self.peaks: dict[str, dict[str, int]] = {"all": {"all": 0}, "phase": {},
                                                 "where": {}}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        grew = False
        for t in tree_leaves((out, args, kwargs)):
            if isinstance(t, torch.Tensor):
                grew |= self._follow(t)
        if grew:
            self._record()
        return out

    def _follow(self, t: torch.Tensor) -> bool:
        if id(t) in self.seen or t.device.type != "cpu" or t.is_meta:
            return False
        try:
            st = t.untyped_storage()
            key, n = st.data_ptr(), st.nbytes()
        except Exception:  # noqa: BLE001 - sparse or otherwise storage-less tensors
            return False
        if n < MIN_BYTES or key == 0:
            return False
        self.seen.add(id(t))
        weakref.finalize(t, self._gone, key, id(t))
        self.refs[key] = self.refs.get(key, 0) + 1
        if key in self.bytes:
            return False
        self.bytes[key] = n
        self.now += n
        return True

    def _gone(self, key: int, ident: int) -> None:
        self.seen.discard(ident)
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            self.now -= self.bytes.pop(key)

    def set_phase(self, name: str) -> None:
        self.phase = name
        self._record()

    def _record(self) -> None:
        where = _harness_frame()
        grew = False
        for table, key in (("all", "all"), ("phase", self.phase), ("where", where)):
            if self.now > self.peaks[table].get(key, -1):
                self.peaks[table][key] = self.now
                grew = True
        if grew:
            tmp = f"{self.out}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump({"pid": os.getpid(), **self.peaks}, f)
            os.replace(tmp, self.out)


def _harness_frame() -> str:
    """``caller > callee``: the innermost judge (or baselines) function on the stack and
    the innermost ``solforge.bench`` function, where they differ."""
    names: list[str] = []
    f = sys._getframe(2)
    while f is not None:
        path = f.f_code.co_filename
        if "solforge/bench/" in path:
            names.append(f"{path.rsplit('solforge/bench/', 1)[1]}:{f.f_code.co_name}")
        f = f.f_back
    if not names:
        return "other"
    caller = next((n for n in names if n.startswith(("judge/", "baselines/"))), names[0])
    return caller if caller == names[0] else f"{caller} > {names[0]}"


def in_the_judge() -> bool:
    """Whether this process is a judge (``python -m solforge.bench.judge.process``). What it
    imported says nothing: the test's own process imports the problem file too
    (``load_problem``), often after other tests loaded the judge's modules; a mode pushed
    there stayed on the pytest worker's stack and ran every later test's ``torch.compile``
    calls eagerly (CI, session 33)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == "solforge.bench.judge.process"


def install(out: str) -> None:
    """Follow the judge's tensors from now on, writing the peaks to ``out``; once per
    process, and only in a judge (:func:`in_the_judge`; a runner cannot write outside its
    own directories)."""
    state = sys.modules.get("solforge.bench.judge.state")
    if _installed or state is None or not in_the_judge():
        return
    mode = LiveTensors(out)
    mode.__enter__()  # never left: the process's every op from now on
    _installed["mode"] = mode
    cls = state.Judge
    send = cls._send_phase

    def _send_phase(self: Any, phase: str, extra: dict[str, Any]) -> None:
        mode.set_phase(phase)
        send(self, phase, extra)

    cls._send_phase = _send_phase
