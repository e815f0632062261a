"""The public filters of the CUDA-Agent-Ops pipeline, run on one candidate problem's source.

A candidate passes when it (in this order, the first failure is its reason):

- ``load_error``: imports and defines ``Model``, ``get_inputs``, ``get_init_inputs``;
- ``eager_error``: runs eagerly on every workload the device runs (on a CPU the ``cpu``
  ones; on CUDA those and the GPU-sized ones) and returns one floating tensor;
- ``non_finite``: gives no NaN or infinity;
- ``nondeterministic``: gives the same bytes when ``forward`` is called twice on the same
  inputs (``torch.rand`` in ``forward`` fails here) and when rebuilt from the same seeds;
- ``zero_output``: is not (almost: 99% of entries or more) exactly zero;
- ``constant_output``: is not one value everywhere (within 1e-6 of its scale), and changes
  when the inputs change;
- ``returns_input``: is not one of its inputs;
- ``compile_error`` / ``compile_mismatch``: runs under ``torch.compile`` and agrees with
  eager within the problem's tolerance (off with ``compile_check=False``: it costs seconds
  a candidate on a CPU);
- ``runtime_out_of_window``: its eager median time, on the first workload the device
  times, lies inside the device's window (``WINDOWS``; CUDA-Agent-Ops keeps tasks its
  models can be trained on, neither trivial nor overly heavy).

Candidates from the catalogue run in this process (code this package wrote). An LLM's reply
runs in a child process of its own (:func:`check_source_isolated`): one that hangs past
its time (``timeout``) or kills its interpreter (``crashed``: a segfault, an abort, an exit)
is recorded with that reason and the batch goes on.

Not covered: a sandbox for the LLM's code (the child is an ordinary process with this
user's rights: run LLM synthesis where that is acceptable, as for any code a model writes),
multi-output problems (only the first output is judged), and memory limits.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REASONS = ("load_error", "eager_error", "non_finite", "nondeterministic", "zero_output",
           "constant_output", "returns_input", "compile_error", "compile_mismatch",
           "runtime_out_of_window", "timeout", "crashed")
# eager ms per device: (at least, at most); on a CPU the cpu workloads take microseconds
# to a few milliseconds, so only a runaway one is rejected
WINDOWS: dict[str, tuple[float, float]] = {"cpu": (0.0, 500.0), "cuda": (0.01, 100.0)}


@dataclass(frozen=True)
class FilterConfig:
    """How candidates are screened."""

    device: str = "cpu"                         # cpu or cuda
    compile_check: bool = True                  # run under torch.compile and compare to eager
    compile_backend: str = "inductor"           # torch.compile's backend
    window_ms: tuple[float, float] | None = None   # None: WINDOWS[device]
    atol: float = 1e-3                          # eager vs compiled (fp32; bf16 is 5e-2)
    rtol: float = 1e-3
    timing_runs: int = 5

    def window(self) -> tuple[float, float]:
        if self.window_ms is not None:
            return self.window_ms
        return WINDOWS["cuda" if self.device.startswith("cuda") else "cpu"]


@dataclass(frozen=True)
class Verdict:
    """A candidate's outcome: ``reason`` is ``"ok"`` or one of ``REASONS``."""

    reason: str
    detail: str = ""
    eager_ms: float | None = None

    @property
    def ok(self) -> bool:
        return self.reason == "ok"


