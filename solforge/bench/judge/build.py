"""Which judge made a record: a digest of the solforge code a verdict depends on.

Every evaluation record carries it (``versions['solforge']``). A run's stored records are
reused on resume (``search/state.py``, the run cache ``orchestrate/evalcache.py``) only when
they were made by this same code: a record of an older judge may be wrong in a way the
newer one fixed, and its figure would stand forever because the candidate's source did not
change. KernelBench's ``50_ReLUSelfAttention`` kept a compiled-around candidate at 0.71x
that had been timed as eager code by a judge fault fixed since; its reopened search served
that record again and never re-judged it (benchmarks/results/2026-12-07-h100-s33).

The digest covers the judge and everything a candidate's verdict runs through: the judge,
the runner, the timing, the policy and the baselines (``bench/``), the SOL bounds
(``sol/``), the formats (``records/``), the problem loader (``problems/``), the library
kernels that generated candidates import by name (``kernels/``: a kernel fixed or retuned
changes a candidate whose source is the same), and the knobs (``env.py``).

Not covered: a change in torch, Triton, the driver or the device (the record's other
``versions`` entries and its ``device`` say those; the run cache keys on the options, not on
them), or code outside the package a solution imports. A copy of solforge installed
without its ``.py`` files (bytecode only) digests what files it has.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[2]
# what a verdict runs through, relative to the package
_PARTS = ("bench", "sol", "records", "problems", "kernels", "env.py")


@functools.lru_cache(maxsize=1)
def judge_build() -> str:
    """This solforge's judge code: :func:`digest` of the installed package."""
    return digest(_PACKAGE)


def digest(package: Path) -> str:
    """16 hex digits over the verdict code's ``.py`` files under ``package`` (a solforge
    package folder): their paths and contents, in order."""
    h = hashlib.sha256()
    for part in _PARTS:
        root = package / part
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for f in files:
            if not f.is_file():
                continue
            h.update(f.relative_to(package).as_posix().encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def judge_of(record: dict) -> str:
    """The judge code a stored record (its JSON) names; '' for a record from before
    records named it."""
    return (record.get("versions") or {}).get("solforge", "")


def made_by_this_judge(record: dict) -> bool:
    """Whether a stored record (its JSON) was made by this judge's code."""
    return judge_of(record) == judge_build()
