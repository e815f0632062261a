"""The 3xTF32 GEMM (``kernels/triton/gemm_f32x3.py``) under Triton's interpreter, and the
``f32x3_gemm`` pattern: matched on large fp32 GEMMs of problem files written here (traced
on meta at their own sizes), offered on a GPU only and as a candidate of its own beside
the other patterns' rewrite, and its candidate's file run against the reference at small
sizes. The interpreter computes ``tl.dot`` in plain fp32, so the 3xTF32 error itself is
the GPU test's (``test_gpu_matmul_f32x3_is_fp32_accurate``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from solforge.kernels.triton import linear_f32x3, matmul_f32x3
from solforge.problems import load_problem
from solforge.problems.loader import import_file
from solforge.search.candidates import generate_candidates, search_context

ACTS = {None: lambda x: x, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu,
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


# -- the kernel ------------------------------------------------------------------------------
@pytest.mark.parametrize("act", list(ACTS))
def test_matmul_bias_and_activation_across_tiles_and_masks(act):
    torch.manual_seed(0)
    a, b, bias = torch.randn(37, 53), torch.randn(53, 29), torch.randn(29)
    got = matmul_f32x3(a, b, bias, act)
    want = ACTS[act](a @ b + bias)
    assert got.shape == (37, 29) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


STEPS = [(("add", 0.5), lambda x: x + 0.5), (("mul", -2.0), lambda x: x * -2.0),
         (("rsub", 1.0), lambda x: 1.0 - x), (("div", 3.0), lambda x: x / 3.0),
         (("leaky_relu", 0.1), lambda x: F.leaky_relu(x, 0.1)), ("sigmoid", torch.sigmoid),
         ("tanh", torch.tanh), (("clamp_min", -0.25), lambda x: x.clamp_min(-0.25)),
         (("clamp_max", 0.75), lambda x: x.clamp_max(0.75)), ("relu", torch.relu)]


@pytest.mark.parametrize("i", range(0, len(STEPS), 3))
def test_epilogue_steps_in_order_with_a_residual(i):
    torch.manual_seed(3)
    a, b, bias = torch.randn(21, 40), torch.randn(40, 18), torch.randn(18)
    res = torch.randn(18, 21).t()  # the output's shape, other strides
    chosen = STEPS[i:i + 3]
    got = matmul_f32x3(a, b, bias, epilogue=[s for s, _ in chosen] + ["residual"],
                       residual=res)
    want = a @ b + bias
    for _, fn in chosen:
        want = fn(want)
    torch.testing.assert_close(got, want + res, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("split", [2, 3, 7])
def test_split_k_sums_its_runs_then_applies_the_bias_and_epilogue(split):
    """Runs of K blocks of unequal use (K = 83 with 16-wide blocks: 6 blocks; 7 splits
    leave one run empty), batched, with a bias, steps and a residual after the sum."""
    torch.manual_seed(5)
    a, b, bias = torch.randn(3, 19, 83), torch.randn(3, 83, 22), torch.randn(22)
    res = torch.randn(3, 19, 22)
    got = matmul_f32x3(a, b, bias, "gelu", epilogue=[("mul", 0.5), "residual"],
                       residual=res, split_k=split)
    want = F.gelu(torch.bmm(a, b) + bias) * 0.5 + res
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    x, w = torch.randn(5, 70), torch.randn(30, 70)  # a linear layer's weight, read in place
    torch.testing.assert_close(matmul_f32x3(x, w.t(), split_k=split), x @ w.t(),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="at least 1"):
        matmul_f32x3(a, b, split_k=0)


def test_split_k_is_chosen_for_few_tiles_and_a_long_k_only():
    from solforge.kernels.triton.gemm_f32x3 import MAX_SPLIT, SPLIT_CHUNK, _split_k

    # KernelBench's 6_Matmul_with_large_K_dimension_: 16 tiles of 64x64, K = 524288
    assert _split_k(256, 256, 524288, 1) == 32
    assert _split_k(256, 256, 4 * SPLIT_CHUNK, 1) == 4  # each run at least a chunk long
    assert _split_k(64, 64, 1 << 22, 1) == MAX_SPLIT
    assert _split_k(1024, 8192, 8192, 1) == 1   # enough tiles
    assert _split_k(256, 256, SPLIT_CHUNK, 1) == 1  # K too short to split
    assert _split_k(256, 256, 524288, 4) == 8  # the batch's tiles count
    assert _split_k(256, 256, 524288, 8) == 1


def test_epilogue_mistakes_say_what_to_fix():
    a, b = torch.randn(4, 8), torch.randn(8, 5)
    with pytest.raises(ValueError, match="at most 4"):
        matmul_f32x3(a, b, None, "relu", epilogue=["relu"] * 4)
    with pytest.raises(ValueError, match="unknown epilogue step 'exp'"):
        matmul_f32x3(a, b, epilogue=["exp"])
    with pytest.raises(ValueError, match="one residual step at most"):
        matmul_f32x3(a, b, epilogue=["residual", "residual"], residual=torch.randn(4, 5))
    with pytest.raises(ValueError, match=r"float32 residual of shape \(4, 5\)"):
        matmul_f32x3(a, b, epilogue=["residual"], residual=torch.randn(5, 4))


def test_linear_reads_the_weight_in_place_and_folds_leading_dims():
    torch.manual_seed(1)
    x, w, bias = torch.randn(3, 5, 40), torch.randn(24, 40), torch.randn(24)
    torch.testing.assert_close(linear_f32x3(x, w, bias, "relu"), torch.relu(F.linear(x, w, bias)),
                               rtol=1e-5, atol=1e-5)
    xt = torch.randn(40, 15).t()  # a non-contiguous input: folded by a copy
    torch.testing.assert_close(linear_f32x3(xt, w), F.linear(xt, w), rtol=1e-5, atol=1e-5)


def test_batched_operands_of_any_rank_and_strides():
    torch.manual_seed(2)
    a = torch.randn(2, 3, 19, 23)
    b = torch.randn(2, 3, 17, 23).transpose(-1, -2)  # [2, 3, 23, 17], K-major
    torch.testing.assert_close(matmul_f32x3(a, b), a @ b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(matmul_f32x3(a[0], b[0]), torch.bmm(a[0], b[0]),
                               rtol=1e-5, atol=1e-5)


def test_an_mn_major_operand_of_a_large_gemm_is_copied_k_major():
    """Hopper's TF32 wgmma takes K-major operands only: ``1_Square``'s row-major B ran at
    3.29 ms against 1.85 ms for a K-major B of the same FLOPs (H100, session 23)."""
    from solforge.kernels.triton.gemm_f32x3 import K_MAJOR_MIN, _k_major

    torch.manual_seed(3)
    m, k, n = K_MAJOR_MIN, 24, 20
    a, b = torch.randn(m, k), torch.randn(k, n)  # b [K, N] row-major: N is contiguous
    b3 = _k_major(b.unsqueeze(0), 1, m)
    assert b3.stride(1) == 1 and torch.equal(b3[0], b)
    small = b.unsqueeze(0)
    assert _k_major(small, 1, K_MAJOR_MIN - 1) is small  # a small GEMM keeps its layout
    kmaj = b.t().contiguous().t().unsqueeze(0)
    assert _k_major(kmaj, 1, m) is kmaj  # K-major already: no copy
    at = torch.randn(k, n).t()  # an A [N?] of shape [20, 24] stored M-major
    a3 = _k_major(at.unsqueeze(0), 2, m)
    assert a3.stride(2) == 1 and torch.equal(a3[0], at)
    torch.testing.assert_close(matmul_f32x3(a, b, epilogue=[("mul", 0.5)]), (a @ b) * 0.5,
                               rtol=1e-5, atol=1e-5)
    big_n = torch.randn(k, K_MAJOR_MIN)  # the other operand large: A copied when M-major
    torch.testing.assert_close(matmul_f32x3(at, big_n), at @ big_n, rtol=1e-5, atol=1e-5)


def test_a_strided_bias_is_read_as_its_values():
    torch.manual_seed(5)
    a, b, bias = torch.randn(9, 12), torch.randn(12, 16), torch.randn(32)[::2]
    torch.testing.assert_close(matmul_f32x3(a, b, bias), a @ b + bias, rtol=1e-5, atol=1e-5)


def test_empty_dims():
    bias = torch.randn(6)
    assert matmul_f32x3(torch.randn(0, 4), torch.randn(4, 6)).shape == (0, 6)
    assert matmul_f32x3(torch.randn(0, 8192), torch.randn(8192, 6)).shape == (0, 6)  # long K
    got = matmul_f32x3(torch.randn(3, 0), torch.randn(0, 6), bias, "relu")
    torch.testing.assert_close(got, torch.relu(bias).expand(3, 6))
    res = torch.randn(3, 6)
    got = matmul_f32x3(torch.randn(3, 0), torch.randn(0, 6), bias,
                       epilogue=[("mul", 2.0), "residual"], residual=res)
    torch.testing.assert_close(got, bias * 2.0 + res)


def test_bad_input_says_what_to_fix():
    a, b = torch.randn(4, 8), torch.randn(8, 5)
    with pytest.raises(TypeError, match="float32"):
        matmul_f32x3(a.half(), b.half())
    with pytest.raises(ValueError, match="do not multiply"):
        matmul_f32x3(a, torch.randn(7, 5))
    with pytest.raises(ValueError, match=r"expected \(5,\)"):
        matmul_f32x3(a, b, torch.randn(4))
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        matmul_f32x3(a, b, None, "tanh")
    with pytest.raises(ValueError, match="same batch dims"):
        matmul_f32x3(torch.randn(2, 4, 8), torch.randn(3, 8, 5))


# -- the pattern -----------------------------------------------------------------------------
def _file(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
                    + textwrap.dedent(body))
    return path


MLP = """
    class Model(nn.Module):
        def __init__(self, d_in, d_hidden, d_out):
            super().__init__()
            self.up = nn.Linear(d_in, d_hidden)
            self.down = nn.Linear(d_hidden, d_out)

        def forward(self, x):
            return torch.softmax(self.down(torch.relu(self.up(x))) * 2.0, dim=-1)

    batch, d_in, d_hidden, d_out = {batch}, {d_in}, {d_hidden}, {d_out}

    def get_inputs():
        return [torch.randn(batch, d_in)]

    def get_init_inputs():
        return [d_in, d_hidden, d_out]