@dataclass
class Tally:
    """Counts per reason over a batch (``ok`` included), and one example each."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, reason: str, detail: str = "", where: str = "") -> None:
        self.counts[reason] += 1
        if reason != "ok" and reason not in self.examples:
            self.examples[reason] = f"{where}: {detail}" if where else detail


def _workloads(meta: dict, device: str) -> tuple[list[dict], list[dict]]:
    """(workloads run eagerly, workloads timed) for ``device``."""
    all_w = meta.get("workloads") or [{"name": "default", "params": {}}]
    cpu = [w for w in all_w if w.get("cpu")]
    if device.startswith("cuda"):
        return all_w, [w for w in all_w if not w.get("cpu") and w.get("visible", True)] or all_w
    return cpu or all_w[:1], cpu[:1] or all_w[:1]


def check_source(source: str, meta: dict, config: FilterConfig) -> Verdict:
    """Screen ``source`` (a KernelBench module; ``meta`` its SOLFORGE dict, whose
    workloads and precision are used)."""
    from solforge.problems.loader import import_file

    with tempfile.TemporaryDirectory(prefix="solforge-synth-") as d:
        path = Path(d) / "candidate.py"
        path.write_text(source)
        try:
            module = import_file(path, prefix="solforge_synth")
        except BaseException as e:  # noqa: BLE001 - any failure to import is the verdict
            return Verdict("load_error", f"{type(e).__name__}: {e}")
        for attr in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(module, attr):
                return Verdict("load_error", f"{attr} is missing")
        return check_module(module, meta, config)


def _run(module: Any, params: dict, device: str, init_seed: int = 0, input_seed: int = 1,
         compiled: bool = False, backend: str = "inductor") -> tuple[Any, list[Any], Any]:
    from solforge.problems.spec import call_with_params

    torch.manual_seed(init_seed)
    model = module.Model(*call_with_params(module.get_init_inputs, params)).eval().to(device)
    torch.manual_seed(input_seed)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x
              for x in call_with_params(module.get_inputs, params)]
    fn = torch.compile(model, backend=backend) if compiled else model
    with torch.no_grad():
        out = fn(*inputs)
    if isinstance(out, (tuple, list)):
        out = out[0] if out else None
    return model, inputs, out


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def check_module(module: Any, meta: dict, config: FilterConfig) -> Verdict:
    """Screen an imported problem module (see the module docstring for the order)."""
    run_on, timed = _workloads(meta, config.device)
    first = run_on[0].get("params", {})
    try:
        for w in run_on:
            _, _, out = _run(module, w.get("params", {}), config.device)
            if not (isinstance(out, torch.Tensor) and out.is_floating_point()):
                return Verdict("eager_error", f"workload {w['name']}: forward returned "
                               f"{type(out).__name__}, not a floating tensor")
        model, inputs, a = _run(module, first, config.device)
        with torch.no_grad():  # the same call again: randomness in forward draws anew
            b = model(*inputs)
        b = b[0] if isinstance(b, (tuple, list)) else b
        _, _, rebuilt = _run(module, first, config.device)
        _, _, other = _run(module, first, config.device, input_seed=2)
    except Exception as e:  # noqa: BLE001 - the exception is the verdict
        return Verdict("eager_error", f"{type(e).__name__}: {str(e)[:300]}")
    af = a.detach().float()
    if not torch.isfinite(af).all():
        return Verdict("non_finite", "the output holds NaN or infinity")
    if not (isinstance(b, torch.Tensor) and _same_bytes(a, b)):
        return Verdict("nondeterministic", "calling forward twice on the same inputs gives "
                       "different outputs")
    if not (isinstance(rebuilt, torch.Tensor) and _same_bytes(a, rebuilt)):
        return Verdict("nondeterministic", "two runs from the same seeds differ")
    if af.numel() and (af == 0).float().mean().item() >= 0.99:
        return Verdict("zero_output", "99% or more of the output is exactly zero")
    scale = max(1.0, af.abs().max().item())
    if af.numel() > 1 and (af.max() - af.min()).item() <= 1e-6 * scale:
        return Verdict("constant_output", f"every entry is {af.flatten()[0].item():.6g}")
    if _same_bytes(a, other):
        return Verdict("constant_output", "the output does not change with the inputs")
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.shape == a.shape and torch.allclose(
                x.float(), af, atol=1e-6, rtol=1e-5):
            return Verdict("returns_input", f"the output equals input {i}")
    if config.compile_check:
        torch._dynamo.reset()  # a fresh cache: one candidate's guards never serve another
        try:
            _, _, c = _run(module, first, config.device, compiled=True,
                           backend=config.compile_backend)
        except Exception as e:  # noqa: BLE001
            return Verdict("compile_error", f"{type(e).__name__}: {str(e)[:300]}")
        tol = 5e-2 if a.dtype in (torch.bfloat16, torch.float16) else None
        if not (isinstance(c, torch.Tensor) and c.shape == a.shape and torch.allclose(
                c.float(), af, atol=tol or config.atol, rtol=tol or config.rtol)):
            return Verdict("compile_mismatch", "torch.compile's output differs from eager's")
    try:
        ms = eager_ms(module, timed[0].get("params", {}), config)
    except Exception as e:  # noqa: BLE001 - a GPU-sized workload may fail only here
        return Verdict("eager_error", f"timing {timed[0]['name']}: {type(e).__name__}: {e}")
    lo, hi = config.window()
    if not lo <= ms <= hi:
        return Verdict("runtime_out_of_window",
                       f"eager {ms:.4g} ms on {timed[0]['name']}, outside [{lo}, {hi}] ms", ms)
    return Verdict("ok", eager_ms=ms)


def eager_ms(module: Any, params: dict, config: FilterConfig) -> float:
    """The median eager time of ``forward`` in ms (one warm-up call)."""
    model, inputs, _ = _run(module, params, config.device)
    cuda = config.device.startswith("cuda")
    times = []
    with torch.no_grad():
        for _ in range(config.timing_runs):
            if cuda:
                torch.cuda.synchronize()
            t = time.perf_counter()
            model(*inputs)
            if cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def _child(conn: Any, source: str, meta: dict, config: FilterConfig) -> None:
    try:
        conn.send(check_source(source, meta, config))
    except BaseException as e:  # noqa: BLE001 - whatever happens is the verdict
        conn.send(Verdict("eager_error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def check_source_isolated(source: str, meta: dict, config: FilterConfig,
                          timeout_s: float = 300.0) -> Verdict:
    """:func:`check_source` in a child process (spawned: nothing of this one's state is
    shared), killed after ``timeout_s``; a child that dies without a verdict is ``crashed``
    with its exit code or signal."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, source, meta, config), daemon=True)
    proc.start()
    send.close()
    try:
        if recv.poll(timeout_s):
            try:
                return recv.recv()
            except EOFError:
                pass
        else:
            proc.kill()
            proc.join(5)
            return Verdict("timeout", f"no verdict within {timeout_s:g} s (killed)")
        proc.join(5)
        code = proc.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return Verdict("crashed", f"the candidate's process died ({how}) before a verdict")
    finally:
        recv.close()
        if proc.is_alive():
            proc.kill()
            proc.join(5)
