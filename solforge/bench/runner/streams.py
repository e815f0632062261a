"""Work a call leaves running on streams its caller never waits for (the runner's check).

A caller reads a solution's outputs on its own (current) stream. A solution that writes
them, or goes on working, on a side stream the current stream does not wait for hands back
outputs that race with their reader, and work that runs past the call (SOL-ExecBench's
``stream_injection`` sample). The timing window covers every stream (CUPTI), so such work
gains no time there; this check makes it a verdict of its own. Right after the call, and
before any device-wide synchronize:

1. the current stream alone is synchronized, and a copy of each output is taken on it:
   what the caller would read;
2. a device-wide synchronize is timed: work still pending on another stream shows as its
   duration. With nothing pending it returns in microseconds, so the bar is low
   (:data:`PENDING_MS`); SOL-ExecBench's sample (an fp32 8192-cube matmul on a side stream)
   still had 1.3-1.4 ms left at this point on an H200 with TF32 off, and none with it on
   (benchmarks/results/2026-12-04-h200-s16). A thread taken off
   its core during the wait would look like pending work: the wait must also have spent
   that long on the CPU (CUDA spins while it waits, the default where a machine has more
   cores than GPUs);
3. the copies are compared with the outputs after that synchronize: an output still being
   written when the caller's stream was done differs.

Not covered: side work shorter than :data:`PENDING_MS` whose outputs were complete before
the copy ran (a race the hardware happened to win), side work left while the process waits
by blocking rather than spinning (``cudaDeviceScheduleBlockingSync``: the wait costs no CPU
time, so step 2 cannot tell it from a descheduled thread; step 3 still applies), work on
the CPU (the thread check and the latency figure cover those), and CPU devices (one
stream: nothing to check).
"""

from __future__ import annotations

import time
from typing import Any

#: device-wide work still running this long after the caller's stream was done is flagged
#: (an idle device's synchronize takes ~0.01 ms)
PENDING_MS = 0.5


def unjoined_work(torch: Any, device: Any, outputs: list[Any]) -> str | None:
    """A sentence saying what was left on another stream, or None (see the module)."""
    if getattr(device, "type", "cpu") != "cuda":
        return None
    torch.cuda.current_stream(device).synchronize()
    tensors = [o for o in outputs if isinstance(o, torch.Tensor)]
    seen = [t.detach().clone() for t in tensors]
    torch.cuda.current_stream(device).synchronize()
    t0, c0 = time.perf_counter(), time.thread_time()
    torch.cuda.synchronize(device)
    pending_ms = (time.perf_counter() - t0) * 1e3
    spun_ms = (time.thread_time() - c0) * 1e3
    changed = [i for i, (a, b) in enumerate(zip(seen, tensors))
               if not torch.equal(a, b) and not _same_with_nans(torch, a, b)]
    if changed:
        return (f"output(s) {changed} were still being written on another stream when the "
                "caller's stream was done (the caller would read them half-written)")
    if pending_ms > PENDING_MS and spun_ms > PENDING_MS:
        return (f"the device was still busy {pending_ms:.1f} ms after the caller's stream "
                "was done: work on a stream the caller never waits for")
    return None


def _same_with_nans(torch: Any, a: Any, b: Any) -> bool:
    if not (a.is_floating_point() or a.is_complex()):
        return False
    return bool(torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0))
                and torch.equal(torch.isnan(a), torch.isnan(b)))