"""

MATMUL = """
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = nn.Parameter(torch.randn({n}))

        def forward(self, a, b):
            return F.gelu(torch.matmul(a, b) + self.bias)

    def get_inputs():
        return [torch.randn(4, {m}, {k}), torch.randn({k}, {n})]

    def get_init_inputs():
        return []
"""


def _big_mlp(tmp_path: Path, dtype: str = "") -> Path:
    return _file(tmp_path, "mlp", MLP.format(batch=4096, d_in=1024, d_hidden=4096,
                                             d_out=1024) + dtype)


def test_large_fp32_gemms_match_with_their_bias_and_activation(tmp_path):
    ctx = search_context(load_problem(_big_mlp(tmp_path)), "cuda")
    assert [m.kind for m in ctx.matches] == ["softmax"]  # the base rewrite, unchanged
    descs = [m.description for m in ctx.variant_matches]
    assert descs == ["fp32 linear + bias + relu → linear_f32x3 (3xTF32 tensor cores)",
                     "fp32 linear + bias + mul → linear_f32x3 (3xTF32 tensor cores)"]
    cands = {c.name: c for c in generate_candidates(ctx)[0]}
    base, both = cands["library"], cands["library+f32x3_gemm"]
    assert "linear_f32x3" not in base.source and both.parent == "library"
    # and its CUDA-graph replay: Triton's launches cost host time a graph does not
    graphed = cands["library+f32x3_gemm+cuda_graphs"]
    assert graphed.parent == "library+f32x3_gemm" and "cuda_graphs" in graphed.levers
    assert "@cuda_graphed" in graphed.source and graphed.source.count("linear_f32x3(") == 2
    assert "cuda_graphs" not in both.levers and "@cuda_graphed" not in both.source
    forward = both.source.split("def forward")[1]
    assert forward.count("linear_f32x3(") == 2 and "softmax(" in forward
    assert "epilogue=['relu']" in forward and "epilogue=[('mul', 2.0)]" in forward
    # a plain matmul with a parameter added and GELU after it, 3-D input folded
    m = _file(tmp_path, "mm", MATMUL.format(m=1024, k=512, n=1024))
    ctx = search_context(load_problem(m), "cuda")
    assert [m.kind for m in ctx.matches] == ["bias_act"]  # the add and GELU, after cuBLAS
    (v,) = ctx.variant_matches
    assert v.description == "fp32 matmul + bias + gelu → matmul_f32x3 (3xTF32 tensor cores)"
    # the variant overlaps every base match, so it stands alone, no parent
    cands = {c.name: c for c in generate_candidates(ctx)[0]}
    assert "library" in cands and "library+f32x3_gemm" not in cands
    assert cands["f32x3_gemm"].parent is None
    assert cands["f32x3_gemm+cuda_graphs"].parent == "f32x3_gemm"
    assert "bias_act" not in cands["f32x3_gemm"].source.split("def forward")[1]


def test_a_reference_bound_by_its_fp32_gemms_tries_the_3xtf32_candidate_first(tmp_path):
    """KernelBench ``99_Matmul_GELU_Softmax`` on an H100 (session 23): four cheaper library
    candidates that left the GEMM on the SIMT units took the problem's 40 s, and the
    3xTF32 candidate (1.44x a session before) was skipped for its estimated 25 s."""
    from solforge.records.evaluation import EvaluationRecord, Status, WorkloadResult
    from solforge.search.reorder import fp32_gemm_bound, reorder_after_reference

    ctx = search_context(load_problem(_big_mlp(tmp_path)), "cuda")
    rest = [c for c in generate_candidates(ctx)[0] if c.name != "reference"]

    def ref(*bounds):
        r = EvaluationRecord(problem="p", solution="s", status=Status.PASSED,
                             speedup_vs_eager=1.0, speedup_vs_compile=1.0)
        r.workloads = [WorkloadResult(name=f"w{i}", time_ms=2.7, sol_ms=1.0, bound=b, sol_unit=u)
                       for i, (b, u) in enumerate(bounds)]
        return r

    gemm = ref(("compute", "3xtf32"), ("compute", "3xtf32"))
    assert fp32_gemm_bound(gemm)
    order = [c.name for c in reorder_after_reference(rest, gemm)]
    assert order[:2] == ["library", "library+f32x3_gemm"], order
    assert order[-1].endswith("cuda_graphs")  # the graphs still last
    # bound by memory on one workload, or by another unit: cheapest first, as before
    for other in (ref(("compute", "3xtf32"), ("memory", None)), ref(("compute", "tf32"))):
        assert not fp32_gemm_bound(other)
        order = [c.name for c in reorder_after_reference(rest, other)]
        cheaper = [c.name for c in rest if c.cost < next(
            x.cost for x in rest if x.name == "library+f32x3_gemm") and "cuda_graphs" not in
            c.levers and "compile" not in c.levers]
        assert all(order.index(n) < order.index("library+f32x3_gemm") for n in cheaper)
    assert not fp32_gemm_bound(ref())  # nothing timed


def test_not_matched_on_a_cpu_small_or_16_bit(tmp_path):
    assert not search_context(load_problem(_big_mlp(tmp_path)), "cpu").variant_matches
    small = _file(tmp_path, "small", MLP.format(batch=64, d_in=64, d_hidden=128, d_out=64))
    ctx = search_context(load_problem(small), "cuda")
    assert ctx.traced is not None and not ctx.variant_matches
    half = _file(tmp_path, "half", MLP.format(batch=4096, d_in=1024, d_hidden=4096, d_out=1024)
                 .replace("torch.randn(batch, d_in)", "torch.randn(batch, d_in).half()")
                 .replace("super().__init__()", "super().__init__(); torch.set_default_dtype("
                          "torch.float16)"))
    try:
        ctx = search_context(load_problem(half), "cuda")
    finally:
        torch.set_default_dtype(torch.float32)
    assert ctx.trace_error is None and ctx.traced is not None and not ctx.variant_matches
    names = [c.name for c in generate_candidates(search_context(load_problem(
        _big_mlp(tmp_path)), "cpu"))[0]]
    assert not [n for n in names if "f32x3" in n]


def test_the_candidate_computes_the_reference(tmp_path):
    """The candidate generated at the traced (large) sizes is shape-generic: built with
    small init inputs and the reference's state, it matches the reference."""
    ctx = search_context(load_problem(_big_mlp(tmp_path)), "cuda")
    c = next(c for c in generate_candidates(ctx)[0] if c.name == "library+f32x3_gemm")
    sol = tmp_path / "cand.py"
    sol.write_text(c.source)
    torch.manual_seed(0)
    ref_mod = import_file(tmp_path / "mlp.py")
    ref = ref_mod.Model(48, 40, 24)
    new = import_file(sol).ModelNew(48, 40, 24)
    new.load_state_dict(ref.state_dict())
    x = torch.randn(5, 48)
    with torch.no_grad():
        torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-6)


