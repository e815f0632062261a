"""The ``conv`` family on problem files written here: cuDNN's timed algorithms under
compile (GPU), channels-last order for 3-D convolutions (NDHWC: weights converted by
rank, 5-D inputs), none for a reference that mixes 2-D and 3-D convolutions, and the 3-D
candidate judged on a CPU against its reference."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch
import torch.nn as nn

from solforge.bench.evaluator import Evaluator
from solforge.problems import load_problem
from solforge.problems.loader import import_file
from solforge.records.evaluation import Status
from solforge.search.candidates import generate_candidates, search_context
from solforge.search.runtime import channels_last_3d, channels_last_3d_weights
from tests.conftest import interpreted_options

CONV3D = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.{conv}(c_in, c_out, 3, padding=1)
        self.scale = nn.Parameter(torch.rand(1, c_out, 1, 1, 1) + 0.5)
{extra_init}
    def forward(self, x{extra_args}):
        y = torch.tanh(self.conv(x) * self.scale)
{extra_forward}        return y


def get_inputs():
    return [torch.randn(2, 4, 5, 6, 7){extra_inputs}]


def get_init_inputs():
    return [4, 8]
"""


def _write(tmp_path: Path, name: str, conv: str = "Conv3d", mixed: bool = False) -> Path:
    text = CONV3D.format(
        conv=conv,
        extra_init="        self.conv2d = nn.Conv2d(4, 8, 3, padding=1)\n" if mixed else "",
        extra_args=", img" if mixed else "",
        extra_forward="        y = y.sum() + self.conv2d(img).sum()\n" if mixed else "",
        extra_inputs=", torch.randn(2, 4, 9, 9)" if mixed else "")
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


def _conv(path: Path, device: str) -> dict:
    cands, _ = generate_candidates(search_context(load_problem(path), device))
    return {c.name: c for c in cands if c.family == "conv"}


def test_3d_convolutions_get_ndhwc_candidates_and_gpus_the_timed_algorithms_compiled(tmp_path):
    for conv in ("Conv3d", "ConvTranspose3d"):
        path = _write(tmp_path, conv.lower(), conv)
        cpu, gpu = _conv(path, "cpu"), _conv(path, "cuda")
        assert list(cpu) == ["channels_last_3d", "channels_last_3d+compile"]
        assert list(gpu) == ["cudnn_benchmark", "channels_last_3d", "cudnn_benchmark+compile",
                             "channels_last_3d+compile"]  # cheapest first
        c = gpu["channels_last_3d"]
        assert c.parent == "cudnn_benchmark" and "channels_last" in c.levers
        assert "channels_last_3d_weights(self)" in c.source
        assert "x = channels_last_3d(x)" in c.source
        assert "memory_format=torch.channels_last)" not in c.source
        bench = gpu["cudnn_benchmark+compile"]
        assert bench.parent == "cudnn_benchmark" and bench.levers == ["cudnn_benchmark", "compile"]
        head = bench.source.split("class ModelNew")[1]
        # the flags around the compiled call: ATen reads them when the program runs
        assert head.index("@backend_flags(cudnn_benchmark=True)") < head.index("@torch.compile(")


def test_a_reference_with_2d_and_3d_convolutions_gets_no_channels_last(tmp_path):
    got = _conv(_write(tmp_path, "mixed", mixed=True), "cuda")
    assert list(got) == ["cudnn_benchmark", "cudnn_benchmark+compile"]


def test_3d_weights_by_rank_and_their_order_survives_a_state_dict_copy():
    m = nn.Sequential(nn.Conv3d(3, 5, 3), nn.Conv2d(3, 5, 3), nn.BatchNorm3d(5))
    channels_last_3d_weights(m)
    assert m[0].weight.is_contiguous(memory_format=torch.channels_last_3d)
    assert not m[0].weight.is_contiguous()
    assert m[1].weight.is_contiguous()  # 4-D: left as it is
    src = nn.Sequential(nn.Conv3d(3, 5, 3), nn.Conv2d(3, 5, 3), nn.BatchNorm3d(5))
    m.load_state_dict(src.state_dict())
    assert m[0].weight.is_contiguous(memory_format=torch.channels_last_3d)
    assert torch.equal(m[0].weight, src[0].weight)
    x = torch.randn(2, 3, 4, 5, 6)
    y = channels_last_3d(x)
    assert y.is_contiguous(memory_format=torch.channels_last_3d) and torch.equal(x, y)
    img = torch.randn(2, 3, 4, 5)
    assert channels_last_3d(img) is img and channels_last_3d(3) == 3


def test_the_ndhwc_candidate_computes_and_passes_as_the_reference(tmp_path):
    path = _write(tmp_path, "convt3d", "ConvTranspose3d")
    c = _conv(path, "cpu")["channels_last_3d"]
    sol = tmp_path / "cand.py"
    sol.write_text(c.source)
    torch.manual_seed(0)
    ref = import_file(path).Model(4, 8)
    new = import_file(sol).ModelNew(4, 8)
    new.load_state_dict(ref.state_dict())
    assert new.conv.weight.is_contiguous(memory_format=torch.channels_last_3d)
    x = torch.randn(2, 4, 5, 6, 7)
    with torch.no_grad():
        torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-5)
    with Evaluator(interpreted_options()) as ev:
        r = ev.evaluate(load_problem(path), sol)
    assert r.status is Status.PASSED, r.message


SEPARABLE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c, d):
        super().__init__()
        self.depthwise = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.pointwise = nn.Conv2d(c, d, 1)

    def forward(self, x):
        return self.pointwise(self.depthwise(x)){tail}


def get_inputs():
    return [torch.randn(4, 32, 64, 64)]


def get_init_inputs():
    return [32, 64]
"""


def test_a_rewrite_is_compiled_around_only_where_compile_has_work_to_fuse(tmp_path):
    """The depthwise rewrite leaves only a 1x1 convolution of the reference's, which
    Inductor hands to cuDNN as eager does: no ``library+compile``; a ReLU after it is
    work to fuse."""
    names = {}
    for tail in ("", ".relu()"):
        path = tmp_path / f"separable{len(tail)}.py"
        path.write_text(SEPARABLE.format(tail=tail))
        cands, _ = generate_candidates(search_context(load_problem(path), "cuda"))
        names[tail] = {c.name for c in cands}
    assert "library" in names[""] and "library+compile" not in names[""]
    assert "library" in names[".relu()"] and "library+compile" in names[".relu()"]
