"""The ``group_norm`` and ``row_norm`` patterns: KernelBench's GroupNorm, InstanceNorm, L1
and L2 normalisations (CPU-sized copies of 34, 35, 38 and 39, plain KernelBench files) are
matched as written, other spellings too, inexact variants are left alone, and the
generated candidates give the reference's output (imported and run here, under the
interpreter; the real evaluator passes them in ``test_families.py``)."""

from __future__ import annotations

import pytest
import torch

from solforge.problems import load_problem
from solforge.problems.loader import import_file
from solforge.search.align import trace_reference
from solforge.search.candidates import generate_candidates, search_context
from solforge.search.fxsource import forward_source
from solforge.search.match import LibraryFunction, find_matches, substitute
from tests.conftest import PROBLEMS
from tests.search.test_match import _problem


def _source(tr) -> tuple[list[str], str]:
    """The kinds matched in a traced reference and the forward they rewrite it to."""
    ms = find_matches(tr)
    fns = {c: c.name for m in ms for c in m.calls if isinstance(c, LibraryFunction)}
    return [m.kind for m in ms], forward_source(substitute(tr, ms), fns)


def _same_as_reference(tmp_path, path, source, inputs=None):
    """The candidate's ``ModelNew`` and the reference's ``Model``, built alike, on the
    same inputs: outputs within 1e-5."""
    ref_mod = import_file(path)
    sol = tmp_path / "cand.py"
    sol.write_text(source)
    torch.manual_seed(0)
    ref = ref_mod.Model(*ref_mod.get_init_inputs())
    new = import_file(sol).ModelNew(*ref_mod.get_init_inputs())
    new.load_state_dict(ref.state_dict())
    with torch.no_grad():  # affine parameters away from their ones and zeros
        for p in new.parameters():
            p.copy_(1 + 0.3 * torch.randn_like(p))
        ref.load_state_dict(new.state_dict())
        xs = inputs or ref_mod.get_inputs()
        torch.testing.assert_close(new(*[x.clone() for x in xs]), ref(*xs), rtol=1e-5,
                                   atol=1e-5)


KERNELBENCH = [
    ("kb_groupnorm_small.py", "group_norm",
     "group_norm(x, self.gn.num_groups, self.gn.weight, self.gn.bias, self.gn.eps)"),
    ("kb_instancenorm_small.py", "instance_norm", "instance_norm(x, None, None, self.inorm.eps)"),
    ("kb_l1norm_small.py", "row_norm", "div_by_row_norm(x, 'mean_abs')"),
    ("kb_l2norm_small.py", "row_norm", "div_by_row_norm(x, 'l2')"),
    # 36: over the channels of NCHW (one register tile a column: 12 channels)
    ("kb_rmsnorm_channels_small.py", "dim_norm", "div_by_dim_norm(x, 1, 'rms', self.eps)"),
]


@pytest.mark.parametrize("name, kind, call", KERNELBENCH)
def test_the_kernelbench_files_match_as_written(tmp_path, name, kind, call):
    p = load_problem(PROBLEMS / name)
    assert p.kernelbench_plain
    kinds, src = _source(trace_reference(p, import_file(p.path)))
    assert kinds == [kind] and call in src, src
    assert all(f"torch.{f}(" not in src for f in ("norm", "abs", "mean", "sqrt"))  # all gone
    cands, _ = generate_candidates(search_context(p, "cpu"))
    c = next(c for c in cands if c.name == "library")
    assert call in c.source and c.language == "triton"
    _same_as_reference(tmp_path, p.path, c.source)


SECOND_FORMS = [
    # F.group_norm with a parameter weight and no bias; F.instance_norm by keyword
    ("x", "return F.group_norm(x, 3, self.w, None, 1e-6)", "[torch.randn(2, 6, 5, 7)]",
     "self.w = nn.Parameter(torch.ones(6))", "group_norm",
     "group_norm(x, 3, self.w, None, 1e-06)"),
    ("x", "return F.instance_norm(x, eps=1e-3)", "[torch.randn(2, 6, 9, 40)]", "",
     "instance_norm", "instance_norm(x, None, None, 0.001)"),
    # InstanceNorm1d with affine weights (no running statistics)
    ("x", "return self.norm(x)", "[torch.randn(3, 4, 300)]",
     "self.norm = nn.InstanceNorm1d(4, affine=True)", "instance_norm",
     "instance_norm(x, self.norm.weight, self.norm.bias, self.norm.eps)"),
    # the method forms over the last dim of a 3-D tensor; the L2 norm's default p
    ("x", "return x / x.abs().mean(-1, keepdim=True)", "[torch.randn(2, 5, 300)]", "",
     "row_norm", "div_by_row_norm(x, 'mean_abs')"),
    ("x", "return x / x.norm(dim=-1, keepdim=True)", "[torch.randn(5, 300)]", "", "row_norm",
     "div_by_row_norm(x, 'l2')"),
    ("x", "return x / torch.linalg.vector_norm(x, 2, -1, keepdim=True)",
     "[torch.randn(5, 300)]", "", "row_norm", "div_by_row_norm(x, 'l2')"),
    # F.normalize over the rows of a 2-D tensor (its default dim 1), with its clamp
    ("x", "return F.normalize(x)", "[torch.randn(5, 300)]", "", "row_norm",
     "div_by_row_norm(x, 'l2', 1e-12)"),
    # over a middle dim: F.normalize's clamp; the L2 norm over the first dim; the mean |x|
    # over dim 1 of a 3-D tensor; the RMS of x * x over 40 channels (K walked in tiles)
    ("x", "return F.normalize(x, dim=1, eps=1e-4)", "[torch.randn(2, 6, 5, 7)]", "",
     "dim_norm", "div_by_dim_norm(x, 1, 'l2', 0.0001)"),
    ("x", "return x / torch.norm(x, p=2, dim=0, keepdim=True)", "[torch.randn(5, 30)]", "",
     "dim_norm", "div_by_dim_norm(x, 0, 'l2')"),
    ("x", "return x / x.abs().mean(1, keepdim=True)", "[torch.randn(5, 30, 4)]", "",
     "dim_norm", "div_by_dim_norm(x, 1, 'mean_abs')"),
    ("x", "return x / (x * x).mean(dim=[1], keepdim=True).add(1e-6).sqrt()",
     "[torch.randn(2, 40, 3, 5)]", "", "dim_norm", "div_by_dim_norm(x, 1, 'rms', 1e-06)"),
]