SCALED_ATTENTION = """
    class Model(nn.Module):
        def __init__(self, d, t):
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d)
            self.register_buffer("mask", torch.tril(torch.ones(t, t)).view(1, t, t))
            self.d = d

        def forward(self, x):
            q, k, v = self.qkv(x).split(self.d, dim=2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / {scale})
            att = F.relu(att.masked_fill(self.mask[:, :x.size(1), :x.size(1)] == 0, -1e9))
            return (att @ v).transpose(1, 2).contiguous()

    batch, t, d = {batch}, {t}, {d}

    def get_inputs():
        return [torch.randn(batch, t, d)]

    def get_init_inputs():
        return [d, t]
"""


def _relu_attention(tmp_path: Path) -> Path:
    return _file(tmp_path, "relu_att", SCALED_ATTENTION.format(batch=16, t=1024, d=768,
                                                                scale=16.0))


def test_the_3xtf32_rewrite_is_also_compiled_around(tmp_path):
    """KernelBench's ``50_ReLUSelfAttention`` (session 30, H100): the 3xTF32 GEMMs with the
    scale, mask and ReLU between them as four eager passes ran at 0.71x of Inductor's
    fused program; ``f32x3_gemm+compile`` has compile fuse them, the library's calls left
    out of its graphs. Triton rewrites are compiled around on a GPU only."""
    ctx = search_context(load_problem(_relu_attention(tmp_path)), "cuda")
    assert ctx.trace_error is None and not ctx.matches and len(ctx.variant_matches) == 3
    cands = {c.name: c for c in generate_candidates(ctx)[0]}
    plain, compiled = cands["f32x3_gemm"], cands["f32x3_gemm+compile"]
    assert compiled.parent == "f32x3_gemm" and compiled.family == "library"
    assert "compile" in compiled.levers and "compile" not in plain.levers
    assert compiled.cost > plain.cost
    head, forward = compiled.source.split("def forward")
    assert "@torch.compile(mode='default')" in head and "torch.compile" not in plain.source
    assert ("linear_f32x3 = torch.compiler.disable(linear_f32x3)" in head and
            "matmul_f32x3 = torch.compiler.disable(matmul_f32x3)" in head)
    assert forward == plain.source.split("def forward")[1]  # the same rewritten graph
    # the MLP's base rewrite (a Triton softmax) compiled around its linear layers; its
    # 3xTF32 form leaves nothing of the reference's between the calls: not compiled
    mlp = {c.name: c for c in generate_candidates(search_context(
        load_problem(_big_mlp(tmp_path)), "cuda"))[0]}
    assert mlp["library+compile"].parent == "library"
    assert "softmax = torch.compiler.disable(softmax)" in mlp["library+compile"].source
    assert "library+f32x3_gemm" in mlp and "library+f32x3_gemm+compile" not in mlp
    # a GEMM whose bias and GELU went into its epilogue leaves nothing to compile around
    lone = _file(tmp_path, "mm", MATMUL.format(m=1024, k=512, n=1024))
    names = {c.name for c in generate_candidates(search_context(load_problem(lone), "cuda"))[0]}
    assert "f32x3_gemm" in names and "f32x3_gemm+compile" not in names
    # a CPU runs Triton under the interpreter: no compiled Triton rewrite there
    small = _file(tmp_path, "small", MLP.format(batch=64, d_in=64, d_hidden=128, d_out=64))
    cpu = [c.name for c in generate_candidates(search_context(load_problem(small), "cpu"))[0]]
    assert "library" in cpu and not [n for n in cpu if n.startswith("library+compile")]


