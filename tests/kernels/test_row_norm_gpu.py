"""The one-read (cooperative) normalisations on a GPU (skipped without one), against
PyTorch: LayerNorm over KernelBench's 40_LayerNorm rows (16 x 64 x 256 x 256) and over rows
of a prime length (a partial last piece), GroupNorm and InstanceNorm with per-channel
weights, a row over its mean |x| and its L2 norm. Each case's plan must be ``coop`` and its
launch must finish with every row's pieces arrived and no program having given up waiting
(``row_norm.norm_rows``'s counters), at 1e-4 (the evaluator's tolerance for fp32) and
closer.

The check runs in a subprocess without TRITON_INTERPRET: the interpreter tests set it for
this whole process, and the kernels read it at import. Run directly
(``python tests/kernels/test_row_norm_gpu.py``) to see each case.
"""

import os
from pathlib import Path

import pytest

from tests.conftest import requires_gpu, run_outside_interpreter

pytestmark = [requires_gpu, pytest.mark.gpu]


def check_all():
    import torch
    import torch.nn.functional as F

    from solforge.kernels.triton import cooperative, layernorm, row_norm

    torch.manual_seed(0)
    sms = row_norm.sm_count("cuda")

    def run(name, x, rows, stat, ref, max_tile=None, **kw):
        plan = row_norm.plan(*rows.shape, sms, max_tile=max_tile)
        pieces = -(-rows.shape[1] // row_norm._COOP_CHUNK)
        if plan.kind != "coop" and pieces > cooperative.PER_SM * sms:
            print(f"skipped: {name}: {pieces} pieces a row, more than {sms} SMs hold",
                  flush=True)  # (40_LayerNorm's 256 on an H100 PCIe's 114 SMs)
            return
        assert plan.kind == "coop", (name, plan)
        y = torch.empty_like(rows)
        cnt = row_norm.norm_rows(rows, y, stat, row_plan=plan, **kw)
        torch.testing.assert_close(y.view(x.shape), ref, atol=2e-5, rtol=2e-5)
        assert (cnt[:-1] == plan.pieces).all() and cnt[-1] == 0, f"{name}: a program gave up"
        print(f"ok: {name} {tuple(x.shape)} {plan}", flush=True)

    x = torch.rand(16, 64, 256, 256, device="cuda")
    ns = x.shape[1:]
    w, b = 1 + 0.1 * torch.randn(ns, device="cuda"), 0.1 * torch.randn(ns, device="cuda")
    ref = F.layer_norm(x, ns, w, b)
    run("layer_norm", x, x.view(16, -1), row_norm.MEAN_VAR, ref, layernorm.ONE_PASS_MAX,
        eps=1e-5, weight=w.view(-1), bias=b.view(-1), affine=row_norm.PER_COLUMN)
    torch.testing.assert_close(layernorm.layer_norm(x, w, b, normalized_shape=ns), ref,
                               atol=2e-5, rtol=2e-5)
    del x, w, b, ref
    x = 3 * torch.randn(96, 100003, device="cuda") + 10  # far from zero mean
    run("layer_norm, no affine", x, x, row_norm.MEAN_VAR, F.layer_norm(x, (100003,)),
        layernorm.ONE_PASS_MAX, eps=1e-5)
    x = torch.rand(16, 64, 256, 256, device="cuda")
    wc, bc = 1 + 0.1 * torch.randn(64, device="cuda"), 0.1 * torch.randn(64, device="cuda")
    run("group_norm", x, x.view(16 * 8, -1), row_norm.MEAN_VAR,
        F.group_norm(x, 8, wc, bc), eps=1e-5, weight=wc, bias=bc,
        affine=row_norm.PER_CHANNEL, groups=8, per_group=8, spatial=256 * 256)
    run("instance_norm", x, x.view(16 * 64, -1), row_norm.MEAN_VAR,
        F.instance_norm(x, weight=wc, bias=bc), eps=1e-5, weight=wc, bias=bc,
        affine=row_norm.PER_CHANNEL, groups=64, per_group=1, spatial=256 * 256)
    h = torch.rand(16, 64, 100, 100, device="cuda")  # channels of 10000: pieces span two
    run("group_norm, a channel per element", h, h.view(16 * 4, -1), row_norm.MEAN_VAR,
        F.group_norm(h, 4, wc, bc), eps=1e-5, weight=wc, bias=bc,
        affine=row_norm.PER_CHANNEL, groups=4, per_group=16, spatial=100 * 100)
    del x, h
    x = torch.rand(4096, 65535, device="cuda")
    run("mean_abs", x, x, row_norm.MEAN_ABS, x / x.abs().mean(-1, keepdim=True))
    run("l2", x, x, row_norm.L2, x / torch.norm(x, p=2, dim=1, keepdim=True))


def test_cooperative_norms_on_gpu():
    run_outside_interpreter(Path(__file__))


if __name__ == "__main__":
    assert os.environ.get("TRITON_INTERPRET") != "1", "unset TRITON_INTERPRET to run on the GPU"
    check_all()
