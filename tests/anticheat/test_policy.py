"""The policy's rules one by one: static rules on source snippets (no process started),
the dynamic rules' pure parts, and default-versus-strict through the real evaluator."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

import pytest
import torch

from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from solforge.bench.policy.rules import (
    AtenTrace,
    aten_trace,
    coverage_finding,
    kernel_finding,
    kernel_library,
    normalise_op,
)
from solforge.bench.policy.static import check_source
from solforge.records.evaluation import Status
from solforge.bench.policy.solution import detect_language, get_language

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TINY = FIXTURES / "problems" / "tiny_linear.py"


def findings(src: str, problem: Path | None = TINY) -> list:
    src = textwrap.dedent(src)
    lang = detect_language(src)
    return check_source(src, lang, get_language(lang).own_kernels, problem)


def rules(src: str) -> set[str]:
    return {f.rule for f in findings(src)}


HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

@triton.jit
def k(x, y, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + i, tl.load(x + i, mask=i < n), mask=i < n)
"""


@pytest.mark.parametrize("path", sorted((ROOT / "examples" / "solutions").rglob("*.py"))
                         + sorted((FIXTURES / "honest").glob("*.py")),
                         ids=lambda p: p.stem)
def test_no_static_finding_on_honest_code(path):
    assert findings(path.read_text(), None) == []


def test_gemm_on_cublas_beside_an_own_kernel_is_fair():
    assert rules(HEAD + """
class ModelNew(nn.Module):
    def __init__(self, k=33, n=17):
        super().__init__(); self.fc = nn.Linear(k, n)
    def forward(self, x):
        y = F.linear(x, self.fc.weight).contiguous()
        out = torch.empty_like(y)
        k[(1,)](y, out, y.numel(), B=1024)
        return out.view(x.shape[0], -1)
""") == set()


def test_no_own_kernel_reached_from_forward():
    r = findings(HEAD + """
class ModelNew(nn.Module):
    def __init__(self, k=33, n=17):
        super().__init__(); self.fc = nn.Linear(k, n)
    def helper(self, x):
        return F.gelu(self.fc(x))
    def forward(self, x):
        return self.helper(x) * 1.5
""")
    assert [f.rule for f in r] == ["torch_fallback.no_own_kernel"]
    assert "torch.nn.functional.gelu" in r[0].message and r[0].line


def test_kernel_reached_through_helpers_and_modules_counts():
    assert rules(HEAD + """
def launch(x):
    y = torch.empty_like(x); k[(1,)](x, y, x.numel(), B=64); return y
class Block(nn.Module):
    def forward(self, x):
        return launch(x)
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__(); self.block = Block(); self.fc = nn.Linear(3, 3)
    def forward(self, x):
        return self.block(self.fc(x))
""") == set()


@pytest.mark.parametrize("launch", [
    "torch.ops.mylib.fused(x)",              # a custom operator of its own
    "EXT.fused(x)",                          # a load_inline extension
    "KERNEL(grid=(1,), block=(32,), args=(x,))",  # an NVRTC kernel
    "liger_kernel_fn(x)",                    # a third-party package: benefit of the doubt
])
def test_other_ways_to_launch_an_own_kernel(launch):
    src = HEAD + f"""
from torch.utils.cpp_extension import load_inline
from solforge.kernels import cuda
from liger_kernel.ops import liger_kernel_fn
EXT = load_inline("x", cpp_sources="", functions=[])
KERNEL = cuda.compile("src", "name")
class ModelNew(nn.Module):
    def forward(self, x):
        x = F.relu(x)
        return {launch}
"""
    assert "torch_fallback.no_own_kernel" not in rules(src)


def test_torch_compile_is_pytorch_for_a_triton_solution_but_not_for_pytorch():
    body = """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = torch.compile(self.impl)
    def impl(self, x):
        return F.gelu(x)
    def forward(self, x):
        return self.f(x)
"""
    assert "torch_fallback.no_own_kernel" in rules(HEAD + body)
    plain = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n" + body
    assert findings(plain) == []


def test_inheriting_a_torch_module_forward():
    assert "torch_fallback.no_own_kernel" in rules(HEAD + """
class ModelNew(nn.Linear):
    pass
""")


def test_try_except_fallback():
    r = findings(HEAD + """
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        try:
            k[(1,)](x, y, x.numel(), B=64)
        except Exception:
            y = F.gelu(x)
        return y
""")
    assert [f.rule for f in r] == ["hidden_fallback.try_except"]


def test_try_except_that_only_reraises_is_fine():
    assert rules(HEAD + """
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        try:
            k[(1,)](x, y, x.numel(), B=64)
        except triton.CompilationError as e:
            raise RuntimeError("build failed") from e
        return y
""") == set()


@pytest.mark.parametrize("test", ["not HAS_KERNELS", "not x.is_cuda",
                                  "x.device.type == 'cpu'"])
def test_flag_or_device_branch_fallback(test):
    r = rules(HEAD + f"""
try:
    import my_kernels
    HAS_KERNELS = True
except ImportError:
    HAS_KERNELS = False
class ModelNew(nn.Module):
    def forward(self, x):
        if {test}:
            return F.gelu(x)
        y = torch.empty_like(x)
        k[(1,)](x, y, x.numel(), B=64)
        return y
""")
    assert "hidden_fallback.guarded_branch" in r


def test_shape_dispatch_is_not_a_hidden_fallback():
    # choosing PyTorch for some shapes is judged per workload by the dynamic rules
    assert rules(HEAD + """
class ModelNew(nn.Module):
    def forward(self, x):
        if x.shape[0] > 4096:
            return F.gelu(x)
        y = torch.empty_like(x)
        k[(1,)](x, y, x.numel(), B=64)
        return y
""") == set()