def test_the_compiled_around_rewrite_runs_the_library_as_it_is(tmp_path):
    """The file torch.compile runs on a CPU (the kernels under the interpreter): the
    reference's output, with each library call a graph break of Dynamo's rather than
    traced into its graphs."""
    from torch._dynamo.utils import counters

    ctx = search_context(load_problem(_relu_attention(tmp_path)), "cuda")
    c = next(c for c in generate_candidates(ctx)[0] if c.name == "f32x3_gemm+compile")
    sol = tmp_path / "cand.py"
    sol.write_text(c.source)
    torch.manual_seed(0)
    ref = import_file(tmp_path / "relu_att.py").Model(24, 12)
    new = import_file(sol).ModelNew(24, 12)
    new.load_state_dict(ref.state_dict())
    x = torch.randn(2, 9, 24)
    torch._dynamo.reset()
    counters.clear()
    try:
        with torch.no_grad():
            got, want = new(x), ref(x)
        breaks = sum(counters["graph_break"].values())
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert breaks >= 3, dict(counters["graph_break"])  # one per library call


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_matmul_f32x3_is_fp32_accurate():
    """On a GPU: 3xTF32 within an fp32 GEMM's own error of a float64 product, and TF32
    (the same kernel with one product) far outside it."""
    torch.manual_seed(0)
    a = torch.randn(1024, 4096, device="cuda")
    b = torch.randn(4096, 1024, device="cuda")
    exact = (a.double() @ b.double())
    err = lambda y: ((y.double() - exact).abs().max() / exact.abs().max()).item()
    fp32 = err(a @ b)
    assert err(matmul_f32x3(a, b)) < 4 * fp32 + 1e-7
    assert err(matmul_f32x3(a, b, precision="tf32")) > 10 * fp32
    # few tiles, a long K: split over the SMs, the runs summed in fp32
    a, b = torch.randn(256, 1 << 16, device="cuda"), torch.randn(1 << 16, 256, device="cuda")
    exact = (a.double() @ b.double())
    assert err(matmul_f32x3(a, b)) < 4 * err(a @ b) + 1e-7


