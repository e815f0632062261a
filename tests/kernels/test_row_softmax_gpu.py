"""The one-read (cooperative) softmax and log-softmax over long rows, on a GPU (skipped
without one), against PyTorch: KernelBench's row length on 512 rows, and 96 rows of a
prime length (a partial last piece). Each launch must also have finished with every row's
pieces arrived and no program having given up waiting (``row_softmax._cooperative``).

The check runs in a subprocess without TRITON_INTERPRET: the interpreter tests set it for
this whole process, and the kernels read it at import. Run directly
(``python tests/kernels/test_row_softmax_gpu.py``) to see each case.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import requires_gpu

pytestmark = [requires_gpu, pytest.mark.gpu]

ROOT = Path(__file__).resolve().parents[2]


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
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when unset
    proc = subprocess.run([sys.executable, __file__], env=env, cwd=ROOT, capture_output=True,
                          text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


if __name__ == "__main__":
    assert os.environ.get("TRITON_INTERPRET") != "1", "unset TRITON_INTERPRET to run on the GPU"
    check_all()
