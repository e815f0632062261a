"""Measuring baselines: the reference eager and ``torch.compile``d, timed with the same
function, inputs and seeds as the candidate (:func:`time_baselines`), plus the judge's
own wall clock over a batch (:func:`host_clock`); a re-measurement times fresh baselines
round by round beside the candidate (:class:`Interleaved`). Figures are cached
(``cache.py``); the judge reaches all of this through ``workload.WorkloadBaselines``.

Not covered: a baseline other than eager and ``torch.compile`` (a vendor library, a
hand-written kernel): pass its time as a mapping to the SOL score (``sol/annotate.py``).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from solforge import env
from solforge.bench.baselines import slow
from solforge.bench.baselines.cache import (
    BaselineCache,
    figure_key,
    known_unavailable,
    label,
    note_unavailable,
    tolerance_key,
    unavailable_key,
)
from solforge.bench.measure import inputs as I
from solforge.bench.measure.timing import (
    RETAIN_BYTES,
    Timing,
    TimingConfig,
    batch_size,
    fresh_inputs,
    measure,
)
from solforge.records import EvalOptions, WorkloadResult, median

if TYPE_CHECKING:
    from solforge.problems.spec import Problem, Workload

Phase = Callable[..., None]  # the judge's phase report: phase(name, **details)


def missing_baselines(problem: Problem, w: Workload, cfg: TimingConfig, opts: EvalOptions,
                      fresh: bool = False) -> list[str]:
    """The baseline kinds this workload has no cached figure for, nor a verdict that the
    kind is unavailable (that one holds for fresh measurements too)."""
    unavailable = known_unavailable(problem, w, opts)
    kinds = [k for k in opts.baselines if k not in unavailable]
    if fresh or opts.fresh_baselines:
        too_slow = slow.too_slow(problem, w, opts)  # reused, not compiled again
        return [k for k in kinds if k not in too_slow]
    cache = BaselineCache()
    try:
        return [k for k in kinds
                if cache.get(figure_key(problem, w, opts, label(k, opts), cfg)) is None]
    finally:
        cache.close()


def prepare_baselines(phase: Phase, problem: Problem, ref: Any, w: Workload,
                      pool: list[list[Any]], seeds: list[int], cfg: TimingConfig,
                      opts: EvalOptions, res: WorkloadResult, kinds: list[str],
                      agree: Callable[[Any], dict[str, Any] | None]) -> dict[str, Any]:
    """The baselines ``kinds`` (those :func:`missing_baselines` found), compiled and
    warmed up ahead of timing; each compiled one's agreement with the reference judged by
    ``agree(fn)`` (the judge's: a candidate's correctness trials,
    ``judge/correctness.baseline_agrees``; ``{"within_tolerance": bool, "message"}`` or
    None when nothing can be concluded) and remembered (:func:`note_tolerance`).

    Why: a compile baseline whose own outputs fail the problem's tolerance (cuDNN's TF32
    convolutions under another algorithm, at KernelBench's 1e-4) is a figure no correct
    solution can be held to; the record keeps its time and says so, and the best baseline
    is then eager (``records.best_baseline_ms``).

    The caller holds the device's slot: the warm-up runs the reference's kernels, and a
    reference that ``torch.compile`` cannot settle on (it recompiles on data-dependent
    values, a Python loop over a batch of lengths, say) would hold it for minutes
    (benchmarks/results/FINDINGS.md, "compile warm-up"). So a compile baseline gets
    :data:`COMPILE_WARMUP_S` per workload to compile for each input set of the pool; past
    that, or when a second pass still compiles, it is recorded as unavailable (in the
    cache too, under a key of its own that every timing configuration and a fresh
    re-measurement read, so no later evaluation pays again; ``--fresh-baselines``
    retries) and the evaluation goes on.
    """
    out: dict[str, Any] = {}
    cache = BaselineCache()
    try:
        for kind in kinds:
            name = label(kind, opts)
            if kind == "eager":
                out[kind] = ref
                continue
            phase("baseline", workload=w.name, kind=name)
            t0 = time.monotonic()
            try:
                fn, why = warmed_compile(ref, opts, pool, seeds, torch.device(opts.device))
            except Exception as e:
                res.note(f"{name} baseline failed: {type(e).__name__}: {str(e)[:300]}")
                continue
            if fn is None:
                res.note(f"{name} baseline unavailable: {why}")
                # found now, fresh or not: it holds for every later measurement
                cache.put(unavailable_key(problem, w, opts, name), {"unavailable": why})
                continue
            out[kind] = fn
            slow.remember(problem, w, opts, name, warmup_s=time.monotonic() - t0)
            verdict = agree(fn)
            if verdict is not None:
                cache.put(tolerance_key(problem, w, opts, name), verdict)
    finally:
        cache.close()
    return out


def note_tolerance(problem: Problem, w: Workload, opts: EvalOptions,
                   res: WorkloadResult) -> None:
    """Fill ``res.compile_within_tolerance`` from the cache (the verdict of the check at
    compile time), or False where ``opts.compile_failed`` names the workload, and say in
    the record when the compile baseline failed."""
    if "compile" not in opts.baselines or res.compile_ms is None:
        return
    name = label("compile", opts)
    failed = opts.compile_failed.get(w.name)
    if failed:
        # the baseline's own program failed a candidate's trials (EvalOptions.compile_failed):
        # the check at compile time passed on its own trials, these found what it missed
        res.compile_within_tolerance = False
        res.note(f"{name} baseline outside the problem's tolerance (its own program, judged "
                 f"as a candidate, failed: {failed[:200]}): its time is kept, the best "
                 "baseline is eager")
        return
    cache = BaselineCache()
    try:
        hit = cache.get(tolerance_key(problem, w, opts, name))
    finally:
        cache.close()
    if hit is None:
        return
    res.compile_within_tolerance = bool(hit["within_tolerance"])
    if not res.compile_within_tolerance:
        res.note(f"{name} baseline outside the problem's tolerance ({hit['message']}): "
                 "its time is kept, the best baseline is eager")


COMPILE_WARMUP_S = 90.0  # compile time a compile baseline may spend on one workload


class CompileOverrun(BaseException):
    """Raised into a compile that ran past its budget (:func:`compile_deadline`). A
    ``BaseException``, as ``KeyboardInterrupt`` is, so that no ``except Exception`` inside
    Dynamo or Inductor turns it into a graph break or a fallback that goes on compiling."""


@contextmanager
def compile_deadline(seconds: float) -> Iterator[bool]:
    """Interrupt the code inside after ``seconds`` by raising :class:`CompileOverrun`
    (a ``SIGALRM`` timer); yields whether the deadline is armed.

    Why: a budget checked between calls cannot stop one call's compile, and a reference
    with a long Python loop is one such call: ``torch.compile`` unrolls it (RWKV-4's WKV
    recurrence, 1,024 steps, compiled for more than five minutes on an H100, holding the
    device's slot while three other evaluations' timings waited: benchmarks/results/
    2026-12-06-h100-s25). Dynamo and Inductor are Python, so the exception lands between
    bytecodes; a call into C (a Triton build, a synchronise) ends first.

    Not covered: armed only on the main thread of a process whose ``SIGALRM`` nobody else
    handles (the judge's case); elsewhere this yields False and only the caller's checks
    between calls bound the compile. Compile workers Inductor started in other processes
    are not stopped (their results land in its cache)."""
    if seconds <= 0:
        raise CompileOverrun()
    armed = (threading.current_thread() is threading.main_thread()
             and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
             and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))
    if not armed:
        yield False
        return

    def overrun(_signum: int, _frame: Any) -> None:
        raise CompileOverrun()

    signal.signal(signal.SIGALRM, overrun)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def warmed_compile(ref: Any, opts: EvalOptions, pool: list[list[Any]], seeds: list[int],
                   device: torch.device, budget_s: float | None = None
                   ) -> tuple[Any, str | None]:
    """``torch.compile(ref)`` run on every input set of the pool, twice: (fn, None) once
    a second pass compiles nothing new, else (None, why). Bounded by ``budget_s`` (default
    ``$SOLFORGE_COMPILE_WARMUP_S``, else :data:`COMPILE_WARMUP_S`): checked between
    calls, and within one call by :func:`compile_deadline` (after an overrun Dynamo's
    caches are reset, so the half-built graph is not reused)."""
    from torch._dynamo.utils import counters

    if budget_s is None:
        budget_s = env.compile_warmup_s() or COMPILE_WARMUP_S

    fn = baseline_fn(ref, "compile", opts)
    t0 = time.monotonic()

    def still_compiling() -> str:
        return (f"torch.compile was still compiling after {time.monotonic() - t0:.0f} s "
                f"(limit {budget_s:.0f} s per workload)")

    try:
        with torch.no_grad(), compile_deadline(budget_s):
            for rnd in range(2):
                before = counters["stats"]["unique_graphs"]
                for i, args in enumerate(pool):
                    fn(*fresh_inputs(args, seeds[i % len(seeds)] + 17 * (rnd + 1)))
                    I.synchronize(device)
                    if time.monotonic() - t0 > budget_s:
                        return None, still_compiling()
                if rnd == 1 and counters["stats"]["unique_graphs"] > before:
                    return None, ("torch.compile compiled new graphs for inputs it had "
                                  "already seen: its time would include compilation")
    except CompileOverrun:
        torch._dynamo.reset()
        return None, still_compiling()
    return fn, None


def time_baselines(phase: Phase, problem: Problem, ref: Any, w: Workload,
                   pool: list[list[Any]], seeds: list[int], cfg: TimingConfig,
                   opts: EvalOptions, res: WorkloadResult,
                   prepared: dict[str, Any] | None = None) -> dict[str, dict]:
    """Time (or fetch cached) baselines; fill the result's eager/compile fields.

    ``prepared`` holds the functions :func:`prepare_baselines` made for the kinds without
    a cached figure; a kind in neither is unavailable (its note is already recorded).
    """
    device = torch.device(opts.device)
    prepared = {} if prepared is None else prepared
    cache = BaselineCache()
    found: dict[str, dict] = {}
    unavailable = known_unavailable(problem, w, opts)
    note_unavailable(res, opts, unavailable)
    try:
        for kind in opts.baselines:
            if kind in unavailable:
                continue
            name = label(kind, opts)
            key = figure_key(problem, w, opts, name, cfg)
            hit = None if opts.fresh_baselines else cache.get(key)
            if hit is None:
                fn = prepared.get(kind)
                if fn is None:
                    continue
                phase("baseline", workload=w.name, kind=name)
                try:
                    hit = time_fn(fn, pool, seeds, cfg, device)
                except Exception as e:
                    res.note(f"{name} baseline failed: {type(e).__name__}: {str(e)[:300]}")
                    continue
                cache.put(key, hit)
                if kind != "eager":  # the figure a slow warm-up's re-measurement reuses
                    slow.remember(problem, w, opts, name, figure=hit)
            found[kind] = hit
            if kind == "eager":
                res.eager_ms = hit["kernel_ms"]
            else:
                res.compile_ms = hit["kernel_ms"]
    finally:
        cache.close()
    return found


def baseline_fn(ref: Any, kind: str, opts: EvalOptions) -> Any:
    """The reference as baseline ``kind`` runs it: eager, or freshly ``torch.compile``d."""
    if kind == "eager":
        return ref
    if kind != "compile":
        raise ValueError(f"unknown baseline {kind!r}; use eager or compile")
    from torch import _dynamo

    _dynamo.reset()  # a fresh graph per workload: no recompile limit, no stale guards
    return torch.compile(ref, mode=None if opts.compile_mode == "default" else opts.compile_mode)


def time_fn(fn: Any, pool: list[list[Any]], seeds: list[int], cfg: TimingConfig,
            device: torch.device) -> dict:
    """One baseline's figures: the timing loop's kernel and latency times, and the judge's
    wall clock over a batch."""
    with torch.no_grad():
        t: Timing = measure(fn, pool, device, cfg, seeds=seeds, retain_bytes=_kept(device))
        host = host_clock(fn, pool, seeds, device, t.median_latency_ms or 0.1)
    return {"kernel_ms": t.median_kernel_ms, "latency_ms": t.median_latency_ms,
            "host_ms": host, "spread": t.spread, "calls": len(t.kernel_ms),
            "kernels": t.kernels[:64], "measured_at": time.time()}


def _kept(device: torch.device) -> int:
    """Outputs a baseline's timing keeps: on a CPU as many as a candidate's timing keeps
    (``timing.RETAIN_BYTES``: allocation is part of a CPU call's time); none on a GPU,
    where kernel time leaves allocation out and kept outputs would only take memory."""
    return RETAIN_BYTES if device.type == "cpu" else 0


def host_clock(fn: Any, pool: list[list[Any]], seeds: list[int], device: torch.device,
                latency_ms: float) -> float:
    """Wall clock per call over back-to-back calls on prepared fresh inputs (trusted side)."""
    m = batch_size(pool, latency_ms)
    batch = [fresh_inputs(pool[i % len(pool)], seeds[i % len(seeds)] + 3) for i in range(m)]
    I.synchronize(device)
    t0 = time.perf_counter()
    for args in batch:
        fn(*args)
    I.synchronize(device)
    return (time.perf_counter() - t0) * 1e3 / m


class Interleaved:
    """Fresh baselines measured round by round beside the candidate (never cached)."""

    def __init__(self, prepared: dict[str, Any], pool: list[list[Any]], cfg: TimingConfig,
                 device: torch.device) -> None:
        """``prepared``: :func:`prepare_baselines` of every available kind (unavailable kinds
        are absent; their notes are recorded already)."""
        self.pool, self.cfg, self.device = pool, cfg, device
        self.fns: dict[str, Any] = dict(prepared)
        self.lists: dict[str, dict[str, list[float]]] = {}
        self.errors: dict[str, str] = {}

    def measure(self, seeds: list[int]) -> None:
        for kind, fn in list(self.fns.items()):
            try:
                with torch.no_grad():
                    t = measure(fn, self.pool, self.device, self.cfg, seeds=seeds,
                                retain_bytes=_kept(self.device))
                    host = host_clock(fn, self.pool, seeds, self.device,
                                       t.median_latency_ms or 0.1)
            except Exception as e:
                self.errors[kind] = f"{type(e).__name__}: {str(e)[:300]}"
                del self.fns[kind]
                continue
            acc = self.lists.setdefault(kind, {"kernel": [], "latency": [], "host": [],
                                               "rounds": []})
            acc["kernel"] += t.kernel_ms
            if t.kernel_ms:
                acc["rounds"].append(median(t.kernel_ms))
            acc["latency"] += t.latency_ms
            acc["host"].append(host)

    def results(self, res: WorkloadResult) -> dict[str, dict]:
        out = {}
        for kind, acc in self.lists.items():
            out[kind] = {"kernel_ms": median(acc["kernel"]),
                         "latency_ms": median(acc["latency"]),
                         "host_ms": median(acc["host"])}
            if len(acc["rounds"]) > 1:
                res.round_baseline_ms[kind] = list(acc["rounds"])
            if kind == "eager":
                res.eager_ms = out[kind]["kernel_ms"]
            else:
                res.compile_ms = out[kind]["kernel_ms"]
        for kind, err in self.errors.items():
            res.message = (res.message + f"; {kind} baseline failed: {err}").strip("; ")
        return out