def test_batched_gemms_count_their_batches_and_few_tiles_are_left_to_cublas(tmp_path):
    bmm = """
        class Model(nn.Module):
            def forward(self, a, b):
                return torch.bmm(a, b)

        def get_inputs():
            return [torch.randn({b}, {m}, {k}), torch.randn({b}, {k}, {n})]

        def get_init_inputs():
            return []
    """
    many = _file(tmp_path, "bmm", bmm.format(b=128, m=256, n=256, k=256))
    (v,) = search_context(load_problem(many), "cuda").variant_matches
    assert v.description.startswith("fp32 matmul →")
    # few tiles, short or long K: left to cuBLAS (its split-K beat the kernel's 1.25x on
    # KernelBench's 256x256, K = 524288 on an H100: benchmarks/results/2026-12-06-h100-s25)
    for name, m, k in (("short_k", 512, 2048), ("long_k", 256, 1 << 17)):
        few = _file(tmp_path, name, bmm.format(b=1, m=m, n=m, k=k))
        ctx = search_context(load_problem(few), "cuda")
        assert ctx.traced is not None and not ctx.variant_matches, name


def test_attention_keeps_its_sdpa_and_gains_the_projections():
    """KernelBench's MinGPT at its own sizes (traced on meta): the attention's own q @ k^T
    is a large batched fp32 GEMM too, but the masked SDPA reaches beyond it and stays; the
    variant takes the two projections."""
    from tests.conftest import FIXTURES

    mingpt = FIXTURES / "kernelbench" / "KernelBench" / "level3" / "43_MinGPTCausalAttention.py"
    ctx = search_context(load_problem(mingpt), "cuda")
    cands = {c.name: c for c in generate_candidates(ctx)[0]}
    c = cands["sdpa+f32x3_gemm"]
    forward = c.source.split("def forward")[1]
    assert c.parent == "sdpa" and "masked_sdpa(" in forward
    assert forward.count("linear_f32x3(") == 2 and "matmul_f32x3" not in forward
    assert "f32x3_gemm" not in cands  # nothing to offer without the attention's rewrite


