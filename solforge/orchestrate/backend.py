"""Where a run's judges live: the transport between the planner and its evaluators.

The planner (``planner.py``) and the final verification (``verify.py``) never build an
:class:`~solforge.bench.evaluator.Evaluator` themselves: they ask a :class:`Backend` for
one per worker (``backend.evaluator(options, caller)``) and use what it hands back as they
would the Evaluator (``evaluate``, ``profile``, ``close``, ``options``). Everything above
that call (scheduling, the ledger, the cache, resume, budgets) is the same code whichever
backend runs the judges.

- :class:`LocalBackend` (``--backend local``, the default): each worker's evaluator is a
  judge process on this machine, as it always was.
- ``RayBackend`` (``--backend ray``, ``ray_backend.py``): one judge actor per GPU of a Ray
  cluster; evaluations are calls to those actors, with the problem's and the solution's
  sources in the call. Imported only when asked for, so ``ray`` stays an optional extra.

Not covered: workers (search, LLM) away from the driver: on either backend they are
threads of the driver's process, which alone writes the ledger (docs/SCALE.md says why
that is not the bottleneck).
"""

from __future__ import annotations

from typing import Any, Protocol

from solforge.bench import Evaluator
from solforge.records.options import EvalOptions

BACKENDS = ("local", "ray")


class Backend(Protocol):
    """What the planner needs of a transport."""

    name: str

    def devices(self, requested: list[str]) -> list[str]:
        """The planner's devices on this backend, given those the settings asked for."""
        ...

    def evaluator(self, options: EvalOptions, caller: str) -> Any:
        """A handle with the :class:`Evaluator`'s ``evaluate``/``profile``/``close``/
        ``options`` on a judge for ``options.device``; ``caller`` names its user (the
        worker) so that a remote judge keeps one judge process per caller."""
        ...

    def close(self) -> None:
        """Release every judge the backend started."""
        ...


class LocalBackend:
    """Judge processes on this machine: one :class:`Evaluator` per caller."""

    name = "local"

    def devices(self, requested: list[str]) -> list[str]:
        return list(requested)

    def evaluator(self, options: EvalOptions, caller: str) -> Evaluator:
        return Evaluator(options)

    def close(self) -> None:
        pass


def make_backend(name: str, address: str | None = None, **settings: Any) -> Backend:
    """The backend ``name`` (:data:`BACKENDS`); ``address`` is the Ray cluster's (``auto``,
    ``ray://host:10001``, or None for a Ray instance started here). A ``ValueError`` that
    says what to install or type for anything else."""
    if name == "local":
        if address:
            raise ValueError("--address goes with --backend ray (a local run has no cluster)")
        return LocalBackend()
    if name == "ray":
        try:
            from solforge.orchestrate.ray_backend import RayBackend
        except ImportError as e:
            raise ValueError(f"--backend ray needs Ray: pip install 'solforge[ray]' ({e})"
                             ) from None
        return RayBackend(address=address, **settings)
    raise ValueError(f"unknown backend {name!r}; use one of {', '.join(BACKENDS)}")
