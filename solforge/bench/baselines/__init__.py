"""Baselines: eager and ``torch.compile`` times of references, measured once and cached.

The judge talks to :class:`WorkloadBaselines`; ``cache.py`` keeps figures, ``measurement.py``
measures them, ``slow.py`` remembers slow compile warm-ups, ``work_counts.py`` the
reference's counted work, and ``prewarm.py`` compiles many problems' baselines ahead of
a run.
"""

from solforge.bench.baselines.workload import WorkloadBaselines

__all__ = ["WorkloadBaselines"]