EINSUM = """
    class Model(nn.Module):
        def forward(self, a, b):
            return torch.einsum("{eq}", a, b)

    def get_inputs():
        return [torch.randn(*{sa}), torch.randn(*{sb})]

    def get_init_inputs():
        return []
"""


@pytest.mark.parametrize("eq,sa,sb,fn", [
    ("bijl,lk->bijk", (2, 16, 32, 256), (256, 768), "matmul_f32x3"),
    ("bij,kj->bik", (4, 512, 256), (1024, 256), "linear_f32x3"),
    ("bmk,bkn->bmn", (64, 256, 128), (64, 128, 256), "matmul_f32x3"),
])
def test_einsums_that_are_one_gemm(tmp_path, eq, sa, sb, fn):
    path = _file(tmp_path, "ein", EINSUM.format(eq=eq, sa=sa, sb=sb))
    ctx = search_context(load_problem(path), "cuda")
    (v,) = ctx.variant_matches
    c = next(c for c in generate_candidates(ctx)[0] if c.name == "f32x3_gemm")
    sol = tmp_path / "cand.py"
    sol.write_text(c.source)
    # the candidate is shape-generic: run at small sizes of the same ranks
    if fn == "matmul_f32x3" and len(sb) == 2:
        small = [torch.randn(2, 3, 5, 24), torch.randn(24, 7)]
    elif fn == "linear_f32x3":
        small = [torch.randn(2, 5, 24), torch.randn(7, 24)]
    else:
        small = [torch.randn(3, 5, 24), torch.randn(3, 24, 7)]
    assert f"{fn}(" in c.source.split("def forward")[1]
    got = import_file(sol).ModelNew()(*small)
    torch.testing.assert_close(got, torch.einsum(eq, *small), rtol=1e-5, atol=1e-5)


