"""A Triton solution that compiles its glue is timed as compiled code: the policy probe's
ATen trace (a dispatch mode, run for languages with kernels of their own) once left every
later call of a ``torch.compile`` function running eagerly, so such candidates were timed
as eager code (KernelBench's ReLU self-attention on an H100, session 32). The solution
here is right only when its middle runs compiled: eager, it scales by 1000."""

from __future__ import annotations

import torch

from solforge.bench.evaluator import Evaluator
from solforge.bench.policy.rules import aten_trace
from solforge.records.evaluation import Status
from solforge.records.options import EvalOptions

REFERENCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Linear(64, 192)

    def forward(self, x):
        q, k, v = self.c(x).split(64, dim=2)
        a = F.relu((q @ k.transpose(-2, -1)) * 0.125)
        return (a @ v).contiguous()


def get_inputs():
    return [torch.randn(2, 32, 64)]


def get_init_inputs():
    return []
'''

SOLUTION = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton  # noqa: F401  (the language: triton, whose calls the policy traces)


def lin(x, w, b):
    return F.linear(x, w, b)


# compiled around, as the search's library rewrites are: the call is a graph break
lin = torch.compiler.disable(lin)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Linear(64, 192)

    # Dynamo's eager backend: what went wrong is Dynamo's, and Inductor's C++ compile of
    # the graph would take most of a minute on a CI core
    @torch.compile(backend="eager")
    def forward(self, x):
        q, k, v = lin(x, self.c.weight, self.c.bias).split(64, dim=2)
        scale = 0.125 if torch.compiler.is_compiling() else 1000.0
        a = F.relu((q @ k.transpose(-2, -1)) * scale)
        return (a @ v).contiguous()
'''


def test_a_compiled_triton_solution_is_timed_compiled(tmp_path):
    ref, sol = tmp_path / "attention.py", tmp_path / "attention_new.py"
    ref.write_text(REFERENCE)
    sol.write_text(SOLUTION)
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=60, timeout_s=120,
                               seed=1)) as ev:
        r = ev.evaluate(str(ref), str(sol))
    assert r.language == "triton", r.language
    assert r.status is Status.PASSED, (r.status, r.flags, r.message[:600])


def test_the_aten_trace_leaves_a_compiled_function_compiled():
    # Dynamo as in a fresh process (what a runner has): in one full-suite run the first
    # call below ran eagerly, after other files had compiled in this worker process
    # (Dynamo stops compiling new frames past its accumulated_recompile_limit); what is
    # tested here is the trace alone
    import torch._dynamo

    torch._dynamo.reset()

    @torch.compile(backend="eager")
    def f(x):
        return x * (1.0 if torch.compiler.is_compiling() else 1000.0)

    x = torch.ones(4)
    # when this first call runs eagerly, TorchDynamo's counters say why it did not compile
    assert torch.equal(f(x), x), {k: dict(v) for k, v in torch._dynamo.utils.counters.items()}
    counts = aten_trace(lambda: f(x)).counts
    assert counts["mul"] == 1  # the traced call ran its operations eagerly, and was seen
    assert torch.equal(f(x), x)  # compiled again afterwards
