"""Shared fixtures: paths, a CPU evaluator per test module, an isolated solforge cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Triton kernels imported anywhere in the session run under the interpreter when there is
# no GPU: set before any test module imports triton (the interpreter flag is read then).
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

FIXTURES = Path(__file__).parent / "fixtures"
PROBLEMS = FIXTURES / "problems"
SOLUTIONS = FIXTURES / "solutions"


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    # tests never read or write the user's real cache (baselines, compiled kernels)
    if "SOLFORGE_TEST_KEEP_CACHE" not in os.environ:
        os.environ["SOLFORGE_CACHE"] = str(tmp_path_factory.mktemp("solforge-cache"))
    yield


@pytest.fixture(scope="module")
def two_spares():
    """Judges started in this module keep two spare runners (``SOLFORGE_SPARES``, read when
    a judge starts) instead of a CPU's one. With one, back-to-back evaluations on one judge
    each wait for their runner's start (Python and torch, about 2 s here, most of a short
    evaluation); with two, the next runner starts while the current evaluation runs, on
    the other core. Not for modules that run several judges at once (a planner's workers,
    evaluators side by side): there the extra starts only compete for the two cores."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOLFORGE_SPARES", "2")
        yield


# Modules whose assertions read CPU timing figures, or the device slot's waits, closely
# enough that a second test process working beside them could move them: the README's test
# command runs them on their own after the rest (``-m serial``), the rest two at a time
# (``-n 2 -m "not serial"``, pytest-xdist). Everything else asserts verdicts and mechanisms
# that a busy machine must not change (the evaluator is built for busy machines).
SERIAL_MODULES = {
    "tests/bench/test_timing.py",      # a fresh runner's warm ratio band
    "tests/bench/test_quiet.py",       # the quiet device's idle figures
    "tests/bench/test_baselines.py",   # compile-vs-eager tolerance and warm-up figures
    "tests/bench/test_statuses.py",    # the slot wait as its own phase
    "tests/gate/test_ci_gate.py",      # "fails slower beyond the measured noise"
    "tests/anticheat/test_corpus.py",  # timing-based hack flags on a CPU
    "tests/anticheat/test_guard.py",   # the judge's idle probe
}


def pytest_collection_modifyitems(config, items):
    root = Path(__file__).resolve().parents[1]
    for item in items:
        try:
            rel = Path(str(item.fspath)).resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        if rel in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)


def gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


requires_gpu = pytest.mark.skipif(not gpu_available(), reason="needs a CUDA GPU")


def pytest_runtest_logreport(report):
    """With SOLFORGE_TEST_FAILURES=FILE, append each failure to FILE the moment it happens.

    GPU runs are cut off by their call's time limit, and pytest prints its failure reports
    only at the end: this keeps the reason of every failure that happened before the cut.
    """
    path = os.environ.get("SOLFORGE_TEST_FAILURES")
    if not path or not report.failed:
        return
    with open(path, "a") as f:
        f.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext[-6000:]}\n\n")