def test_einsums_that_are_not_one_gemm(tmp_path):
    for eq, sa, sb in (("ij,jk->ki", (512, 512), (512, 512)),       # transposed output
                       ("bij,bjk->bik", (4, 512, 512), (1, 512, 512)),  # broadcast batch
                       ("ij,ij->ij", (512, 512), (512, 512))):     # no contraction
        path = _file(tmp_path, "ein", EINSUM.format(eq=eq, sa=sa, sb=sb))
        ctx = search_context(load_problem(path), "cuda")
        assert ctx.traced is not None and not ctx.variant_matches, eq


CHAIN = """
    class Model(nn.Module):
        def __init__(self, d_in, d_out):
            super().__init__()
            self.fc = nn.Linear(d_in, d_out)
            self.act = nn.Hardtanh(-0.5, 0.5)
            self.scale = nn.Parameter(torch.randn(d_out))

        def forward(self, x, skip):
            y = F.leaky_relu((self.fc(x) - 0.25) * 2.0, 0.2)
            y = skip + self.act(y)
            return y.sigmoid() * self.scale

    batch, d_in, d_out = {batch}, {d_in}, {d_out}

    def get_inputs():
        return [torch.randn(batch, d_in), torch.randn(batch, d_out)]

    def get_init_inputs():
        return [d_in, d_out]
"""


def test_an_epilogue_chain_is_fused_up_to_its_limit_and_runs_as_the_reference(tmp_path):
    path = _file(tmp_path, "chain", CHAIN.format(batch=2048, d_in=1024, d_out=1024))
    ctx = search_context(load_problem(path), "cuda")
    (v,) = ctx.variant_matches
    # sub, mul and leaky_relu, then hardtanh's two clamps: the fifth step; the residual
    # add, the sigmoid and the tensor scale stay in the graph
    assert v.description == ("fp32 linear + bias + add + mul + leaky_relu → linear_f32x3 "
                             "(3xTF32 tensor cores)")
    c = next(c for c in generate_candidates(ctx)[0] if c.name == "f32x3_gemm")
    forward = c.source.split("def forward")[1]
    assert "epilogue=[('add', -0.25), ('mul', 2.0), ('leaky_relu', 0.2)]" in forward
    sol = tmp_path / "cand.py"
    sol.write_text(c.source)
    ref_mod = import_file(path)
    torch.manual_seed(0)
    ref = ref_mod.Model(24, 20)
    new = import_file(sol).ModelNew(24, 20)
    new.load_state_dict(ref.state_dict())
    x, skip = torch.randn(7, 24), torch.randn(7, 20)
    with torch.no_grad():
        torch.testing.assert_close(new(x, skip), ref(x, skip), rtol=1e-5, atol=1e-6)


