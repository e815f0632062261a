# RESNET_BLOCK below is KernelBench's level3/8_ResNetBasicBlock.py at small sizes
# (https://github.com/ScalingIntelligence/KernelBench), under its licence:
#
# MIT License
#
# Copyright (c) 2023 Anne Ouyang, Simon Guo, Azalia Mirhoseini
# Scaling Intelligence Lab, Stanford University
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
# in the Software without restriction, including without limitation the rights
# to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
# copies of the Software, and to permit persons to whom the Software is
# furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in all
# copies or substantial portions of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
# IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
# FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
# LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
# OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
# SOFTWARE.
"""The ``batch_norm`` pattern: KernelBench's ResNet basic block (its last BatchNorm + the
downsample branch's BatchNorm + add + ReLU in one call; ``bn1`` + ReLU, whose fp32 output
feeds a convolution, left alone) and a conv → BatchNorm → ReLU model are matched; their
candidates keep the reference's convolutions, give its output within 1e-5 and leave the
same running buffers and ``num_batches_tracked`` (training mode, as plain KernelBench files
are judged, and after ``.eval()``); forms whose rewrite would change the result are left
alone."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from solforge.bench.evaluator import Evaluator
from solforge.problems import load_problem
from solforge.problems.loader import import_file
from solforge.records.evaluation import Status
from solforge.search.align import trace_reference
from solforge.search.candidates import generate_candidates, search_context
from solforge.search.match import find_matches
from tests.conftest import interpreted_options

RESNET_BLOCK = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    expansion = 1

    def __init__(self, in_channels, out_channels, stride=1):
        """
        :param in_channels: Number of input channels
        :param out_channels: Number of output channels
        :param stride: Stride for the first convolutional layer
        :param downsample: Downsample layer for the shortcut connection
        """
        super(Model, self).__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.downsample = nn.Sequential(
            nn.Conv2d(in_channels, out_channels * self.expansion, kernel_size=1, stride=stride, bias=False),
            nn.BatchNorm2d(out_channels * self.expansion),
        )
        self.stride = stride

    def forward(self, x):
        """
        :param x: Input tensor, shape (batch_size, in_channels, height, width)
        :return: Output tensor, shape (batch_size, out_channels, height, width)
        """
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        out = self.relu(out)

        return out

# Test code
in_channels = 3
out_channels = 6
stride = 1
batch_size = 2
num_classes = 1000

def get_inputs():
    return [torch.rand(batch_size, in_channels, 9, 11)]

def get_init_inputs():
    return [in_channels, out_channels, stride]
'''

CONV_BN_RELU = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Conv2d, BatchNorm2d (momentum None: a cumulative average), ReLU."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3)
        self.bn = nn.BatchNorm2d(5, momentum=None)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(3, 3, 8, 7)]


def get_init_inputs():
    return []
'''


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def _library(path: Path):
    p = load_problem(path)
    cands, _ = generate_candidates(search_context(p, "cpu"))
    return p, next(c for c in cands if c.name == "library")


def _check_against_reference(tmp_path: Path, path: Path, source: str) -> None:
    """The candidate and the reference, built alike with the same state, called twice in
    training mode and once after ``.eval()``: same outputs, same buffers."""
    ref_mod = import_file(path)
    sol = tmp_path / "cand.py"
    sol.write_text(source)
    torch.manual_seed(0)
    ref = ref_mod.Model(*ref_mod.get_init_inputs())
    new = import_file(sol).ModelNew(*ref_mod.get_init_inputs())
    new.load_state_dict(ref.state_dict())
    assert ref.training and new.training
    for train in (True, True, False):
        ref.train(train), new.train(train)
        x = ref_mod.get_inputs()[0]
        with torch.no_grad():
            torch.testing.assert_close(new(x.clone()), ref(x.clone()), rtol=1e-5, atol=1e-5)
        for (k, a), (_, b) in zip(new.state_dict().items(), ref.state_dict().items()):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=k)


def test_resnet_basic_block_fuses_both_batch_norms_the_add_and_relus(tmp_path):
    path = _write(tmp_path, "8_ResNetBasicBlock", RESNET_BLOCK)
    p, c = _library(path)
    assert p.kernelbench_plain
    forward = "\n".join(line for line in c.source.split("def forward")[1].splitlines()
                        if not line.strip().startswith("#"))
    assert ("batch_norm_act(conv2, self.bn2, relu=True, residual=downsample_0, "
            "residual_bn=self.downsample[1])") in forward
    # the convolutions are the reference's own calls; bn1 + ReLU feed conv2 (TF32 on a
    # GPU: an ulp of difference there moves its output by 1e-4), so they stay too
    assert "self.downsample[0](x)" in forward and "self.conv2(relu)" in forward
    assert "self.bn1(conv1)" in forward and "self.relu(bn1)" in forward
    assert forward.count("batch_norm_act(") == 1 and " + " not in forward
    assert c.language == "triton"
    _check_against_reference(tmp_path, path, c.source)


def test_conv_batch_norm_relu_follows_the_module_s_momentum_none(tmp_path):
    path = _write(tmp_path, "conv_bn_relu", CONV_BN_RELU)
    p, c = _library(path)
    assert "batch_norm_act(conv, self.bn, relu=True)" in c.source
    _check_against_reference(tmp_path, path, c.source)


def test_resnet_block_candidate_passes_the_evaluator(tmp_path):
    path = _write(tmp_path, "8_ResNetBasicBlock", RESNET_BLOCK)
    p, c = _library(path)
    sol = tmp_path / "solution.py"
    sol.write_text(c.source)
    with Evaluator(interpreted_options()) as ev:
        r = ev.evaluate(p, sol)
    assert r.status is Status.PASSED, r.message
    assert "torch_fallback" not in r.flags and "calls_reference" not in r.flags


def _kinds(tmp_path: Path, init: str, forward: str, x: str = "torch.randn(2, 4, 5, 3)",
           y: str = "torch.randn(2, 4, 5, 3)"):
    path = _write(tmp_path, "variant", f'''
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                {init}

            def forward(self, x, y):
                {forward}


        def get_inputs():
            return [{x}, {y}]


        def get_init_inputs():
            return []
    ''')
    p = load_problem(path)
    tr = trace_reference(p, import_file(p.path))
    return [(m.kind, m.description) for m in find_matches(tr)]


@pytest.mark.parametrize("forward, described", [
    ("return torch.relu(y + self.bn(x))", "BatchNorm2d bn + residual add + ReLU"),
    ("return self.bn(x).relu()", "BatchNorm2d bn + ReLU"),
    ("return F.relu(self.bn(x), inplace=True) * 2", "BatchNorm2d bn + ReLU"),
    ("return torch.add(self.bn(x), self.bn2(y))",
     "BatchNorm2d bn + BatchNorm2d bn2 (residual)"),
    # in place: the batch norm alone (the in-place call stays, on its output)
    ("return torch.relu_(self.bn(x))", "BatchNorm2d bn →"),
    # the batch norm's output read twice: nothing fused after it
    ("b = self.bn(x); return torch.relu(b) + b", "BatchNorm2d bn →"),
    # a broadcast residual, an add with alpha: not fused
    ("return self.bn(x) + y[:, :1]", "BatchNorm2d bn →"),
    ("return torch.add(self.bn(x), y, alpha=2.0)", "BatchNorm2d bn →"),
])
def test_forms(tmp_path, forward, described):
    init = "self.bn = nn.BatchNorm2d(4); self.bn2 = nn.BatchNorm2d(4)"
    (m,) = _kinds(tmp_path, init, forward)
    assert m[0] == "batch_norm" and m[1].startswith(described), m


@pytest.mark.parametrize("dt, matched", [("float32", False), ("bfloat16", True)])
def test_an_fp32_batch_norm_feeding_a_convolution_is_left_alone(tmp_path, dt, matched):
    """Through a ReLU and a pooling, still a convolution's input: in fp32 (TF32 on a GPU)
    it is left to PyTorch; a 16-bit output is read by the convolution as it is."""
    init = (f"self.bn = nn.BatchNorm2d(4, dtype=torch.{dt}); "
            f"self.conv = nn.Conv2d(4, 4, 1, dtype=torch.{dt})")
    forward = "return self.conv(F.max_pool2d(torch.relu(self.bn(x)), 2)) + y[:, :, :2, :1]"
    x = f"torch.randn(2, 4, 5, 3, dtype=torch.{dt})"
    kinds = _kinds(tmp_path, init, forward, x=x, y=x)
    assert kinds == ([("batch_norm", "BatchNorm2d bn + ReLU → batch_norm_act")]
                     if matched else []), kinds


def test_functional_calls_and_other_dtypes_are_left_alone(tmp_path):
    assert _kinds(tmp_path, "pass", "return F.batch_norm(x, None, None, training=True)") == []
    assert _kinds(tmp_path, "self.bn = nn.BatchNorm2d(4).double()", "return self.bn(x)",
                  x="torch.randn(2, 4, 5, 3, dtype=torch.float64)") == []
