"""FLOP and byte counting against counts done by hand."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import builtin_problems
from solforge.problems.loader import import_file
from solforge.problems.spec import call_with_params
from solforge.sol import Work, count_work


class MatMul(nn.Module):
    def forward(self, a, b):
        return a @ b


class Softmax(nn.Module):
    def forward(self, x):
        return F.softmax(x, dim=-1)


class RMSNorm(nn.Module):
    """HF LlamaRMSNorm, as the rmsnorm_llama3 problem writes it."""

    def __init__(self, hidden: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden).to(torch.bfloat16))

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
        return self.weight * h.to(x.dtype)


class CausalAttention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_gemm_flops_and_bytes():
    m, n, k = 64, 48, 32
    a, b = torch.randn(m, k), torch.randn(k, n)
    work = count_work(MatMul(), [a, b])
    assert work.tensor_flops == 2 * m * n * k
    assert work.vector_flops == 0
    assert work.bytes == 4 * (m * k + k * n + m * n)  # A, B and C once, fp32


def test_bf16_linear_counts_weight_and_bias():
    lin = nn.Linear(32, 16, dtype=torch.bfloat16)
    x = torch.randn(8, 32, dtype=torch.bfloat16)
    work = count_work(lin, [x])
    assert work.tensor_flops == 2 * 8 * 16 * 32
    assert work.bytes == 2 * (8 * 32 + 16 * 32 + 16 + 8 * 16)


def test_softmax_is_vector_work():
    rows, cols = 8, 100
    work = count_work(Softmax(), [torch.randn(rows, cols)])
    assert work.tensor_flops == 0
    assert work.vector_flops == 5 * rows * cols  # max, sub, exp, sum, div
    assert work.bytes == 4 * 2 * rows * cols


def test_rmsnorm_by_hand():
    tokens, hidden = 7, 257
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16)
    work = count_work(RMSNorm(hidden), [x])
    n = tokens * hidden
    # pow, mean (reads n), multiply, weight multiply: n each; + eps and rsqrt: one per row
    assert work.vector_flops == 4 * n + 2 * tokens
    assert work.tensor_flops == 0
    assert work.bytes == 2 * (n + hidden + n)  # x, weight, y in bf16


def test_causal_attention_declared_count_wins():
    b, h, s, d = 1, 2, 64, 16
    q, k, v = (torch.randn(b, h, s, d) for _ in range(3))
    counted = count_work(CausalAttention(), [q, k, v])
    full = 4 * b * h * s * s * d  # QK^T and PV, 2 FLOPs per multiply-add, unmasked
    assert counted.tensor_flops == full  # the counter does not know the mask
    assert counted.vector_flops == 5 * b * h * s * s
    declared = counted.with_declared(full / 2, 4 * b * h * s * d * 4)
    assert declared.tensor_flops == full / 2 and declared.vector_flops == 0
    assert declared.bytes == 4 * b * h * s * d * 4
    assert declared.source == "declared"


def test_declared_flops_go_to_vector_when_reference_has_no_gemm():
    work = Work(tensor_flops=0, vector_flops=10, bytes=100).with_declared(7, None)
    assert (work.tensor_flops, work.vector_flops, work.bytes) == (0, 7, 100)
    assert work.source == "counted+declared"
    assert Work(bytes=1).with_declared(None, None) == Work(bytes=1)


def test_counting_does_not_modify_the_model_or_inputs():
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5)).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(16, 8)
    x0 = x.clone()
    rng = torch.get_rng_state()
    work = count_work(model, [x])
    assert work.tensor_flops == 2 * 16 * 8 * 8
    for key, value in model.state_dict().items():
        assert torch.equal(before[key], value), f"{key} changed"
    assert model.training
    assert torch.equal(x, x0)
    assert torch.equal(torch.get_rng_state(), rng)


def test_unused_buffer_is_not_counted():
    class WithTable(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("unused", torch.zeros(1000))
            self.w = nn.Parameter(torch.randn(4))

        def forward(self, x):
            return x * self.w

    work = count_work(WithTable(), [torch.randn(4)])
    assert work.bytes == 4 * 3 * 4  # x, w, out; the 4 KB table is never read


def test_fp8_and_int8_gemms_on_cpu():
    m, n, k = 32, 16, 64
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    one = torch.ones(())

    class Fp8(nn.Module):
        def forward(self, a, b):
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    work = count_work(Fp8(), [a, b])
    assert work.tensor_flops == 2 * m * n * k
    assert work.bytes == m * k + k * n + 2 * m * n

    class Int8(nn.Module):
        def forward(self, a, b):
            return torch._int_mm(a, b)

    ai = torch.randint(-8, 8, (m, k), dtype=torch.int8)
    bi = torch.randint(-8, 8, (k, n), dtype=torch.int8)
    work = count_work(Int8(), [ai, bi])
    assert work.tensor_flops == 2 * m * n * k
    assert work.bytes == m * k + k * n + 4 * m * n


def test_outputs_given_are_what_bytes_count():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    work = count_work(MatMul(), [a, b], outputs=[torch.empty(4, 4, dtype=torch.float64)])
    assert work.bytes == 4 * 16 * 2 + 8 * 16


def _cpu_cases():
    for problem in builtin_problems():
        w = next((w for w in problem.workloads if w.cpu), None)
        if w is not None:
            yield pytest.param(problem, w, id=problem.name)


@pytest.mark.parametrize(("problem", "workload"), list(_cpu_cases()))
def test_counts_every_builtin_problem(problem, workload):
    mod = import_file(problem.path)
    torch.manual_seed(0)
    model = mod.Model(*call_with_params(mod.get_init_inputs, dict(workload.params))).eval()
    inputs = call_with_params(mod.get_inputs, dict(workload.params))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    work = count_work(model, inputs)
    assert work.bytes > 0 and work.flops >= 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    declared = work.with_declared(problem.declared_flops(workload),
                                  problem.declared_bytes(workload))
    assert declared.bytes > 0
