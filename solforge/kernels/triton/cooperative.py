"""The one-read cooperative path for rows too long for one program, shared by the row
softmax (``row_softmax``) and the normalisations by row statistics (``row_norm``).

A row that needs all of itself read before any output (a softmax's max and sum, a
LayerNorm's mean and variance) is read twice when it is too long for one program's
registers: once for the statistics, once to write. The cooperative path reads it once:

- ``plan_rows`` (a pure function of rows, row length, SM count and the interpreter flag)
  cuts each row into P pieces of a kernel's chunk and keeps G rows in flight, P x G
  programs that all fit on the device at once;
- program (piece, lane) holds its piece of rows lane, lane + G, ... in registers, writes
  the piece's partial statistics, arrives at the row's counter and waits until all P
  pieces of the row have arrived (``arrive_and_wait``), combines the P partials and writes
  its piece from its registers: one read and one write of DRAM;
- ``launch`` runs a kernel written that way (its ``PHASE`` constexpr) in one launch, its
  lanes cut to what the compiled kernel keeps resident (``resident_per_sm``), or in two
  (``PHASE`` 1, the partials; 2, the combination and the write, reading the piece again)
  under the interpreter, which runs programs one after another and so could not run the
  spin-wait, and on a GPU where not even one row's P programs can be resident at once.

The spin-wait: the grid is sized from the compiled kernel's registers and shared memory so
that every program is resident at once (at most ``PER_SM`` a SM; one a SM when the figures
cannot be read, which any kernel that launches fits), so no program waits on one that
cannot start. Correctness does not rest on that: a wait is bounded (``MAX_SPINS`` polls,
tens of milliseconds), and a program that gives up raises a flag (the counter after the
rows') that ends the others' waits too; the kernel then reads its row whole (in tiles of
``FALLBACK_TILE``) and writes its piece. So when the programs are not all resident
(another stream's kernel or another MPS client holding SMs, two of these launches at once
on two streams) a launch is slowed, never hung, and its output is still right; a row
finished that way can differ in the last bit between pieces. A softmax grid of 3 or 4
programs a SM where 2 fit still finished without a give-up on an H100: the block
scheduler starts programs in grid order, so a lane's P programs start together; that order
is observed, not promised.

Not covered: Triton's cooperative-grid launch (``launch_cooperative_grid``, which would
have the driver refuse a grid that cannot be resident instead of sizing it here); backing
off while polling (a waiting program keeps reading its counter in L2); the flag read every
256 polls is left to GPU runs (the interpreter's tests give up after 2 polls).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import INTERPRET, sm_count

# resident programs a SM at most (fewer when the registers do not allow it): two of a
# piece of 16384 fp32 over 8 warps (128 registers a thread) fill an H100's register file
PER_SM = 2
# the tile of a program that gave up waiting and reads its whole row
FALLBACK_TILE = 128 if INTERPRET else 1024
# polls of a row's counter before a program gives up waiting for it (one L2 round trip
# each, about 0.5 us: some 30 ms; a normal wait is microseconds)
MAX_SPINS = 1 << 16


class RowPlan(NamedTuple):
    """How a kernel covers rows of ``n``: ``kind`` is ``"tile"`` (one program's tile a
    row), ``"coop"`` (one launch, the spin-wait), ``"pieces"`` (the same cut in two
    launches) or ``"rows"`` (the kernel's own paths for the rest); ``pieces`` and
    ``lanes`` are the cooperative grid's P and G (1 and 0 for the other kinds)."""

    kind: str
    pieces: int = 1
    lanes: int = 0


def plan_rows(rows: int, n: int, sms: int, interpret: bool, per_sm: int, chunk: int,
              max_tile: int) -> RowPlan:
    """The path for ``rows`` rows of ``n`` on a device of ``sms`` SMs, ``per_sm`` programs
    of the cooperative kernel resident on each, pieces of ``chunk``: ``"tile"`` up to
    ``max_tile``; cooperative when a row is two pieces or more and its P pieces times the
    rows fill every slot (P x G programs, G = the slots over P, at most the rows: at least
    half the slots are used); under the interpreter (``interpret``) the same cut in two
    launches. Fewer rows, or rows of more pieces than slots, or of one piece, take
    ``"rows"``."""
    if n <= max_tile:
        return RowPlan("tile")
    pieces = -(-n // chunk)
    slots = per_sm * sms
    lanes = min(rows, slots // pieces)
    if pieces < 2 or rows * pieces < slots or not lanes:
        return RowPlan("rows")
    return RowPlan("pieces" if interpret else "coop", pieces, lanes)


@triton.jit
def arrive_and_wait(cnt_ptr, row, R, P, max_spins):
    """Signal that this program's partials of ``row`` are stored, wait for the row's other
    pieces, and return whether all ``P`` arrived. A wait of ``max_spins`` polls, or
    ``cnt_ptr[R]`` set (another program gave up), ends it early: then this program sets
    that flag too and returns False (the caller reads the row whole)."""
    # every thread's stores of the partials are done before the release of the arrival
    tl.debug_barrier()
    arrived = tl.atomic_add(cnt_ptr + row, 1, sem="acq_rel") + 1
    spins = tl.full((), 0, tl.int32)
    while (arrived < P) & (spins < max_spins):
        arrived = tl.atomic_add(cnt_ptr + row, 0, sem="acquire")
        spins += 1
        if spins % 256 == 0:  # the flag now and then: each read is a trip to L2
            if tl.atomic_add(cnt_ptr + R, 0, sem="relaxed") != 0:
                spins = max_spins
    done = arrived >= P
    if not done:
        tl.atomic_xchg(cnt_ptr + R, 1, sem="relaxed")
    return done


def counters(rows: int, device: torch.device) -> torch.Tensor:
    """The rows' arrival counters and, last, the gave-up flag, zeroed."""
    return torch.zeros(rows + 1, dtype=torch.int32, device=device)


def launch(kernel, args: tuple, consts: dict, plan: RowPlan, device: torch.device) -> None:
    """``plan``'s launches of ``kernel`` (a cooperative kernel: grid (piece, lane), a
    ``PHASE`` constexpr; ``args`` hold its counters): one (``coop``), its lanes cut to what
    the compiled kernel keeps resident, or two (``pieces``, and ``coop`` when even one lane
    of P programs would not be resident at once)."""
    p, lanes = plan.pieces, plan.lanes
    if plan.kind == "coop" and device.type == "cuda" and not INTERPRET:  # (tests run
        # the one-launch kernel interpreted, on CPU tensors)
        lanes = min(lanes, resident_per_sm(kernel, args, consts, device)
                    * sm_count(str(device)) // p)
    if plan.kind == "pieces" or not lanes:
        for phase in (1, 2):
            kernel[(p, plan.lanes)](*args, PHASE=phase, **consts)
    else:
        kernel[(p, lanes)](*args, PHASE=0, **consts)


# resident_per_sm's answers by kernel, device, dtypes and constants (each asks a warm-up)
_RESIDENT: dict[tuple, int] = {}


def resident_per_sm(kernel, args: tuple, consts: dict, device: torch.device) -> int:
    """How many programs of ``kernel`` compiled for ``args`` and ``consts`` (``PHASE`` 0)
    a SM holds at once, at most ``PER_SM``, remembered per kernel, device, dtypes and
    constants."""
    key = (kernel.fn.__qualname__ if hasattr(kernel, "fn") else id(kernel), str(device),
           tuple(a.dtype if isinstance(a, torch.Tensor) else None for a in args),
           tuple(sorted(consts.items())))
    if key not in _RESIDENT:
        _RESIDENT[key] = _fits_per_sm(kernel.warmup(*args, PHASE=0, grid=(1,), **consts),
                                      device)
    return _RESIDENT[key]


def _fits_per_sm(compiled, device: torch.device) -> int:
    """How many programs of ``compiled`` a SM holds at once, at most ``PER_SM``: by its
    registers (allocated 256 a warp), threads and shared memory; 1 when the compiled
    kernel's figures cannot be read (a kernel that launches at all fits a SM alone)."""
    try:
        compiled._init_handles()  # loads the module: n_regs is read there
        regs, shared = compiled.n_regs, compiled.metadata.shared
        warps = compiled.metadata.num_warps
    except Exception:  # noqa: BLE001 - Triton internals; the safe answer is 1
        return 1
    props = torch.cuda.get_device_properties(device)
    reg_file = getattr(props, "regs_per_multiprocessor", 65536)
    smem = getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)
    warp_regs = -(-max(regs, 1) * 32 // 256) * 256
    fits = min(reg_file // warp_regs // warps,
               props.max_threads_per_multi_processor // (32 * warps),
               smem // (shared + 1024))  # the driver reserves 1 KiB a block
    return max(1, min(PER_SM, fits))