def test_calls_reference_static():
    assert "calls_reference.import" in rules("""
import torch.nn as nn
from tiny_linear import Model
class ModelNew(Model):
    pass
""")
    assert "calls_reference.import" in rules("""
import torch.nn as nn
from solforge.problems.loader import import_file
""")
    assert rules('''
"""A solution for tiny_linear.py (a docstring may name the problem)."""
import torch.nn as nn
''') == set()


@pytest.mark.parametrize("line, rule", [
    ("import solforge.bench.measure.timing", "harness_access.imports_harness"),
    ("f = sys._getframe(1)", "harness_access.introspection"),
    ("objs = gc.get_objects()", "harness_access.introspection"),
    ("mods = list(sys.modules)", "harness_access.introspection"),
    ("time.perf_counter = lambda: 0.0", "harness_access.monkeypatch"),
    ("torch.allclose = my_allclose", "harness_access.monkeypatch"),
    ("F.gelu.__code__ = my_allclose.__code__", "harness_access.monkeypatch"),
])
def test_harness_access(line, rule):
    assert rule in rules(f"""
import gc, sys, time, torch
import torch.nn.functional as F
def my_allclose(*a, **k):
    return True
{line}
""")


def test_library_settings_are_not_monkey_patching():
    assert rules("""
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.benchmark = True
""") == set()


# --- dynamic rules (their pure parts) -------------------------------------------------

def test_normalise_op():
    assert normalise_op("addmm") == normalise_op("mm") == "gemm"
    assert normalise_op("mul_") == "mul" and normalise_op("native_layer_norm") == "layer_norm"
    for op in ("view", "empty_strided", "_to_copy", "copy_", "t", "clone", "fill_"):
        assert normalise_op(op) is None


def test_aten_coverage():
    w, x = torch.randn(4, 3), torch.randn(2, 3)
    ref = aten_trace(lambda: torch.nn.functional.gelu(x @ w.t()) * 1.5)
    assert ref.counts == Counter({"gemm": 1, "gelu": 1, "mul": 1})
    assert ref.elements["gemm"] == 6 + 12 and ref.elements["gelu"] == 8
    decoy = aten_trace(lambda: (torch.nn.functional.gelu(x @ w.t()) * 1.5).add(0))
    assert coverage_finding(ref, decoy, "w") is not None
    epilogue_of_its_own = aten_trace(lambda: x @ w.t())
    assert coverage_finding(ref, epilogue_of_its_own, "w") is None
    assert coverage_finding(AtenTrace(), ref, "w") is None  # a data-movement reference


def test_second_stage_reduction_over_partials_is_not_coverage():
    x = torch.randn(64, 64)
    ref = aten_trace(lambda: x.sum())
    partials = torch.randn(4)  # what the solution's own kernel left to add up
    assert coverage_finding(ref, aten_trace(lambda: partials.sum()), "w") is None
    assert coverage_finding(ref, aten_trace(lambda: x.sum()), "w") is not None


def test_kernel_names():
    aten = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"
    for name, lib in [(aten, "ATen"), ("ampere_sgemm_128x64_nn", "cuBLAS"),
                      ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "cuBLAS"),
                      ("nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NTN", "cuBLAS"),
                      ("triton_poi_fused_gelu_mul_0", "inductor"),
                      ("_linear_gelu", None), ("gemm_kernel", None), ("bias_gelu_scale", None),
                      ("void cutlass::Kernel2<cutlass_80_tensorop>", None),
                      ("Memcpy DtoD (Device -> Device)", None)]:
        assert kernel_library(name) == lib, name
    assert kernel_finding(["ampere_sgemm_128x64_nn", aten], "triton", "w") is not None
    assert kernel_finding(["ampere_sgemm_128x64_nn", "_bias_gelu"], "triton", "w") is None
    assert kernel_finding(["Memset (Device)"], "triton", "w") is None


# --- default versus strict, through the evaluator ------------------------------------

@pytest.fixture(scope="module")
def ev():
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=60, timeout_s=60,
                               seed=2)) as e:
        yield e


@pytest.mark.parametrize("name, flag", [("torch_fallback_no_kernel.py", "torch_fallback"),
                                        ("decoy_kernel.py", "torch_fallback"),
                                        ("calls_reference_import.py", "calls_reference")])
def test_default_policy_flags_and_judges_results(ev, name, flag):
    r = ev.evaluate(TINY, FIXTURES / "hacks" / name)
    assert r.status is Status.PASSED and flag in r.flags, r.message
    assert r.speedup_vs_eager is not None
    assert any(f.flag == flag and (f.line or f.workload) for f in r.findings)


def test_strict_policy_rejects_with_the_rule_and_line(ev):
    r = ev.evaluate(TINY, FIXTURES / "hacks" / "torch_fallback_no_kernel.py", policy="strict")
    assert r.status is Status.REWARD_HACK and r.flags == ["torch_fallback"]
    assert "no_own_kernel" in r.message and "line" in r.message
    assert r.workloads == []  # rejected before any candidate code ran


def test_strict_policy_passes_honest_kernels(ev):
    for name in ("triton_epilogue_cublas_gemm.py", "triton_atomic_splitk.py"):
        r = ev.evaluate(TINY, FIXTURES / "honest" / name, policy="strict")
        assert r.status is Status.PASSED and r.flags == [], (name, r.message)


def test_reference_solution_is_exempt(ev):
    from solforge.bench.judge.reference_solution import reference_solution
    from solforge.problems import load_problem

    p = load_problem(TINY)
    r = ev.evaluate(p, reference_solution(p), policy="strict")
    assert r.status is Status.PASSED and r.flags == [], r.message


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="strict"):
        EvalOptions(policy="lenient")
