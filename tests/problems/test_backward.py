"""Every backward problem's reference (explicit gradient math, as a kernel computes it) agrees
with torch.autograd on its CPU workloads: the file's ``autograd_forward`` builds the forward
it differentiates, autograd runs it in float64 on the same inputs with the same upstream
gradients. With the workload's data in fp32 (``dtype`` passed where the file takes it) each
gradient must match in norm (relative L2 error 1e-4) and under the problem's own precision
class (the evaluator's comparison); in the workload's own dtype (bf16) in norm, within
bf16's rounding of the data and of the saved tensors (attention's saved o enters dS through
rowsum(grad_out * o), so a bf16 o alone moves dq by up to a few percent of an element)."""

from __future__ import annotations

import time

import pytest
import torch

from solforge.bench.measure.compare import compare
from solforge.problems import builtin_problems, gen
from solforge.problems.loader import BUILTIN_DIR, import_file
from solforge.problems.spec import call_with_params

BACKWARD = [p for p in builtin_problems() if p.direction == "backward"]
IDS = [p.name for p in BACKWARD]
# relative L2 error of a gradient against float64 autograd: a bf16 output rounds at 2**-9
REL_L2 = {torch.bfloat16: 3e-2, torch.float16: 1e-2, torch.float32: 1e-4}


def test_backward_corpus_breadth():
    assert len(BACKWARD) >= 32, len(BACKWARD)
    assert len({p.family for p in BACKWARD}) >= 12, sorted({p.family for p in BACKWARD})
    folder = sorted(f.stem for f in (BUILTIN_DIR / "backward").glob("*.py")
                    if not f.name.startswith("_"))
    assert folder == sorted(IDS), "every file under corpus/backward/ says direction: backward"
    for p in BACKWARD:
        assert p.category in {"L1", "L2", "attention"}, (p.name, p.category)
        assert p.shapes_from and p.family, p.name
        assert sum(1 for w in p.workloads if not w.cpu) >= 2, p.name
        assert len(p.workloads) >= 4, p.name
        assert p.flops_fn is not None and p.bytes_fn is not None, p.name


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float64).requires_grad_(True)


@pytest.mark.parametrize("problem", BACKWARD, ids=IDS)
def test_reference_matches_autograd(problem):
    mod = import_file(problem.path)
    assert hasattr(mod, "autograd_forward"), f"{problem.path}: define autograd_forward"
    cases = [(w, fp32) for w in problem.workloads if w.cpu for fp32 in (True, False)]
    for w, fp32 in cases:
        params = dict(w.params) | ({"dtype": torch.float32} if fp32 else {})
        t0 = time.perf_counter()
        torch.manual_seed(42)
        model = mod.Model(*call_with_params(mod.get_init_inputs, params)).eval()
        torch.manual_seed(3)
        with gen.distribution(problem.distributions[-1]):
            inputs = call_with_params(mod.get_inputs, params)
        with torch.no_grad():
            got = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        got = list(got) if isinstance(got, (tuple, list)) else [got]

        fn, wrt, grads_out = mod.autograd_forward(model, *inputs)
        leaves = [_leaf(t) for t in wrt]
        outs = fn(*leaves)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        assert len(outs) == len(grads_out), "one upstream gradient per forward output"
        want = torch.autograd.grad(outs, leaves, [g.to(torch.float64) for g in grads_out],
                                   allow_unused=True)
        assert len(got) == len(want), (f"{problem.name}/{w.name}: forward returns "
                                       f"{len(got)} gradients, autograd_forward names "
                                       f"{len(want)} tensors")
        for i, (g, a) in enumerate(zip(got, want)):
            a = torch.zeros_like(leaves[i]) if a is None else a
            where = f"{problem.name}/{w.name}{' (fp32)' if fp32 else ''} gradient {i}"
            assert g.shape == a.shape, f"{where}: shape {tuple(g.shape)} vs {tuple(a.shape)}"
            assert g.dtype == wrt[i].dtype, f"{where}: dtype {g.dtype} vs {wrt[i].dtype}"
            err = float((g.double() - a).norm() / a.norm().clamp_min(1e-30))
            assert err < REL_L2[g.dtype], f"{where}: relative L2 error {err:.3g}"
            if g.dtype == torch.float32:
                cmp = compare(g, a.to(g.dtype), problem.for_workload(w).precision)
                assert cmp.ok, f"{where}: {cmp.message}"
        # the tolerance means something at the gradients' own scale: zeros fail
        pc = problem.for_workload(w).precision
        assert not all(compare(torch.zeros_like(g), g, pc).ok for g in got), \
            f"{problem.name}/{w.name}: all-zero gradients pass {pc.name}"
        assert time.perf_counter() - t0 < 20, f"{problem.name}/{w.name}: CPU workload too slow"


@pytest.mark.parametrize("name, params", [
    ("swiglu_mlp_bwd_qwen2_5", {"tokens": 1024, "hidden": 64, "inter": 128}),
    ("rmsnorm_bwd_llama3", {"tokens": 2048, "hidden": 128}),
])
def test_gradient_class_admits_eager_bf16_autograd(name, params):
    """PyTorch's own bf16 backward (each op's result rounded to bf16) is an honest kernel:
    bf16_grad passes its weight gradients, where the forward classes' fixed atol fails them
    (they are sums over thousands of tokens, of size ~sqrt(tokens))."""
    from solforge.problems.precision import get_precision

    mod = import_file(BUILTIN_DIR / "backward" / f"{name}.py")
    torch.manual_seed(42)
    model = mod.Model(*call_with_params(mod.get_init_inputs, params))
    torch.manual_seed(1)
    inputs = call_with_params(mod.get_inputs, params)
    with torch.no_grad():
        ref = model(*inputs)
    fn, wrt, grads_out = mod.autograd_forward(model, *inputs)
    leaves = [t.detach().clone().requires_grad_(True) for t in wrt]
    eager = torch.autograd.grad(fn(*leaves), leaves, grads_out)
    assert all(compare(e, r, get_precision("bf16_grad")).ok for e, r in zip(eager, ref))
    assert not compare(eager[-1], ref[-1], get_precision("bf16")).ok  # a weight gradient