RESIDUAL = """
    class Model(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.fc = nn.Linear(d, d)

        def forward(self, x):
            return torch.clamp(torch.relu(self.fc(x)) + x, max=3.0) / 4.0

    def get_inputs():
        return [torch.randn({batch}, {d})]

    def get_init_inputs():
        return [{d}]
"""


def test_a_residual_and_a_one_sided_clamp(tmp_path):
    path = _file(tmp_path, "res", RESIDUAL.format(batch=2048, d=1024))
    ctx = search_context(load_problem(path), "cuda")
    (v,) = ctx.variant_matches
    assert v.description == ("fp32 linear + bias + relu + residual + clamp_max + div → "
                             "linear_f32x3 (3xTF32 tensor cores)")
    c = next(c for c in generate_candidates(ctx)[0] if c.name == "f32x3_gemm")
    assert "residual=x" in c.source.split("def forward")[1]
    sol = tmp_path / "cand.py"
    sol.write_text(c.source)
    ref_mod = import_file(path)
    torch.manual_seed(0)
    ref = ref_mod.Model(24)
    new = import_file(sol).ModelNew(24)
    new.load_state_dict(ref.state_dict())
    x = torch.randn(5, 24) * 4
    with torch.no_grad():
        torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-6)


def test_a_long_k_gemm_is_not_matched_and_the_kernel_still_splits_it(tmp_path):
    """KernelBench's 6_Matmul_with_large_K_dimension_ (256x256, K = 524288) at its size:
    no 3xTF32 candidate (the split kernel ran at 0.80x of cuBLAS on an H100); called
    directly, the kernel splits a long K (one 64x64 tile, K = 8192: four runs) and gives
    the product."""
    body = """
        class Model(nn.Module):
            def forward(self, A, B):
                return torch.matmul(A, B)

        def get_inputs():
            return [torch.rand(256, 131072 * 4), torch.rand(131072 * 4, 256)]

        def get_init_inputs():
            return []
    """
    ctx = search_context(load_problem(_file(tmp_path, "large_k", body)), "cuda")
    assert ctx.traced is not None and not ctx.variant_matches
    assert not [c for c in generate_candidates(ctx)[0] if "f32x3" in c.name]
    from solforge.kernels.triton.gemm_f32x3 import _split_k, matmul_f32x3

    assert _split_k(16, 24, 8192, 1) == 4
    torch.manual_seed(2)
    a, b = torch.rand(16, 8192), torch.rand(8192, 24)
    torch.testing.assert_close(matmul_f32x3(a, b), a @ b, rtol=1e-5, atol=1e-4)


def test_the_pattern_needs_as_many_tiles_as_the_kernel_leaves_unsplit():
    from solforge.kernels.triton import gemm_f32x3 as kernel
    from solforge.search.patterns import gemm_f32x3 as pattern

    assert pattern.MIN_TILES == kernel.SPLIT_BELOW_TILES


def test_the_pattern_and_the_kernel_agree_on_the_step_limit():
    from solforge.kernels.triton import gemm_f32x3 as kernel
    from solforge.search.patterns import gemm_f32x3 as pattern

    assert pattern.MAX_STEPS == kernel.MAX_STEPS


def test_a_gpu_without_tf32_tensor_cores_gets_no_3xtf32_candidate(tmp_path, monkeypatch):
    """A Turing or Volta card (no TF32): the candidate would not compile there; the search
    logs why there is none (``rewrite_failed``). The capability is the one thing faked:
    this machine has no GPU."""
    from solforge.search.families import variants as families

    ctx = search_context(load_problem(_big_mlp(tmp_path)), "cuda")
    monkeypatch.setattr(families, "_capability", lambda device: (7, 5))
    names = [c.name for c in generate_candidates(ctx)[0]]
    assert "library" in names and not [n for n in names if "f32x3" in n]
    assert ctx.rewrite_errors == ["f32x3_gemm: this GPU (sm_75) has no TF32 tensor cores "
                                  "for 3xTF32"]
