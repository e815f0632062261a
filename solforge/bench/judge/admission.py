"""Memory-aware admission: how much device memory a workload's evaluation needs, and a
ledger, shared by every judge on the machine, that admits it only while it fits.

Several evaluators share one GPU (``solforge optimize --workers 3``). The device's slot
(``slots.py``) serialises their kernels, but not their memory: each judge holds its
reference, its input sets and its goldens, and each runner its model and its copies, while
it waits for the slot. On KernelBench files at their real sizes (inputs of several GB)
three evaluators together asked an H200 for more than it has, and the out-of-memory of
one became another candidate's verdict.

- :func:`estimate` sizes a workload before anything of it is on the device: the inputs
  and the reference's weights counted on the ``meta`` device (no memory, no kernels), then
  the harness's multiples of them (:func:`footprint`). After the first trial it is sized
  again from what the reference and the candidate really used (``MemoryPlan.measured_mb``).
- :func:`input_sets` picks how many timing input sets are in flight: three for small
  problems, down to one for those whose footprint would take more than half the device.
  Every timed call still gets fresh values at a fresh address (``timing.fresh_inputs``).
- :class:`DeviceLedger` is a JSON file beside the device's slot lock: one ticket per
  admitted workload (pid, MiB). A ticket is granted while the tickets together fit in the
  device's capacity (or nothing else is admitted: a workload larger than the device runs
  alone and meets its own out-of-memory). ``alone`` tickets wait until the device is empty
  and keep new tickets out meanwhile: the retry of an evaluation whose out-of-memory came
  beside others (``bench/judge/pipeline.py``). Tickets of dead processes are dropped.

Not covered: processes that do not use solforge (their memory only shows as less free
memory when a ticket is granted); the estimate is the harness's arithmetic, not a
measurement of the candidate's workspace before its first call; host memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from solforge import env
from solforge.bench.measure.slots import _lock_path, _open
from solforge.problems.spec import call_with_params

MB = float(1 << 20)
CAPACITY_ENV = env.DEVICE_MEMORY_MB
MAX_SETS = 3                 # the timing pool of a small problem (checks.POOL_SETS)
SHARE = 0.5                  # a workload's footprint may take this much of the device
HOLD_MB = 2048.0             # timing.TimingConfig.hold_bytes: earlier calls' inputs
RETAIN_MB = 2048.0           # timing.RETAIN_BYTES: timed outputs the runner keeps
BATCH_MB = 2048.0            # baselines.BATCH_MAX_BYTES: the host clock's prepared batch
CONTEXT_MB = 1024.0          # a CUDA context, cuBLAS/cuDNN handles and workspaces
GOLDEN_MAX_MB = 1024.0       # the float64 golden is skipped beyond 2**26 elements


@dataclass
class Sizes:
    """The sizes a footprint is made of (MiB); None where counting failed."""

    inputs_mb: float | None = None    # one input set
    weights_mb: float | None = None   # the reference's parameters and buffers
    outputs_mb: float | None = None   # one call's outputs (known after the first trial)


def _tensor_mb(xs: Any) -> float:
    if isinstance(xs, torch.Tensor):
        return xs.numel() * xs.element_size() / MB
    if isinstance(xs, (list, tuple)):
        return sum(_tensor_mb(x) for x in xs)
    if isinstance(xs, dict):
        return sum(_tensor_mb(x) for x in xs.values())
    return 0.0


def estimate(module: ModuleType, params: dict[str, Any], init_args: list[Any]) -> Sizes:
    """One input set and the reference's weights, counted on the meta device. A
    ``get_inputs`` or a constructor that needs real values (``.item()``, data-dependent
    shapes) leaves its part unknown: the first trial's measurement sizes it then."""
    sizes = Sizes()
    p = dict(params)
    try:
        with torch.device("meta"):
            xs = call_with_params(module.get_inputs, p)
        sizes.inputs_mb = _tensor_mb(xs)
    except Exception:  # noqa: BLE001 - any failure only means "not known yet"
        pass
    try:
        with torch.device("meta"):
            model = module.Model(*init_args)
        if isinstance(model, torch.nn.Module):
            sizes.weights_mb = (sum(_tensor_mb(t) for t in model.parameters())
                                + sum(_tensor_mb(t) for t in model.buffers()))
    except Exception:  # noqa: BLE001
        pass
    return sizes


def footprint(s: Sizes, sets: int) -> float:
    """MiB the judge and the runner together hold at the evaluation's peak (the timing
    phase) with ``sets`` timing input sets: both models; the judge's pool and the clone it
    sends; the runner's own copy of the pool, its fresh copy per call and the earlier
    calls' inputs it keeps (fresh addresses); the outputs it keeps for the re-check; the
    reference's outputs, the host clock's batch, the golden, two CUDA contexts."""
    x = s.inputs_mb or 0.0
    w = s.weights_mb or 0.0
    o = s.outputs_mb if s.outputs_mb is not None else x
    golden = min(2.0 * (x + w), GOLDEN_MAX_MB)
    return (2 * w + (3 * sets + 1) * x + min(HOLD_MB, 8 * x) + min(RETAIN_MB, 4 * o)
            + 2 * o + min(BATCH_MB, 8 * x) + golden + 2 * CONTEXT_MB)


def input_sets(s: Sizes, capacity_mb: float | None) -> int:
    """The most timing input sets (3 at most, 1 at least) whose footprint fits in
    :data:`SHARE` of the device."""
    if capacity_mb is None:
        return MAX_SETS
    for k in range(MAX_SETS, 0, -1):
        if footprint(s, k) <= SHARE * capacity_mb:
            return k
    return 1


