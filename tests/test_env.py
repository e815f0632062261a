"""Every SOLFORGE_* variable is read in solforge/env.py, and the knobs that can change a
verdict are written into the evaluation record."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from solforge import env

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"


def test_no_module_but_env_reads_a_solforge_variable():
    reads = re.compile(r"(environ\.get|getenv|environ\[)\(?\s*[\"']SOLFORGE_")
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "solforge").rglob("*.py")
                 if p.name != "env.py" and reads.search(p.read_text())]
    assert offenders == []


def test_every_solforge_variable_named_in_the_package_is_a_known_knob():
    named = set()
    for p in (ROOT / "solforge").rglob("*.py"):
        named.update(re.findall(r"SOLFORGE_[A-Z0-9_]+", p.read_text()))
    assert named - set(env.KNOBS) == set()


@pytest.mark.parametrize("name, read, bad, good, value", [
    (env.DEVICE_MEMORY_MB, env.device_memory_mb, "lots", " 4096 ", 4096.0),
    (env.COMPILE_WARMUP_S, env.compile_warmup_s, "0", "12.5", 12.5),  # seconds above 0
])
def test_a_malformed_size_names_the_variable(monkeypatch, name, read, bad, good, value):
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=f"{name}='{bad}'"):
        read()
    monkeypatch.setenv(name, good)
    assert read() == value


def test_verdict_knobs_are_the_set_ones_that_change_verdicts(monkeypatch):
    for name in env.KNOBS:
        monkeypatch.delenv(name, raising=False)
    assert env.verdict_knobs() == {}
    monkeypatch.setenv(env.TIMING_CORE, "1")
    monkeypatch.setenv(env.SPARES, "2")  # changes no verdict: not recorded
    monkeypatch.setenv(env.HARDEN_GPU, "1")
    assert env.verdict_knobs() == {env.TIMING_CORE: "1", env.HARDEN_GPU: "1"}


def test_cache_dir_follows_the_variable_and_exists(monkeypatch, tmp_path):
    monkeypatch.setenv(env.CACHE, str(tmp_path / "c"))
    assert env.cache_dir() == tmp_path / "c" and (tmp_path / "c").is_dir()


def test_the_record_says_which_knobs_were_set(monkeypatch, tmp_path):
    from solforge.bench import Evaluator
    from solforge.records import EvalOptions

    monkeypatch.setenv(env.CACHE, str(tmp_path / "cache"))
    monkeypatch.setenv(env.TIMING_CORE, "0")
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=40, timeout_s=120,
                               seed=3)) as ev:
        r = ev.evaluate(FIXTURES / "problems" / "tiny_linear.py",
                        FIXTURES / "solutions" / "tiny_good_pytorch.py")
    assert r.knobs == {env.CACHE: str(tmp_path / "cache"), env.TIMING_CORE: "0"}
