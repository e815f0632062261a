"""KernelBench's LayerNorm over three dims, cross-entropy, argmax, max and min over dim 1 get
the library kernels: each KernelBench file is matched as written (traced at its own sizes,
on the meta device; 49's and 53's forward spelled here), a second spelling is matched too,
and an inexact variant is not. The
candidates of CPU-sized copies pass the real evaluator in ``test_families.py``, beside the
other families' (one evaluator for all)."""

from __future__ import annotations

import pytest

from solforge.problems import load_problem
from solforge.problems.loader import import_file
from solforge.search.align import trace_reference
from solforge.search.fxsource import forward_source
from solforge.search.match import LibraryFunction, find_matches, substitute
from tests.conftest import FIXTURES
from tests.search.test_match import _problem

LEVEL1 = FIXTURES / "kernelbench_reductions" / "KernelBench" / "level1"
ARGMAX_51 = FIXTURES / "kernelbench" / "KernelBench" / "level1" / "51_Argmax_over_a_dimension.py"


def _source(tr) -> tuple[list[str], str]:
    """The kinds matched in a traced reference and the forward they rewrite it to."""
    ms = find_matches(tr)
    fns = {c: c.name for m in ms for c in m.calls if isinstance(c, LibraryFunction)}
    return [m.kind for m in ms], forward_source(substitute(tr, ms), fns)


@pytest.mark.parametrize("path, kind, call", [
    (LEVEL1 / "40_LayerNorm.py", "layer_norm",
     "layer_norm(x, self.ln.weight, self.ln.bias, self.ln.eps, "
     "normalized_shape=self.ln.normalized_shape)"),
    (LEVEL1 / "95_CrossEntropyLoss.py", "cross_entropy",
     "cross_entropy(predictions, targets, -100)"),
    (ARGMAX_51, "argmax", "argmax_dim(x, self.dim)"),
])
def test_the_kernelbench_files_match_as_written(path, kind, call):
    p = load_problem(path)
    assert p.kernelbench_plain
    kinds, src = _source(trace_reference(p, import_file(p.path)))
    assert kinds == [kind] and call in src, src


SECOND_FORMS = [
    # F.layer_norm over a slice of the input's shape, parameters of that shape
    ("x", "return F.layer_norm(x, x.shape[2:], self.weight, self.bias, eps=1e-6)",
     "[torch.randn(2, 3, 8, 16)]",
     "self.weight = nn.Parameter(torch.ones(8, 16)); self.bias = nn.Parameter(torch.zeros(8, 16))",
     "layer_norm", "self.bias, 1e-06, normalized_shape=x.shape[2:])"),
    # and without affine, over a literal tuple
    ("x", "return F.layer_norm(x, (4, 5, 6))", "[torch.randn(3, 4, 5, 6)]", "", "layer_norm",
     "layer_norm(x, None, None, 1e-05, normalized_shape=(4, 5, 6))"),
    # the method form of argmin over the first dim, keeping it
    ("x", "return x.argmin(dim=0, keepdim=True)", "[torch.randn(7, 4, 5)]", "", "argmin",
     "argmin_dim(x, 0, keepdim=True)"),
    # argmax over a middle dim of a 4-D tensor, positional dim
    ("x", "return torch.argmax(x, 2)", "[torch.randn(2, 3, 9, 5)]", "", "argmax",
     "argmax_dim(x, 2)"),
    # KernelBench's 49 and 53 at their own sizes: the values of max/min over self.dim
    ("x", "return torch.max(x, dim=self.dim)[0]", "[torch.rand(128, 4096, 4095)]",
     "self.dim = 1", "max_dim", "max_dim(x, self.dim)"),
    ("x", "return torch.min(x, dim=self.dim)[0]", "[torch.rand(128, 4096, 4095)]",
     "self.dim = 1", "min_dim", "min_dim(x, self.dim)"),
    # the loss as a module, summed, with its own ignore_index
    ("x, t", "return self.loss(x, t)", "[torch.randn(6, 10), torch.randint(0, 10, (6,))]",
     "self.loss = nn.CrossEntropyLoss(reduction='sum', ignore_index=3)", "cross_entropy",
     "cross_entropy(x, t, self.loss.ignore_index, reduction='sum')"),
]


