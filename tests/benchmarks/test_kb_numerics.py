"""The CPU numerics sweep's shrinking (``benchmarks/kb_numerics.py``): a KernelBench file's
module-level sizes divided by the smallest factor that fits the cap and still runs."""

from __future__ import annotations

import ast

from benchmarks.kb_numerics import _Shrink, _scaled, shrink_file

GROUPNORM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.gn = nn.GroupNorm(groups, channels)

    def forward(self, x):
        return self.gn(x)


batch_size = 2 * 32
channels = 48
groups = 12
shape = (batch_size, channels, 255, 64)


def get_inputs():
    return [torch.rand(batch_size, channels, 255, 64)]


def get_init_inputs():
    return [channels, groups]
'''


def test_sizes_shrink_keeping_multiples_of_eight_and_odd_tails():
    assert _scaled(4096, 16) == 256 and _scaled(48, 4) == 8 and _scaled(48, 2) == 24
    assert _scaled(4095, 16) == 255 and _scaled(4095, 32) % 2 == 1  # a masked tail stays
    assert _scaled(16, 64) == 16  # under 32: a group count, a kernel size
    tree = _Shrink(4)
    out = ast.unparse(tree.shrink(ast.parse(
        "n = 2048 * 2\nk = (3, 1 << 10)\nD, H, W = 24, 64, 63\ns = 'x'\n")))
    assert out == "n = 1024\nk = (3, 256)\nD, H, W = (24, 16, 15)\ns = 'x'"
    assert tree.changed == {"n": "1024", "k": "(3, 256)", "(D, H, W)": "(24, 16, 15)"}


def test_the_smallest_factor_that_fits_and_runs_is_kept(tmp_path):
    src = tmp_path / "src" / "35_GroupNorm.py"
    src.parent.mkdir()
    src.write_text(GROUPNORM)
    out = tmp_path / "out"
    out.mkdir()
    # 64 x 48 x 255 x 64 = 50M elements, under 2**18 from a factor of 4 on: 48 channels
    # become 8 there, which 12 groups do not divide, so GroupNorm refuses that copy and
    # every larger factor's (8 channels is the floor)
    rec = shrink_file(src, out, 1 << 18)
    assert "not_shrunk" in rec
    tried = rec["not_shrunk"]
    assert tried["2"].endswith("(cap 262144)") and "divisible" in tried["4"], tried
    # a cap the factor 2 fits: kept, and the copy has the halved sizes
    rec = shrink_file(src, out, 1 << 24)
    assert rec == {"factor": 2, "sizes": {"batch_size": "32", "channels": "24",
                                          "shape": "(batch_size, channels, 127, 32)"}}
    assert "channels = 24" in (out / src.name).read_text()
