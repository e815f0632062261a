"""The runner's operations: what the candidate runner does with each request of the judge.

:class:`Runner` holds the imported problem and solution and the built ``ModelNew``; its
``op_<name>`` methods answer the requests (dicts with ``op``; every reply has ``ok``):

- ``load``: import the problem and the solution, build ``ModelNew`` for a workload's
  params with the reference's weights (KernelBench conventions, ``bench/measure/inputs.py``).
- ``build``: import the solution only, so ahead-of-time languages compile (no GPU).
- ``run``: one forward on inputs the judge sent (on a CPU, at the previous call's
  addresses: :meth:`Runner._at_last_addresses`); reply with the outputs.
- ``time``: the timing loop of ``timing.py`` on a pool of input sets the judge sent; the
  outputs of some timed calls are kept for ``fetch``.
- ``fetch``: send kept outputs back, by timed-call index.
- ``batch_prepare`` / ``batch_go``: back-to-back forwards on prepared fresh inputs, then a
  device-wide synchronize and the last output, for the judge's own wall clock.
- ``latency``: per-call latency alone (``timing.measure_latency``) and the last call's
  output, when the judge measures a clock gap again.
- ``trace``: one forward for the policy (``bench/policy/rules.py``): which compute ATen operations it
  ran, and whether code from the problem's file ran inside it.
- ``exit``.

Not covered: the request loop, failures turned into replies, the tamper check after each
operation and the runner's start-up (``process.py``); what the judge does with a reply.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

_SOLUTION_MODULE = "solforge_candidate"


class Runner:
    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.problem_mod = None
        self.problem_file: str | None = None
        self.solution_mod = None
        self.model = None
        self.kept: dict[int, Any] = {}
        self.batch_inputs: list[list[Any]] = []
        self.last_inputs: list[Any] | None = None  # ``run``'s, on a CPU (``_at_last_addresses``)

    # -- helpers -----------------------------------------------------------------------
    def _import(self, problem: str | None, solution: str) -> None:
        from solforge.problems.loader import import_file

        if problem and self.problem_mod is None:
            self.problem_mod = import_file(problem, prefix="solforge_reference")
            self.problem_file = problem
        if self.solution_mod is None:
            self.solution_mod = import_file(solution, prefix=_SOLUTION_MODULE)

    def _forward(self, inputs: list[Any], seed: int) -> Any:
        from solforge.bench.measure.inputs import run_forward

        return run_forward(self.model, inputs, seed)

    def _plain(self, out: Any) -> tuple[list[Any], list[str]]:
        """Outputs as a flat list, and the flags their types raise (lazy or fake tensors)."""
        from solforge.bench.measure.compare import as_list

        flags = []
        flat = as_list(out)
        for o in flat:
            if isinstance(o, self.torch.Tensor) and type(o) is not self.torch.Tensor:
                flags.append("lazy_output")
        return flat, flags

    # -- operations ----------------------------------------------------------------------
    def op_build(self, msg: dict) -> dict:
        self._import(None, msg["solution"])
        return {"ok": True}

    def op_load(self, msg: dict) -> dict:
        from solforge.bench.measure import inputs as I

        if self.device.type == "cpu":
            self.torch.set_num_threads(int(msg.get("cpu_threads", 1)))
        self._import(msg["problem"], msg["solution"])
        new_cls = getattr(self.solution_mod, "ModelNew", None)
        if new_cls is None:
            return {"ok": False, "status": "COMPILE_ERROR",
                    "message": "the solution defines no ModelNew (a class with the "
                               "reference Model's constructor and forward signature)"}
        args = I.init_args(self.problem_mod, msg["params"])
        self.model = None
        if "torch._dynamo" in sys.modules:
            # each workload compiles afresh, as the judge's compile baseline does: guards
            # of earlier workloads' shapes pile up past dynamo's recompile limit otherwise,
            # and a compiled candidate runs eagerly (benchmarks/results/2026-12-01-h200-s6)
            self.torch._dynamo.reset()
        if self.device.type == "cuda":  # the last workload's blocks back to the driver:
            self.torch.cuda.empty_cache()  # other evaluators share this GPU
        ref = I.build_model(self.problem_mod.Model, args, self.device, False)
        state = {k: v.detach().clone() for k, v in ref.state_dict().items()}
        del ref
        self.model = I.build_model(new_cls, args, self.device, msg["eval_mode"], state)
        I.synchronize(self.device)
        return {"ok": True}

    def _own_threads(self, before: set[threading.Thread]) -> bool:
        """A thread the call started, still alive, running a function of the solution's
        file (compilers' and pools' threads run library code and do not count)."""
        own = getattr(self.solution_mod, "__file__", None)
        for t in threading.enumerate():
            if t in before or not t.is_alive():
                continue
            fn = getattr(t, "_target", None) or type(t).run
            code = getattr(fn, "__code__", None)
            if own and code is not None and code.co_filename == own:
                return True
        return False

    def _at_last_addresses(self, inputs: list[Any]) -> list[Any]:
        """On a CPU, the inputs of the previous ``run`` refilled with these values where
        every tensor matches it in shape, dtype and strides (else these, kept for the
        next call): a forward that caches its outputs by address (``data_ptr``) sees its
        address again with other values and returns a stale output, whatever the
        allocator does. A GPU's caching allocator hands a freed block back at once, and
        there the inputs are the judge's own memory, which it checks after the call.

        Not covered: inputs of other shapes from one call to the next (a workload's
        trials share them)."""
        torch = self.torch
        last = self.last_inputs
        if self.device.type != "cpu":
            return inputs

        def fits(a: Any, b: Any) -> bool:
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                return (a.shape == b.shape and a.dtype == b.dtype and
                        a.stride() == b.stride() and a.device == b.device)
            return not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor)

        if last is None or len(last) != len(inputs) or \
                not all(fits(a, b) for a, b in zip(last, inputs)):
            self.last_inputs = inputs
            return inputs
        try:
            with torch.no_grad():
                for a, b in zip(last, inputs):
                    if isinstance(a, torch.Tensor):
                        a.copy_(b)
        except RuntimeError:  # a buffer the candidate left unwritable (overlapping)
            self.last_inputs = inputs
            return inputs
        return [a if isinstance(a, torch.Tensor) else b for a, b in zip(last, inputs)]

    def op_run(self, msg: dict) -> dict:
        before = threading.active_count()
        alive = set(threading.enumerate())
        msg["inputs"] = self._at_last_addresses(msg["inputs"])
        out = self._forward(msg["inputs"], msg["seed"])
        from solforge.bench.measure.inputs import synchronize
        from solforge.bench.runner.streams import unjoined_work

        flat, flags = self._plain(out)
        unjoined = unjoined_work(self.torch, self.device, flat) if not flags else None
        synchronize(self.device)
        if unjoined:
            flags.append("unjoined_stream")
        if self._own_threads(alive):
            flags.append("background_thread")
        after = threading.active_count()
        return {"ok": True, "outputs": flat, "flags": flags, "threads": [before, after],
                "unjoined": unjoined,
                "structure": type(out).__name__, "peak_mb": self._peak_mb(),
                "inputs_after": msg["inputs"] if self.device.type == "cpu" else None}

    def _peak_mb(self) -> float | None:
        """This process's device memory peak so far (the admission's measured size)."""
        if self.device.type != "cuda":
            return None
        return self.torch.cuda.max_memory_allocated(self.device) / float(1 << 20)

    def _own(self, msg: dict, key: str) -> Any:
        """Copies, in this process's memory, of the input sets the judge sent under
        ``key``, and the judge's own blocks let go of at once: a CUDA block sent over IPC
        stays allocated in the judge until its receiver drops its view, and a runner
        killed while holding one would leak it there for good."""
        sets = msg[key]
        if self.device.type != "cuda":
            return sets
        own = [[x.clone() if isinstance(x, self.torch.Tensor) else x for x in s]
               for s in sets]
        self.torch.cuda.synchronize(self.device)
        msg[key] = None
        del sets
        return own

    def op_exit(self, msg: dict) -> dict:
        """Drop every tensor before the judge kills this process: views of the judge's
        blocks are released only by their storage's destructor, never by a SIGKILL."""
        import gc

        self.model = None
        self.kept = {}
        self.batch_inputs = []
        gc.collect()
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)
        return {"ok": True}

    def op_time(self, msg: dict) -> dict:
        from solforge.bench.measure.timing import TimingConfig, measure

        cfg = TimingConfig(**msg.get("config", {}))
        torch = self.torch
        torch.manual_seed(msg["seed"])
        pool = self._own(msg, "pool")
        with torch.no_grad():
            t = measure(self.model, pool, self.device, cfg, seeds=msg.get("seeds"),
                        retain_bytes=msg.get("retain_bytes", 0))
        del pool
        self.kept = {}
        flags: list[str] = []
        for i, out in t.outputs.items():
            flat, f = self._plain(out)
            self.kept[i] = flat
            flags += f
        if self.device.type == "cuda":
            # the timing loop's copies back to the driver: the judge times its baselines
            # and re-checks calls next, on the same device (judge/memory.hand_over)
            torch.cuda.empty_cache()
        return {"ok": True, "kernel_ms": t.kernel_ms, "latency_ms": t.latency_ms,
                "kernels": t.kernels, "kernel_sets_differ": t.kernel_sets_differ,
                "unassigned_kernels": t.unassigned_kernels, "seeds": t.perturb_seeds,
                "pool_indices": t.pool_indices, "kept": sorted(self.kept),
                "flags": sorted(set(flags)), "warmup_calls": t.warmup_calls}

    def op_latency(self, msg: dict) -> dict:
        """Per-call latency alone (``timing.measure_latency``) and the last call's output."""
        from solforge.bench.measure.timing import TimingConfig, measure_latency

        cfg = TimingConfig(**msg.get("config", {}))
        self.torch.manual_seed(msg["seed"])
        pool = self._own(msg, "pool")
        with self.torch.no_grad():
            latency, out = measure_latency(self.model, pool, self.device, cfg, msg["seeds"],
                                           int(msg["calls"]))
        del pool
        flat, flags = self._plain(out)
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()
        return {"ok": True, "latency_ms": latency, "outputs": flat, "flags": flags}

    def op_profile(self, msg: dict) -> dict:
        """Per-kernel (GPU) or per-operator (CPU) time of a few calls, from torch.profiler."""
        from torch.profiler import ProfilerActivity, profile

        from solforge.bench.measure.inputs import synchronize

        torch = self.torch
        inputs = msg["inputs"]
        calls = int(msg.get("calls", 5))
        with torch.no_grad():
            for _ in range(2):
                self.model(*inputs)
            synchronize(self.device)
            acts = [ProfilerActivity.CPU]
            if self.device.type == "cuda":
                acts.append(ProfilerActivity.CUDA)
            with profile(activities=acts) as prof:
                for _ in range(calls):
                    self.model(*inputs)
                synchronize(self.device)
        rows = []
        for e in prof.key_averages():
            dev_us = getattr(e, "device_time_total", None)
            if dev_us is None:
                dev_us = getattr(e, "cuda_time_total", 0)
            total = dev_us if self.device.type == "cuda" else e.self_cpu_time_total
            if total <= 0:
                continue
            rows.append({"name": e.key, "calls": e.count // max(calls, 1),
                         "ms_per_call": total / 1e3 / calls,
                         "cpu_ms_per_call": e.cpu_time_total / 1e3 / calls})
        rows.sort(key=lambda r: -r["ms_per_call"])
        # on a GPU only device-side kernels have device time; on a CPU keep leaf operators
        return {"ok": True, "rows": rows[:40], "calls": calls}

    def op_trace(self, msg: dict) -> dict:
        """One forward under the policy's probes (see ``bench/policy/rules.py``)."""
        from solforge.bench.measure.inputs import synchronize
        from solforge.bench.policy.rules import ReferenceTripwire, aten_trace

        counts: dict[str, dict[str, int]] = {}
        wire = ReferenceTripwire(self.problem_file or "")

        def call() -> None:
            self._forward(msg["inputs"], msg["seed"])
            synchronize(self.device)

        with wire:
            if msg.get("aten"):
                counts = aten_trace(call).to_json()
            else:
                call()
        return {"ok": True, "aten": counts, "reference_calls": wire.calls,
                "reference_where": wire.where}

    def op_fetch(self, msg: dict) -> dict:
        return {"ok": True, "outputs": {i: self.kept[i] for i in msg["indices"]
                                        if i in self.kept}}

    def op_batch_prepare(self, msg: dict) -> dict:
        from solforge.bench.measure.timing import fresh_inputs

        pool = msg["pool"]
        self.batch_inputs = [fresh_inputs(pool[i % len(pool)], s)
                             for i, s in enumerate(msg["seeds"])]
        del pool
        msg["pool"] = None  # the judge's blocks: released as soon as the copies exist
        from solforge.bench.measure.inputs import synchronize

        synchronize(self.device)
        return {"ok": True}

    def op_batch_go(self, msg: dict) -> dict:
        torch = self.torch
        out = None
        with torch.no_grad():
            for args in self.batch_inputs:
                out = self.model(*args)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.batch_inputs = []
        flat, flags = self._plain(out)
        return {"ok": True, "outputs": flat, "flags": flags}