@pytest.mark.parametrize("params, forward, inputs, init, kind, call", SECOND_FORMS)
def test_second_forms_match(tmp_path, params, forward, inputs, init, kind, call):
    tr = _problem(tmp_path, "form", forward, inputs, init, precision="fp32", params=params)
    kinds, src = _source(tr)
    assert kinds == [kind] and call in src, src


# other spellings of a max or min's values: (forward, its input, the call it becomes)
MAX_MIN_FORMS = [
    ("return x.max(dim=0).values", "torch.randn(7, 4, 5)", "max_dim(x, 0)"),
    ("return torch.max(x, 1, True)[0]", "torch.randn(2, 9, 5)", "max_dim(x, 1, keepdim=True)"),
    # the indices unpacked and never read
    ("v, _ = x.min(1, keepdim=True); return v * 2", "torch.randn(2, 9, 5)",
     "min_dim(x, 1, keepdim=True)"),
    ("return torch.amax(x, dim=[1])", "torch.randn(3, 6, 8)", "max_dim(x, 1)"),
    ("return x.amin(2, keepdim=True)", "torch.randn(2, 3, 9, 5, dtype=torch.bfloat16)",
     "min_dim(x, 2, keepdim=True)"),
]


@pytest.mark.parametrize("forward, x, call", MAX_MIN_FORMS)
def test_max_min_values_match_however_spelled(tmp_path, forward, x, call):
    kinds, src = _source(_problem(tmp_path, "mm", forward, f"[{x}]", precision="fp32"))
    assert kinds == [call[:call.index("(")]] and call in src, src


NOT_EXACT = [
    # fp32 parameters of a bf16 input: torch promotes the output; not the kernel's rounding
    ("x", "return F.layer_norm(x, (8, 16), self.weight)",
     "[torch.randn(2, 8, 16, dtype=torch.bfloat16)]",
     "self.weight = nn.Parameter(torch.ones(8, 16))", "layer_norm"),
    # class weights, label smoothing, probabilities as targets, image-shaped logits
    ("x, t, w", "return F.cross_entropy(x, t, weight=w)",
     "[torch.randn(6, 10), torch.randint(0, 10, (6,)), torch.rand(10)]", "", "cross_entropy"),
    ("x, t", "return F.cross_entropy(x, t, label_smoothing=0.1)",
     "[torch.randn(6, 10), torch.randint(0, 10, (6,))]", "", "cross_entropy"),
    ("x, t", "return F.cross_entropy(x, t.softmax(-1))",
     "[torch.randn(6, 10), torch.randn(6, 10)]", "", "cross_entropy"),
    ("x, t", "return F.cross_entropy(x, t)",
     "[torch.randn(2, 10, 4, 4), torch.randint(0, 10, (2, 4, 4))]", "", "cross_entropy"),
    # argmax of the flattened tensor
    ("x", "return torch.argmax(x)", "[torch.randn(3, 9, 5)]", "", "argmax"),
    # max/min whose indices are used; over the last dim; over two dims; integers; a full
    # max and an elementwise one
    ("x", "v, i = torch.max(x, 1); return v, i", "[torch.randn(3, 9, 5)]", "", "max_dim"),
    ("x", "return x.min(dim=1).indices", "[torch.randn(3, 9, 5)]", "", "min_dim"),
    ("x", "return torch.max(x, dim=-1)[0]", "[torch.randn(3, 9, 5)]", "", "max_dim"),
    ("x", "return x.amin(2)", "[torch.randn(3, 9, 5)]", "", "min_dim"),
    ("x", "return torch.amax(x, dim=(0, 1))", "[torch.randn(3, 9, 5)]", "", "max_dim"),
    ("x", "return torch.amax(x, 1)", "[torch.randint(0, 9, (3, 9, 5))]", "", "max_dim"),
    ("x", "return x.max()", "[torch.randn(3, 9, 5)]", "", "max_dim"),
    ("x", "return torch.max(x, x.flip(0))", "[torch.randn(3, 9, 5)]", "", "max_dim"),
]


@pytest.mark.parametrize("params, forward, inputs, init, absent", NOT_EXACT)
def test_inexact_variants_are_left_alone(tmp_path, params, forward, inputs, init, absent):
    tr = _problem(tmp_path, "variant", forward, inputs, init, precision="fp32", params=params)
    assert absent not in [m.kind for m in find_matches(tr)]