@pytest.mark.parametrize("params, forward, inputs, init, kind, call", SECOND_FORMS)
def test_second_forms_match_and_give_the_reference_s_output(tmp_path, params, forward, inputs,
                                                             init, kind, call):
    tr = _problem(tmp_path, "form", forward, inputs, init, precision="fp32", params=params)
    kinds, src = _source(tr)
    assert kinds == [kind] and call in src, src
    p = load_problem(tmp_path / "form.py")
    c = next(c for c in generate_candidates(search_context(p, "cpu"))[0]
             if c.name == "library")
    _same_as_reference(tmp_path, p.path, c.source)


NOT_EXACT = [
    # running statistics: eval mode would normalise with them
    ("x", "return self.norm(x)", "[torch.randn(2, 4, 5, 6)]",
     "self.norm = nn.InstanceNorm2d(4, track_running_stats=True)", "instance_norm"),
    ("x, m, v", "return F.instance_norm(x, m, v)",
     "[torch.randn(2, 4, 5, 6), torch.zeros(4), torch.ones(4)]", "", "instance_norm"),
    # unbatched input to InstanceNorm2d; parameters of another dtype than the input's
    ("x", "return self.norm(x)", "[torch.randn(4, 5, 6)]",
     "self.norm = nn.InstanceNorm2d(4)", "instance_norm"),
    ("x", "return F.group_norm(x, 2, self.w)", "[torch.randn(2, 4, 5, dtype=torch.bfloat16)]",
     "self.w = nn.Parameter(torch.ones(4))", "group_norm"),
    # an fp32 group norm into a convolution (TF32 there: the batch_norm pattern's reason)
    ("x", "return self.conv(self.gn(x))", "[torch.randn(2, 4, 5, 6)]",
     "self.gn = nn.GroupNorm(2, 4); self.conv = nn.Conv2d(4, 4, 1)", "group_norm"),
    # norms over another dim (dim_norm's), of another order, clamped, or read twice
    ("x", "return x / torch.norm(x, p=2, dim=0, keepdim=True)", "[torch.randn(5, 30)]", "",
     "row_norm"),
    ("x", "return x / x.abs().mean(1, keepdim=True)", "[torch.randn(5, 30, 4)]", "",
     "row_norm"),
    ("x", "return x / torch.norm(x, p=1, dim=-1, keepdim=True)", "[torch.randn(5, 30)]", "",
     "row_norm"),
    ("x", "n = x.norm(dim=-1, keepdim=True); return x / n + n", "[torch.randn(5, 30)]", "",
     "row_norm"),
    # the statistic of a cast, divided into the original
    ("x", "return x / x.float().abs().mean(-1, keepdim=True)",
     "[torch.randn(5, 30, dtype=torch.bfloat16)]", "", "row_norm"),
    # dim_norm: over the last dim (the row kernels'), also as F.normalize; without keepdim;
    # an RMS whose mean is read twice, of p=1, over two dims; x / sqrt(mean(y ** 2)) of
    # another y; an fp32 result into a convolution (TF32 there)
    ("x", "return x / torch.sqrt(torch.mean(x ** 2, dim=-1, keepdim=True) + 1e-5)",
     "[torch.randn(2, 6, 5)]", "", "dim_norm"),
    ("x", "return F.normalize(x, dim=-1)", "[torch.randn(5, 30)]", "", "dim_norm"),
    ("x", "return F.normalize(x, p=1, dim=-1)", "[torch.randn(5, 30)]", "", "row_norm"),
    ("x", "return x / torch.norm(x, p=2, dim=1)", "[torch.randn(6, 6, 6)]", "",
     "dim_norm"),
    ("x", "m = (x ** 2).mean(1, keepdim=True); return x / torch.sqrt(m + 1e-5) + m",
     "[torch.randn(2, 6, 5)]", "", "dim_norm"),
    ("x", "return F.normalize(x, p=1, dim=1)", "[torch.randn(2, 6, 5)]", "", "dim_norm"),
    ("x", "return x / torch.sqrt(torch.mean(x ** 2, dim=(1, 2), keepdim=True) + 1e-5)",
     "[torch.randn(2, 6, 5, 3)]", "", "dim_norm"),
    ("x, y", "return x / torch.sqrt(torch.mean(y ** 2, dim=1, keepdim=True) + 1e-5)",
     "[torch.randn(2, 6, 5), torch.randn(2, 6, 5)]", "", "dim_norm"),
    ("x", "return self.conv(F.normalize(x, dim=1))", "[torch.randn(2, 4, 5, 6)]",
     "self.conv = nn.Conv2d(4, 4, 1)", "dim_norm"),
]


@pytest.mark.parametrize("params, forward, inputs, init, absent", NOT_EXACT)
def test_inexact_variants_are_left_alone(tmp_path, params, forward, inputs, init, absent):
    tr = _problem(tmp_path, "variant", forward, inputs, init, precision="fp32", params=params)
    assert absent not in [m.kind for m in find_matches(tr)]
