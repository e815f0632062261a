"""Memory-aware admission: how much device memory a workload's evaluation needs, and a
ledger, shared by every judge on the machine, that admits it only while it fits.

Several evaluators share one GPU (``solforge optimize --workers 3``). The device's slot
(``slots.py``) serialises their kernels, but not their memory: each judge holds its
reference, its input sets and its goldens, and each runner its model and its copies, while
it waits for the slot. On KernelBench files at their real sizes (inputs of several GB)
three evaluators together asked an H200 for more than it has, and the out-of-memory of
one became another candidate's verdict.

- :func:`estimate` sizes a workload before anything of it is on the device: the inputs
  and the reference's weights counted on the ``meta`` device (no memory, no kernels);
  :func:`phases` says what the judge and the runner each hold at the peak of each phase
  of the evaluation, :func:`footprint` the largest sum. After the first trial it is sized
  again from its outputs and what the reference and the candidate really used
  (:func:`measured_footprint`, ``MemoryPlan.measured_mb``). A workload whose footprint
  with one input set is larger than the device is refused before it runs
  (:func:`refusal`): on an 80 GB H100 KernelBench's 51_Argmax ran out of memory halfway
  instead, planned at 58,356 MiB while the judge held 51,212 MiB and its runner 16.7 GB
  when the runner asked for 8 GB more (benchmarks/results/2026-12-05-h100-s18).
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
measurement of the candidate's workspace before its first call, nor of the reference's
intermediates, nor of a compile baseline's graphs and pools; host memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from solforge.bench.judge import arbitration
from solforge.bench.measure.slots import _lock_path, _open
from solforge.problems.spec import call_with_params

MB = float(1 << 20)
CAPACITY_ENV = env.DEVICE_MEMORY_MB
MAX_SETS = 3                 # the timing pool of a small problem (checks.POOL_SETS)
SHARE = 0.5                  # a workload's footprint may take this much of the device
HOLD_MB = 2048.0             # timing.TimingConfig.hold_bytes: earlier calls' inputs
RETAIN_MB = 2048.0           # timing.RETAIN_BYTES: timed outputs the runner keeps
BATCH_MB = 2048.0            # timing.BATCH_MAX_BYTES: the host clock's prepared batch
CALLS = 200                  # timing.TimingConfig.max_calls: timed calls at most
CHECKED = 4                  # performance.RETAIN: timed calls' outputs the judge re-checks
CONTEXT_MB = 1024.0          # a CUDA context, cuBLAS/cuDNN handles and workspaces, L2 flush


@dataclass
class Sizes:
    """The sizes a footprint is made of (MiB); None where counting failed."""

    inputs_mb: float | None = None    # one input set
    weights_mb: float | None = None   # the reference's parameters and buffers
    outputs_mb: float | None = None   # one call's outputs (known after the first trial)
    scratch_mb: float = 0.0           # fresh_inputs' fp32 draw beside its copy of the set
    # the same in float64, floating tensors only: what a float64 run of the reference
    # copies (arbitration.float64_outputs); None where not counted (then taken as fp32's
    # twice, and unknown outputs as large as the inputs)
    inputs_f64_mb: float | None = None
    weights_f64_mb: float | None = None
    outputs_f64_mb: float | None = None


def _tensors(xs: Any) -> list[torch.Tensor]:
    if isinstance(xs, torch.Tensor):
        return [xs]
    if isinstance(xs, (list, tuple)):
        return [t for x in xs for t in _tensors(x)]
    if isinstance(xs, dict):
        return [t for x in xs.values() for t in _tensors(x)]
    return []


def tensor_mb(xs: Any) -> float:
    """MiB of the tensors in ``xs`` (lists, tuples, dicts of them)."""
    return sum(t.numel() * t.element_size() for t in _tensors(xs)) / MB


def float64_mb(xs: Any) -> float:
    """MiB of the floating tensors in ``xs`` once copied to float64."""
    return sum(8 * t.numel() for t in _tensors(xs) if t.is_floating_point()) / MB


def golden_mb(s: Sizes) -> float:
    """MiB a float64 run of the reference takes (``arbitration.float64_outputs``): the
    model, the floating inputs and the outputs in float64, and the outputs' three error
    terms; 0 where none runs: outputs above ``GOLDEN_MAX_ELEMENTS`` elements (unknown
    outputs are taken as large as the inputs), none floating, or parameters or inputs
    above ``ARBITRATION_MAX_ELEMENTS``. A reduction of KernelBench's 8 GiB inputs to a
    small output counts 16 GiB here."""
    x64 = s.inputs_f64_mb if s.inputs_f64_mb is not None else 2 * (s.inputs_mb or 0.0)
    w64 = s.weights_f64_mb if s.weights_f64_mb is not None else 2 * (s.weights_mb or 0.0)
    if s.outputs_mb is None:
        o64 = x64
    else:
        o64 = s.outputs_f64_mb if s.outputs_f64_mb is not None else 2 * s.outputs_mb
    per_element = 8 / MB
    if not o64 or o64 > arbitration.GOLDEN_MAX_ELEMENTS * per_element \
            or max(x64, w64) > arbitration.ARBITRATION_MAX_ELEMENTS * per_element:
        return 0.0
    return x64 + w64 + 4 * o64


def _scratch_mb(xs: Any) -> float:
    """What ``timing.fresh_inputs`` draws beside its copy: an fp32 tensor of the size of
    each floating input but a contiguous fp32 one (and an fp32 copy of a float64 or 8-bit
    input)."""
    n = 0
    for t in _tensors(xs):
        if t.is_floating_point() and not (t.dtype == torch.float32 and t.is_contiguous()):
            promoted = t.dtype in (torch.float32, torch.float16, torch.bfloat16)
            n += 4 * t.numel() * (1 if promoted else 2)
    return n / MB


def estimate(module: ModuleType, params: dict[str, Any], init_args: list[Any]) -> Sizes:
    """One input set and the reference's weights, counted on the meta device. A
    ``get_inputs`` or a constructor that needs real values (``.item()``, data-dependent
    shapes) leaves its part unknown: the first trial's measurement sizes it then. The
    outputs are known after the first trial: a forward on the meta device could leave a
    meta tensor in a cache of the reference's (a module's, a library's) that its real
    calls would then meet."""
    sizes = Sizes()
    p = dict(params)
    try:
        with torch.device("meta"):
            xs = call_with_params(module.get_inputs, p)
        sizes.inputs_mb = tensor_mb(xs)
        sizes.inputs_f64_mb = float64_mb(xs)
        sizes.scratch_mb = _scratch_mb(xs)
    except Exception:  # noqa: BLE001 - any failure only means "not known yet"
        pass
    try:
        with torch.device("meta"):
            model = module.Model(*init_args)
        if isinstance(model, torch.nn.Module):
            sizes.weights_mb = (sum(tensor_mb(t) for t in model.parameters())
                                + sum(tensor_mb(t) for t in model.buffers()))
            sizes.weights_f64_mb = (sum(float64_mb(t) for t in model.parameters())
                                    + sum(float64_mb(t) for t in model.buffers()))
    except Exception:  # noqa: BLE001
        pass
    return sizes


def phases(s: Sizes, sets: int) -> dict[str, tuple[float, float]]:
    """(judge MiB, runner MiB) each process holds at the peak of each phase of a workload
    with ``sets`` timing input sets (``x`` one input set, ``w`` the weights, ``o`` one
    call's outputs, unknown outputs taken as large as the inputs). Both processes hold
    their model throughout; a process gives its cached blocks back before the other's
    heavy phase (``memory.hand_over``, ``runner/operations.op_time``).

    - correctness: the judge holds a trial's inputs and one copy of them (the reference's,
      or the one the runner reads over CUDA IPC) with the reference's two answers, or a
      third input set while a signed draw is replaced by the file's own; or, comparing,
      the reference's outputs, the candidate's and a flattened copy. The runner its
      outputs.
    - timing (the candidate's loop): the judge its pool and the copy of it the runner
      reads; the runner its own copy of the pool, earlier calls' inputs it holds for new
      addresses (the last at least), the new call's and its scratch, the outputs it keeps.
    - baselines (the runner stopped, holding its kept outputs): the judge its pool and the
      same loop, or its wall-clock batch.
    - host batch: the judge its pool and the copy sent; the runner the batch it prepares.
    - float64, where one can run (:func:`golden_mb`; a run of the reference: a trial's record
      statistics, or an arbitration of a trial's, a timed call's or the batch's last
      output): the judge its pool, one rebuilt input set, the re-checked outputs and the
      reference's, and the float64 copies; the runner its kept outputs or its batch.
    """
    x = s.inputs_mb or 0.0
    w = s.weights_mb or 0.0
    o = s.outputs_mb if s.outputs_mb is not None else x
    prior = max(x, min(HOLD_MB, CALLS * x))
    fresh = x + s.scratch_mb
    kept = max(o, min(RETAIN_MB, CALLS * o))
    batch = max(x, min(BATCH_MB, CALLS * x)) + s.scratch_mb
    p = {
        "correctness": (w + max(3 * x + 2 * o, x + 3 * o), w + 2 * o),
        "timing": (w + 2 * sets * x, w + sets * x + prior + fresh + kept + o),
        "baselines": (w + sets * x + max(prior + fresh, batch) + o, w + kept),
        "host batch": (w + 2 * sets * x, w + batch + o),
    }
    golden = golden_mb(s)
    if golden:
        p["float64"] = (w + (sets + 1) * x + (CHECKED + 1) * o + golden,
                        w + max(kept, batch + o))
    return p


def footprint(s: Sizes, sets: int) -> float:
    """MiB the judge and the runner together hold at the evaluation's peak with ``sets``
    timing input sets: the largest sum of :func:`phases`, and two CUDA contexts. For
    KernelBench's 51_Argmax (8190 MiB of input, 4 MiB of output, one set) the peak is the
    candidate's timing: the judge 2x, the runner 3x and its kept outputs, 43,802 MiB in
    all; before its outputs are known (taken as large as its inputs) 62,450 MiB."""
    return max(j + r for j, r in phases(s, sets).values()) + 2 * CONTEXT_MB


def measured_footprint(s: Sizes, sets: int, judge_mb: float, runner_mb: float) -> float:
    """The footprint once the correctness trials ran: their real peaks (``judge_mb``,
    ``runner_mb``: each process's allocator), or a later phase of :func:`phases` with what
    the candidate's process used beyond its estimate there (its own workspace) added."""
    p = phases(s, sets)
    own = max(0.0, runner_mb - p["correctness"][1])
    later = max(j + r + own for phase, (j, r) in p.items() if phase != "correctness")
    return max(judge_mb + runner_mb, later) + 2 * CONTEXT_MB


def input_sets(s: Sizes, capacity_mb: float | None) -> int:
    """The most timing input sets (3 at most, 1 at least) whose footprint fits in
    :data:`SHARE` of the device."""
    if capacity_mb is None:
        return MAX_SETS
    for k in range(MAX_SETS, 0, -1):
        if footprint(s, k) <= SHARE * capacity_mb:
            return k
    return 1


def refusal(s: Sizes, capacity_mb: float | None) -> str | None:
    """Why a workload cannot run on this device, or None: its footprint with one input set
    (what is certain of it: its unknown outputs and golden left out) is larger than the
    device offers. Said before anything of it is built, instead of an out-of-memory in the
    middle of its evaluation."""
    if capacity_mb is None or s.inputs_mb is None:
        return None
    least = dataclasses.replace(s, outputs_mb=s.outputs_mb or 0.0)
    need = footprint(least, 1)
    if need <= capacity_mb:
        return None
    peak, (judge, runner) = max(phases(least, 1).items(), key=lambda kv: sum(kv[1]))
    return (f"the workload does not fit this device: with one input set of "
            f"{s.inputs_mb:.0f} MiB it needs about {need:.0f} MiB at its peak ({peak}: the "
            f"judge {judge:.0f} MiB, the candidate's process {runner:.0f} MiB, two CUDA "
            f"contexts), and the device offers {capacity_mb:.0f} MiB; evaluate it on a "
            "device with more memory, or at smaller sizes")


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