def capacity_mb(device: str) -> float | None:
    """What the device offers to admitted workloads: ``SOLFORGE_DEVICE_MEMORY_MB``, else a
    GPU's total memory less 10% (fragmentation, the runners' spare contexts); None on a
    CPU without the variable (host memory is limited per runner, ``bench/runner/sandbox.py``)."""
    given = env.device_memory_mb()
    if given is not None:
        return given
    if device.startswith("cuda") and torch.cuda.is_available():
        _free, total = torch.cuda.mem_get_info(torch.device(device))
        return 0.9 * total / MB
    return None


@dataclass
class Ticket:
    """One admitted workload on the ledger."""

    token: str
    mb: float
    alone: bool
    neighbours: int = 0          # other tickets on the device when this one was granted
    waited_s: float = 0.0
    # the most other tickets seen while this one was held; a ticket granted to another
    # evaluation meanwhile counts even if it was gone by the next look
    peak_neighbours: int = 0
    serial: int = 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class DeviceLedger:
    """The device's tickets, in a JSON file beside its slot lock (see the module doc)."""

    def __init__(self, device: str, capacity: float | None = None) -> None:
        self.device = device
        self.capacity = capacity
        base = _lock_path(device)[:-len(".lock")]
        self.path = base + ".memory.json"
        self.lock_path = base + ".memory.lock"

    @contextlib.contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        fd = _open(self.lock_path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                with open(self.path) as f:
                    state = json.load(f)
            except (OSError, ValueError):
                state = {}
            state.setdefault("tickets", {})
            state.setdefault("alone_waiting", {})
            for table in (state["tickets"], state["alone_waiting"]):
                for token in [t for t, e in table.items() if not _alive(int(e["pid"]))]:
                    del table[token]
            yield state
            tmp = f"{self.path}.{os.getpid()}.tmp"
            fd_w = _open(tmp, os.O_WRONLY | os.O_TRUNC)
            with os.fdopen(fd_w, "w") as f:
                json.dump(state, f)
            os.replace(tmp, self.path)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def tickets(self) -> dict[str, dict[str, Any]]:
        with self._state() as st:
            return dict(st["tickets"])

    def _fits(self, st: dict[str, Any], token: str, mb: float, alone: bool) -> bool:
        others = {t: e for t, e in st["tickets"].items() if t != token}
        if alone:
            return not others
        if any(e.get("alone") for e in others.values()):
            return False
        if any(t != token for t in st["alone_waiting"]):
            return False  # an evaluation waits to run alone: let the device drain
        if not others or self.capacity is None:
            return True
        return sum(float(e["mb"]) for e in others.values()) + mb <= self.capacity

    def admit(self, mb: float, alone: bool = False,
              on_wait: Callable[[bool], None] | None = None, poll_s: float = 0.05,
              timeout_s: float | None = None) -> Ticket:
        """Wait until ``mb`` fits beside the other tickets (``alone``: until there are
        none), then hold a ticket for it. ``on_wait(True)`` is called when waiting starts
        and ``on_wait(False)`` when it ends."""
        token = uuid.uuid4().hex
        t0 = time.monotonic()
        waiting = False
        try:
            while True:
                with self._state() as st:
                    if self._fits(st, token, mb, alone):
                        st["alone_waiting"].pop(token, None)
                        n = len(st["tickets"])
                        st["serial"] = int(st.get("serial", 0)) + 1
                        st["tickets"][token] = {"pid": os.getpid(), "mb": round(mb, 1),
                                                "alone": alone, "since": time.time()}
                        return Ticket(token, mb, alone, neighbours=n,
                                      waited_s=time.monotonic() - t0, peak_neighbours=n,
                                      serial=st["serial"])
                    if alone:
                        st["alone_waiting"][token] = {"pid": os.getpid()}
                if not waiting and on_wait is not None:
                    on_wait(True)
                waiting = True
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    raise TimeoutError(f"{mb:.0f} MiB did not fit on {self.device} within "
                                       f"{timeout_s:.0f} s")
                time.sleep(poll_s)
        finally:
            if waiting:
                if on_wait is not None:
                    on_wait(False)
                if alone:
                    with self._state() as st:
                        st["alone_waiting"].pop(token, None)

    def resize(self, ticket: Ticket, mb: float) -> None:
        """The workload's size once measured (never waits: it is on the device already)."""
        ticket.mb = mb
        with self._state() as st:
            if ticket.token in st["tickets"]:
                st["tickets"][ticket.token]["mb"] = round(mb, 1)
            ticket.peak_neighbours = max(ticket.peak_neighbours, len(st["tickets"]) - 1)

    def neighbours(self, ticket: Ticket) -> int:
        """Other tickets on the device now (the most seen is kept in the ticket)."""
        with self._state() as st:
            n = len([t for t in st["tickets"] if t != ticket.token])
        ticket.peak_neighbours = max(ticket.peak_neighbours, n)
        return n

    def leave(self, ticket: Ticket) -> None:
        with self._state() as st:
            st["tickets"].pop(ticket.token, None)
            if int(st.get("serial", 0)) > ticket.serial or st["tickets"]:
                ticket.peak_neighbours = max(ticket.peak_neighbours, 1, len(st["tickets"]))

    @contextlib.contextmanager
    def admitted(self, mb: float, alone: bool = False,
                 on_wait: Callable[[bool], None] | None = None) -> Iterator[Ticket]:
        ticket = self.admit(mb, alone, on_wait)
        try:
            yield ticket
        finally:
            self.leave(ticket)
