"""The ``depthwise_conv`` pattern: depthwise ``nn.Conv1d`` / ``nn.Conv2d`` calls of problem
files written here in KernelBench's form (traced on meta at their own sizes) become the
library's ``depthwise_conv``, on a GPU only; what would change the result is left alone;
the candidate's file computes the reference and passes the real evaluator on this CPU
(the kernel under Triton's interpreter)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from solforge.bench.evaluator import Evaluator
from solforge.problems import load_problem
from solforge.problems.loader import import_file
from solforge.records.evaluation import Status
from solforge.search.candidates import generate_candidates, search_context
from tests.conftest import interpreted_options

# KernelBench's 86_conv_depthwise_separable_2D, written here at its sizes
SEPARABLE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, bias=False):
        super().__init__()
        self.depthwise = nn.Conv2d(in_channels, in_channels, kernel_size, stride=stride,
                                   padding=padding, dilation=dilation, groups=in_channels,
                                   bias=bias)
        self.pointwise = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=bias)

    def forward(self, x):
        x = self.depthwise(x)
        x = self.pointwise(x)
        return x


def get_inputs():
    return [torch.rand({n}, {c}, {h}, {h})]


def get_init_inputs():
    return [{c}, 2 * {c}, 3, 1, 1]
'''

# Mamba's causal depthwise conv1d, its slice and SiLU after it
CAUSAL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_inner={d}, d_conv=4):
        super().__init__()
        self.conv1d = nn.Conv1d(d_inner, d_inner, kernel_size=d_conv, groups=d_inner,
                                padding=d_conv - 1, bias=True)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.conv1d(x)[..., :x.shape[-1]])


def get_inputs():
    return [torch.randn({b}, {d}, {t})]


def get_init_inputs():
    return [{d}, 4]
'''


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def _candidates(path: Path, device: str = "cuda"):
    ctx = search_context(load_problem(path), device)
    return ctx, {c.name: c for c in generate_candidates(ctx)[0]}


def test_a_depthwise_separable_block_at_kernelbench_s_size(tmp_path):
    path = _write(tmp_path, "86_conv_depthwise_separable_2D",
                  SEPARABLE.format(n=16, c=64, h=512))
    ctx, cands = _candidates(path)
    assert [m.description for m in ctx.matches] == [
        "Conv2d depthwise (64 channels, 3x3, float32) → depthwise_conv"]
    forward = cands["library"].source.split("def forward")[1]
    assert "depthwise_conv(x, self.depthwise)" in forward
    assert "self.pointwise(" in forward  # the 1x1 convolution stays cuDNN's
    assert cands["library"].language == "triton"
    # on a CPU the kernel would only run under the interpreter: not offered
    ctx, cands = _candidates(path, "cpu")
    assert not ctx.matches and "library" not in cands


def test_a_causal_conv1d_keeps_its_slice_and_activation(tmp_path):
    path = _write(tmp_path, "causal", CAUSAL.format(b=4, d=2048, t=1024))
    ctx, cands = _candidates(path)
    assert [m.description for m in ctx.matches] == [
        "Conv1d conv1d (2048 channels, 4, float32) → depthwise_conv", "silu → bias_act"]
    forward = cands["library"].source.split("def forward")[1]
    # the slice stays between the two calls
    assert "conv = depthwise_conv(x, self.conv1d)" in forward
    assert "getitem_1 = conv[..., :x.shape[-1]]" in forward
    assert "bias_act(getitem_1, None, 'silu')" in forward


@pytest.mark.parametrize("conv, x, why", [
    ("nn.Conv2d(64, 64, 3, groups=1)", "torch.rand(8, 64, 128, 128)", "not grouped"),
    ("nn.Conv2d(64, 64, 3, groups=32)", "torch.rand(8, 64, 128, 128)", "grouped, not depthwise"),
    ("nn.Conv2d(64, 64, 3, groups=64, padding=1, padding_mode='reflect')",
     "torch.rand(8, 64, 128, 128)", "reflect padding"),
    ("nn.Conv3d(64, 64, 3, groups=64)", "torch.rand(2, 64, 32, 32, 32)", "3-D"),
    ("nn.Conv1d(64, 64, 4, groups=64, padding='same')", "torch.rand(8, 64, 4096)",
     "asymmetric same padding"),
    ("Sub(64, 64, 3, groups=64)", "torch.rand(8, 64, 128, 128)", "a subclass"),
    ("nn.Conv2d(64, 64, 3, groups=64)",
     "torch.rand(8, 64, 128, 128).to(memory_format=torch.channels_last)", "channels-last"),
    ("nn.Conv2d(64, 64, 3, groups=64)", "torch.rand(8, 64, 128, 128).double()", "fp64"),
])
def test_what_would_change_the_result_is_left_alone(tmp_path, conv, x, why):
    path = _write(tmp_path, "other", f'''
        import torch
        import torch.nn as nn


        class Sub(nn.Conv2d):
            pass


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = {conv}
                if {x!r}.endswith(".double()"):
                    self.double()

            def forward(self, x):
                return self.conv(x)


        def get_inputs():
            return [{x}]


        def get_init_inputs():
            return []
        ''')
    ctx, _ = _candidates(path)
    assert ctx.trace_error is None and ctx.traced is not None, why
    assert not [m for m in ctx.matches if m.kind == "depthwise_conv"], why


def test_the_candidate_computes_the_reference(tmp_path):
    """Generated at the traced (large) sizes, the file is shape-generic: built with small
    init inputs and the reference's state, it matches the reference (interpreter)."""
    path = _write(tmp_path, "sep", SEPARABLE.format(n=16, c=64, h=512))
    _, cands = _candidates(path)
    sol = tmp_path / "cand.py"
    sol.write_text(cands["library"].source)
    torch.manual_seed(0)
    ref = import_file(path).Model(6, 12, 3, 1, 1)
    new = import_file(sol).ModelNew(6, 12, 3, 1, 1)
    new.load_state_dict(ref.state_dict())
    x = torch.rand(2, 6, 11, 13)
    with torch.no_grad():
        torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-6)


def test_the_candidate_passes_the_evaluator(tmp_path):
    """A problem small enough for the interpreter: the real evaluator (fresh inputs,
    held-out checks, anti-cheat) passes it."""
    # the interpreter runs a program per (plane, tile of 8 outputs): 2 x 4 planes of 23
    # outputs (3 tiles, the last partial; the slice drops the padding's 3) take every
    # path of 2 x 16 planes of 43 in 24 programs instead of 192 (33 s -> 11 s alone)
    path = _write(tmp_path, "causal_small", CAUSAL.format(b=2, d=4, t=20))
    _, cands = _candidates(path)
    sol = tmp_path / "solution.py"
    sol.write_text(cands["library"].source)
    assert "depthwise_conv(" in sol.read_text()
    with Evaluator(interpreted_options()) as ev:
        r = ev.evaluate(load_problem(path), sol)
    assert r.status is Status.PASSED, r.message
    assert r.language == "triton"
    assert "torch_fallback" not in r.flags and "calls_reference" not in r.flags
