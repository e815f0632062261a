"""The filters and the dedupe of `solforge synth`, on hand-made candidates: each filter
rejects its bad case for its own reason and passes a good one; the dedupe drops a near-copy
of a built-in problem, keeps a distinct one, and drops a batch's repeats and an earlier
batch's problems."""

from __future__ import annotations

import re

import pytest

from solforge.problems.loader import BUILTIN_DIR
from solforge.synth.dedupe import Deduper, builtin_files, fingerprint
from solforge.synth.filters import FilterConfig, check_source, check_source_isolated
from solforge.synth.pipeline import SynthConfig, synthesize
from solforge.synth.write import prepare, write_batch

META = {"precision": "fp32", "workloads": [
    {"name": "cpu_small", "params": {"n": 8, "d": 16}, "cpu": True},
    {"name": "cpu_odd", "params": {"n": 3, "d": 24}, "cpu": True, "visible": False}]}

GOOD = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.linear = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.linear(x)) * 2.0
{extra}

def get_inputs(n: int = 8, d: int = 16):
    return [torch.randn(n, d)]


def get_init_inputs(d: int = 16):
    return [d]
'''


def _with_forward(body: str, extra: str = "") -> str:
    src = GOOD.replace("{extra}", extra)
    return src.replace("        return torch.tanh(self.linear(x)) * 2.0", body)


BAD = {
    "constant_output": _with_forward("        return torch.ones_like(x) * 3.0"),
    "zero_output": _with_forward("        return torch.relu(-torch.abs(self.linear(x)))"),
    "nondeterministic": _with_forward("        return self.linear(x) + torch.rand_like(x)"),
    "eager_error": _with_forward("        return self.linear(x.t())"),  # (d, n) @ (d, d)
    "returns_input": _with_forward("        return x.clone() + 0.0 * self.linear(x)"),
    "non_finite": _with_forward("        return self.linear(x) / 0.0"),
    "load_error": "import torch\nclass Model(:\n",
}


@pytest.mark.parametrize("reason", sorted(BAD))
def test_each_filter_rejects_its_bad_case(reason):
    v = check_source(BAD[reason], META, FilterConfig(compile_check=False))
    assert (v.reason, v.ok) == (reason, False), v


def test_good_case_passes_eager_compile_and_window_but_not_a_tiny_window():
    v = check_source(GOOD.replace("{extra}", ""), META, FilterConfig())  # inductor compile
    assert v.ok and v.eager_ms is not None and v.eager_ms > 0, v
    v = check_source(GOOD.replace("{extra}", ""), META,
                     FilterConfig(compile_check=False, window_ms=(0.0, 1e-9)))
    assert v.reason == "runtime_out_of_window" and "cpu_small" in v.detail


def test_compile_filter_rejects_what_torch_compile_breaks_or_changes():
    # is_compiling() is True only while dynamo traces: eager runs are unchanged
    breaks = _with_forward(
        "        if torch.compiler.is_compiling():\n            return x @ x  # (n, d) @ (n, d)\n"
        "        return torch.tanh(self.linear(x))")
    changes = _with_forward(
        "        if torch.compiler.is_compiling():\n            return torch.tanh(self.linear(x))"
        " * 3.0\n        return torch.tanh(self.linear(x))")
    cfg = FilterConfig(compile_backend="eager")  # dynamo's tracing is what is under test
    assert check_source(breaks, META, cfg).reason == "compile_error"
    assert check_source(changes, META, cfg).reason == "compile_mismatch"
    assert check_source(changes, META, FilterConfig(compile_check=False)).ok


def test_dedupe_drops_a_near_copy_of_a_builtin_and_keeps_a_distinct_one():
    ref = Deduper()
    ref.add_files(builtin_files())
    original = BUILTIN_DIR / "l1" / "rmsnorm_llama3.py"
    assert str(original) in {label for label, _ in ref.references}
    # renamed locals and arguments, other constants, comments and docstring gone
    text = original.read_text()
    copy = re.sub(r"\bhidden\b", "width", re.sub(r"\btokens\b", "rows", text))
    copy = copy.replace("1e-5", "1e-6").replace('"""', "'''")
    copy = re.sub(r"#.*", "", copy)
    assert copy != text
    hit = ref.match(fingerprint(copy))
    assert hit is not None and hit[0] == str(original) and hit[1] > 0.9
    distinct = GOOD.replace("{extra}", "").replace("torch.tanh(self.linear(x)) * 2.0",
                                                    "torch.cumsum(self.linear(x), dim=1)")
    assert ref.match(fingerprint(distinct)) is None


def test_a_batch_drops_its_own_repeats_and_an_earlier_batchs_problems(tmp_path):
    cfg = SynthConfig(n=3, seed=0, ops=["relu", "tanh"], max_ops=1, max_draws=6,
                      filters=FilterConfig(compile_check=False))
    batch = synthesize(cfg)
    # relu(x) and tanh(x) alone differ in one attribute: similarity above 0.9
    assert len(batch.accepted) == 1 and batch.tally.counts == {"ok": 1, "duplicate": 5}
    first = synthesize(SynthConfig(n=4, seed=5, filters=FilterConfig(compile_check=False)))
    out = tmp_path / "earlier"
    prepare(out, overwrite=False)
    write_batch(out, first.accepted, first.report(SynthConfig(n=4)))
    again = synthesize(SynthConfig(n=4, seed=5, references=[out], max_draws=4,
                                   filters=FilterConfig(compile_check=False)))
    assert not again.accepted and again.tally.counts["duplicate"] == 4
    with pytest.raises(ValueError, match="already holds a batch"):
        prepare(out, overwrite=False)
    with pytest.raises(ValueError, match="not a directory"):
        synthesize(SynthConfig(n=1, references=[tmp_path / "nope"]))


def test_a_plugin_op_goes_through_the_same_door():
    from solforge.synth.catalogue import OPS, Op, Step, register_op

    def build(st, rng, slot):
        return Step([], ["x = torch.special.erf(x) * 2.0"], st.shape)

    register_op(Op("erf_double", "activation", lambda st: True, build))
    try:
        batch = synthesize(SynthConfig(n=1, seed=2, ops=["erf_double"], max_ops=1,
                                       builtin_reference=False,
                                       filters=FilterConfig(compile_check=False)))
    finally:
        OPS.pop("erf_double")
    (a,) = batch.accepted
    assert a.ops == ("erf_double",) and "torch.special.erf(x) * 2.0" in a.code


def test_model_written_code_runs_apart_a_hang_or_a_crash_is_a_reason():
    """An LLM's reply is screened in a process of its own: one that hangs is killed at its
    time (``timeout``), one that kills its interpreter is ``crashed``, a good one passes."""
    cfg = FilterConfig(compile_check=False)
    good = check_source_isolated(GOOD.replace("{extra}", ""), META, cfg, timeout_s=120)
    assert good.ok, good
    segv = "import ctypes\nctypes.string_at(0)\n" + GOOD.replace("{extra}", "")
    v = check_source_isolated(segv, META, cfg, timeout_s=120)
    assert v.reason == "crashed" and "signal 11" in v.detail, v
    hang = _with_forward("        while True:\n            pass")
    v = check_source_isolated(hang, META, cfg, timeout_s=8)
    assert v.reason == "timeout", v
