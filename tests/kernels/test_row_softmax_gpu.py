"""The one-read (cooperative) softmax and log-softmax over long rows, on a GPU (skipped
without one), against PyTorch: KernelBench's row length on 512 rows, and 96 rows of a
prime length (a partial last piece). Each launch must also have finished with every row's
pieces arrived and no program having given up waiting (``row_softmax._cooperative``).

The check runs in a subprocess without TRITON_INTERPRET: the interpreter tests set it for
this whole process, and the kernels read it at import. Run directly
(``python tests/kernels/test_row_softmax_gpu.py``) to see each case.
"""

import os
from pathlib import Path

import pytest

from tests.conftest import requires_gpu, run_outside_interpreter

pytestmark = [requires_gpu, pytest.mark.gpu]


def check_all():
    import torch

    from solforge.kernels.triton import row_softmax

    torch.manual_seed(0)
    sms = row_softmax.sm_count("cuda")
    for shape in ((512, 393216), (96, 100003)):
        x = 3 * torch.randn(shape, device="cuda")
        x[0, :20000] = float("-inf")  # masked logits: whole pieces of -inf
        plan = row_softmax.plan_rows(*shape, sms)
        assert plan.kind == "coop", plan
        for ours, ref_fn, log in ((row_softmax.softmax, torch.softmax, False),
                                  (row_softmax.log_softmax, torch.log_softmax, True)):
            ref = ref_fn(x, dim=-1)
            torch.testing.assert_close(ours(x), ref, atol=1e-5, rtol=1e-5)
            y = torch.empty_like(x)
            cnt = row_softmax._cooperative(x, y, plan, log)
            torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
            assert (cnt[:-1] == plan.pieces).all() and cnt[-1] == 0, "a program gave up"
            print(f"ok: {ours.__name__} {shape} {plan}", flush=True)


def test_cooperative_softmax_on_gpu():
    run_outside_interpreter(Path(__file__))


if __name__ == "__main__":
    assert os.environ.get("TRITON_INTERPRET") != "1", "unset TRITON_INTERPRET to run on the GPU"
    check_all()
