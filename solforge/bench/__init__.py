"""The evaluator: what callers (the CLI, agents, the planner, the RL reward) use of it.

Three processes, one folder each (``docs/EVALUATOR.md``, ``docs/ARCHITECTURE.md``):

- ``evaluator.py``: the caller's side: :class:`Evaluator` starts a trusted judge per device
  and sends it plain dicts; ``suite.py`` runs many problems through one evaluator.
- ``judge/``: the trusted judge process: the evaluation pipeline, correctness, timing,
  probes, memory admission and its self-guard.
- ``runner/``: the untrusted side: the runner process that imports a candidate, its
  containment (sandbox, cgroups, process tree) and the channel to the judge.
- ``baselines/``: eager and ``torch.compile`` figures, cached, behind one object.
- ``policy/``: the solution noun and its languages, and what a solution may do.
- ``measure/``: what both sides run: timing, inputs, comparison, device slots.

Names resolve on first use (PEP 562), so starting a judge or a runner with ``-m`` does
not import the caller's side.
"""

from __future__ import annotations

from solforge.registry import lazy_face

_FACE = {
    "Evaluator": "solforge.bench.evaluator",
    "EvaluatorTampered": "solforge.bench.judge.guard",
    "install_refusal": "solforge.bench.judge.install",
    "bench": "solforge.bench.suite",
    "SuiteStopped": "solforge.bench.suite",
    "with_solutions": "solforge.bench.suite",
    "prewarm": "solforge.bench.baselines.prewarm",
    "languages": "solforge.bench.policy.solution",
    "detect_language": "solforge.bench.policy.solution",
    "TimingConfig": "solforge.bench.measure.timing",
    "device_slot": "solforge.bench.measure.slots",
    "slot_env": "solforge.bench.measure.slots",
    "SandboxConfig": "solforge.bench.runner.sandbox",
    "runner_env": "solforge.bench.runner.sandbox",
    "kill_tree": "solforge.bench.runner.proctree",
    "OutputTail": "solforge.bench.runner.output_tail",
}

__all__ = sorted(_FACE)


__getattr__, __dir__ = lazy_face('solforge.bench', _FACE, globals())
