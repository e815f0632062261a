"""Attention with an additive float bias (``sdpa_bias``): matched where SDPA's float
``attn_mask`` adds the same values after the same scale, its candidate computes the
reference's numbers (rows without keys included), and not matched where the bias would be
rounded for the call, added before the scale, grows the scores or is not one plain add.
The corpus's BLOOM and Swin problems pass the evaluator in ``test_families.py``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from solforge.bench.evaluator import Evaluator
from solforge.problems import find_builtin
from solforge.problems.loader import import_file
from solforge.search import runtime
from solforge.search.candidates import search_context
from tests.conftest import interpreted_options
from tests.search.test_attention_patterns import _candidate, _file, _kinds, _models, _passes

BODY = '''
SOLFORGE = {"precision": "%(precision)s", "workloads": [{"name": "s", "params": {},
                                                     "cpu": True}]}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("slopes", torch.tensor([0.5, 0.25, 0.125]))
        self.rel = nn.Parameter(torch.randn(3, 5, 7))
        self.scale = 8 ** -0.5
        self.logit_scale = nn.Parameter(torch.rand(3, 1, 1))

    def forward(self, %(params)s):
        %(forward)s


def get_inputs():
    torch.manual_seed(0)
    %(inputs)s


def get_init_inputs():
    return []
'''
# q [2, 3, 5, 8] against 7 keys (L != S); keep: [B, 1, 1, S] with a padded key per sequence
QKV = ("q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)"
       "\n    ")
KEEP = "keep = torch.ones(2, 1, 1, 7, dtype=torch.bool); keep[0, ..., 6] = False\n    "
BF16 = ("q, k, v, b = (torch.randn(*s).bfloat16() for s in ((2, 3, 5, 8), (2, 3, 7, 8), "
        "(2, 3, 7, 8), (1, 3, 5, 7)))\n    ")


def _problem(tmp_path: Path, forward: str, inputs: str, params: str = "q, k, v",
             precision: str = "fp32") -> Path:
    return _file(tmp_path, "biased", BODY % {"forward": forward, "inputs": inputs,
                                             "params": params, "precision": precision})


ALIBI = ("n, m = q.shape[2], k.shape[2]\n        "
         "rel = (torch.arange(m)[None, :] - torch.arange(n)[:, None]).float()\n        "
         "s = torch.matmul(q, k.transpose(-1, -2)) * 0.35 + self.slopes[:, None, None] * rel"
         "\n        return torch.matmul(torch.softmax(s, dim=-1), v)")
MATCHED = [
    # BLOOM's ALiBi, computed in forward from a buffer: [H, L, S], a number scale
    ("alibi", ALIBI, QKV + "return [q, k, v]", "q, k, v", "fp32",
     "biased_sdpa(q, k, v, mul_1, scale=0.35)"),
    # a [1, H, L, S] input bias first, the scores divided by a constant
    ("bias_first_div", "return F.softmax(b + q @ k.transpose(-2, -1) / 4.0, dim=-1) @ v",
     QKV + "return [q, k, v, torch.randn(1, 3, 5, 7)]", "q, k, v, b", "fp32",
     "biased_sdpa(q, k, v, b, scale=0.25)"),
    # a parameter bias, an attribute scale, then a boolean padding mask with -inf
    ("bias_then_mask",
     "s = (q @ k.transpose(-2, -1)) * self.scale + self.rel\n        "
     "return F.softmax(s.masked_fill(~keep, float('-inf')), -1) @ v",
     QKV + KEEP + "return [q, k, v, keep]", "q, k, v, keep", "fp32",
     "keep, False, fill=-float('inf'), scale=self.scale)"),
    # the same with a finite fill, a computed scale, and a sequence whose keys are all masked
    ("bias_then_finite_mask",
     "s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.size(-1))) + self.rel\n        "
     "return F.softmax(s.masked_fill(keep == 0, -1e9), -1) @ v",
     QKV + KEEP + "keep[1] = False\n    return [q, k, v, keep]", "q, k, v, keep", "fp32",
     "keep, 0, fill=-1000000000.0, scale=truediv)"),
    # the 3-D [B*H, L, E] layout with BLOOM's [B*H, 1, S] alibi and bmm
    ("bmm_3d", "return torch.bmm((torch.bmm(q, k.transpose(1, 2)) * 0.3 + a).softmax(-1), v)",
     "return [torch.randn(6, 5, 8), torch.randn(6, 7, 8), torch.randn(6, 7, 8), "
     "torch.randn(6, 1, 7)]", "q, k, v, a", "fp32", "biased_sdpa(q, k, v, a, scale=0.3)"),
    # an HF-style additive padding mask, [B, 1, 1, S], no scale
    ("hf_padding", "ext = (1.0 - m[:, None, None, :].float()) * -10000.0\n        "
     "return torch.matmul(F.softmax(torch.matmul(q, k.transpose(-1, -2)) + ext, -1), v)",
     QKV + "return [q, k, v, (torch.rand(2, 7) > 0.3).long()]", "q, k, v, m", "fp32",
     "biased_sdpa(q, k, v, mul, scale=1.0)"),
    # a boolean mask turned float (0 or -1e9), added, a row all masked; an eval dropout
    ("float_mask", "return F.dropout(F.softmax((q @ k.transpose(-2, -1)) * 0.3 + m.float() "
     "* -1e9, dim=-1), p=0.2, training=False) @ v", QKV + "m = torch.rand(5, 7) > 0.6; m[2] = True\n    "
     "return [q, k, v, m]", "q, k, v, m", "fp32", "scale=0.3)"),
    # an -inf bias that masks whole rows: NaN there, as softmax of only -inf
    ("neg_inf_rows", "return F.softmax(q @ k.transpose(-2, -1) * 0.3 + b, -1) @ v",
     QKV + "b = torch.randn(1, 3, 5, 7); b[0, 1, 2] = -math.inf\n    return [q, k, v, b]",
     "q, k, v, b", "fp32", "biased_sdpa(q, k, v, b, scale=0.3)"),
    # the bias read again after the attention: it stays in the graph for both
    ("bias_used_again", "b = self.rel * 2.0\n        "
     "out = F.softmax(q @ k.transpose(-2, -1) * 0.3 + b, -1) @ v\n        "
     "return out + b.mean()", QKV + "return [q, k, v]", "q, k, v", "fp32",
     "biased_sdpa(q, k, v, mul, scale=0.3)"),
    # bf16 inputs, scores in fp32 from q.float(), a bf16 bias widened (exactly) to fp32
    ("bf16_widened_bias",
     "s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * 0.25 + b.float()\n        "
     "return torch.matmul(F.softmax(s, dim=-1).to(q.dtype), v)",
     BF16 + "return [q, k, v, b]", "q, k, v, b", "bf16", "biased_sdpa(q, k, v, b, scale=0.25)"),
    # bf16 scores and a bf16 bias: the add in bf16, no promotion
    ("bf16_bias", "return F.softmax(q @ k.transpose(-2, -1) * 0.25 + b, -1) @ v",
     BF16 + "return [q, k, v, b]", "q, k, v, b", "bf16", "biased_sdpa(q, k, v, b, scale=0.25)"),
]


@pytest.mark.parametrize("forward,inputs,params,precision,call",
                         [c[1:] for c in MATCHED], ids=[c[0] for c in MATCHED])
def test_biased_attention_becomes_one_sdpa_call_with_the_references_numbers(
        tmp_path, forward, inputs, params, precision, call):
    path = _problem(tmp_path, forward, inputs, params, precision)
    assert _kinds(path) == ["sdpa_bias"]
    _, c = _candidate(path, "sdpa")
    body = c.source.split("def forward")[1]
    assert call in body and "softmax" not in body and "matmul" not in body, body
    mod, ref, new = _models(tmp_path, path, c.source, train=False)
    args = mod.get_inputs()
    want, got = ref(*args), new(*args)
    assert not want.isnan().all()
    tol = 2e-2 if precision == "bf16" else 1e-5
    torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)


def test_rows_without_keys_get_the_references_values():
    """NaN where every score is -inf (SDPA's CPU kernel gives 0 there), the mean of v
    where a finite fill masks the whole row, SDPA's value everywhere else."""
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    b = torch.randn(3, 5, 7)
    b[1, 3] = -math.inf  # head 1, query 3: no key
    keep = torch.rand(2, 1, 5, 7) > 0.3
    keep[..., 0] = True
    keep[0, 0, 4] = False  # sequence 0, query 4: no key kept
    scores = q @ k.transpose(-2, -1) * 0.3 + b
    want = F.softmax(scores, -1) @ v
    assert F.scaled_dot_product_attention(q, k, v, attn_mask=b, scale=0.3)[:, 1, 3].eq(0).all()
    got = runtime.biased_sdpa(q, k, v, b, scale=0.3)
    assert got[:, 1, 3].isnan().all() and not got[:, 0].isnan().any()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    # (a finite fill beside a row whose kept keys all score -inf is outside the exact
    # cases: the reference weighs the filled keys there; that bias row is finite here)
    for fill, bias in ((-math.inf, b), (-1e9, b.nan_to_num(neginf=0.0))):
        scores = q @ k.transpose(-2, -1) * 0.3 + bias
        want = F.softmax(scores.masked_fill(~keep, fill), -1) @ v
        got = runtime.biased_sdpa(q, k, v, bias, keep, False, fill=fill, scale=0.3)
        assert got[0, :, 4].isnan().all() == math.isinf(fill)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


NOT_MATCHED = [
    # the bias added before the scale: SDPA would not scale it
    ("bias_before_scale", "return F.softmax((q @ k.transpose(-2, -1) + b) * 0.3, -1) @ v",
     QKV + "return [q, k, v, torch.randn(1, 3, 5, 7)]", "q, k, v, b", "fp32"),
    # bf16 scores plus an fp32 bias: the add promotes to fp32 (the bias unrounded)
    ("bf16_scores_fp32_bias",
     "return F.softmax(q @ k.transpose(-2, -1) * 0.25 + b, -1).to(q.dtype) @ v",
     BF16 + "return [q, k, v, torch.randn(1, 3, 5, 7)]", "q, k, v, b", "bf16"),
    # fp32 scores from q.float() plus an fp32 bias beside bf16 v: rounded for a bf16 call
    ("fp32_bias_for_bf16_call",
     "s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * 0.25 + b.float() * 1.5\n"
     "        return torch.matmul(F.softmax(s, dim=-1).to(q.dtype), v)",
     BF16 + "return [q, k, v, b]", "q, k, v, b", "bf16"),
    # a bias that grows the scores (two batches of bias for one of queries)
    ("bias_grows_scores", "return F.softmax(q @ k.transpose(-2, -1) * 0.3 + b, -1) @ v",
     "q, k, v = torch.randn(1, 3, 5, 8), torch.randn(1, 3, 7, 8), torch.randn(1, 3, 7, 8)\n"
     "    return [q, k, v, torch.randn(2, 1, 5, 7)]", "q, k, v, b", "fp32"),
    # a 1-D bias over the keys (PyTorch's CPU SDPA refuses a 1-D mask beside 4-D q)
    ("bias_1d", "return F.softmax(q @ k.transpose(-2, -1) * 0.3 + b, -1) @ v",
     QKV + "return [q, k, v, torch.randn(7)]", "q, k, v, b", "fp32"),
    # the biased scores read elsewhere too
    ("scores_read_again", "s = q @ k.transpose(-2, -1) * 0.3 + b\n        "
     "return (F.softmax(s, -1) @ v) * s.mean()",
     QKV + "return [q, k, v, torch.randn(1, 3, 5, 7)]", "q, k, v, b", "fp32"),
    # the boolean mask before the bias
    ("mask_before_bias", "s = (q @ k.transpose(-2, -1) * 0.3).masked_fill(~keep, "
     "float('-inf'))\n        return F.softmax(s + self.rel, -1) @ v",
     QKV + KEEP + "return [q, k, v, keep]", "q, k, v, keep", "fp32"),
    # torch.add with alpha: the bias scaled by the add
    ("add_alpha", "return F.softmax(torch.add(q @ k.transpose(-2, -1) * 0.3, b, alpha=0.5), "
     "-1) @ v", QKV + "return [q, k, v, torch.randn(1, 3, 5, 7)]", "q, k, v, b", "fp32"),
    # SwinV2's per-head tensor scale (KernelBench level 3's 30_SwinTransformerV2)
    ("per_head_scale", "s = q @ k.transpose(-2, -1) * self.logit_scale.exp() + self.rel\n"
     "        return F.softmax(s, -1) @ v", QKV + "return [q, k, v]", "q, k, v", "fp32"),
    # two biases added one after another: each add rounds on its own
    ("two_biases", "return F.softmax(q @ k.transpose(-2, -1) * 0.3 + b + self.rel, -1) @ v",
     QKV + "return [q, k, v, torch.randn(1, 3, 5, 7)]", "q, k, v, b", "fp32"),
]


@pytest.mark.parametrize("forward,inputs,params,precision",
                         [c[1:] for c in NOT_MATCHED], ids=[c[0] for c in NOT_MATCHED])
def test_biases_sdpa_would_not_add_alike_are_not_matched(tmp_path, forward, inputs, params,
                                                         precision):
    path = _problem(tmp_path, forward, inputs, params, precision)
    mod = import_file(path)
    mod.Model()(*mod.get_inputs())  # a valid reference: it runs
    kinds = _kinds(path)
    assert "sdpa_bias" not in kinds and "sdpa" not in kinds, kinds


@pytest.fixture(scope="module")
def ev():
    with Evaluator(interpreted_options()) as e:
        yield e


def test_a_bias_and_a_padding_mask_pass_the_evaluator(ev, tmp_path):
    forward, inputs, params = MATCHED[2][1:4]
    path = _problem(tmp_path, forward, inputs, params)
    p, c = _candidate(path, "sdpa")
    _passes(ev, p, c.source, tmp_path)


def test_corpus_bias_attention_keeps_its_bias_nodes():
    """BLOOM's ALiBi (a bias and a causal mask built in forward, the chain in fp32 on bf16
    inputs: SDPA on the fp32 casts) and Swin's relative-position table (fp16, q scaled
    before the matmul: scale 1): the bias's own nodes stay, feeding the call."""
    bloom = search_context(find_builtin("alibi_attention_bloom"), "cpu")
    (m,) = bloom.matches
    assert m.kind == "sdpa_bias" and "[4, 17, 17] float32" in m.description
    assert "masked_fill(gt == True, -inf) folded into the bias" in m.description
    swin = search_context(find_builtin("window_attention_swin"), "cpu")
    (m,) = swin.matches
    assert m.kind == "sdpa_bias" and "(scale 1; bias [1, 2, 16, 16] float16)" in m.description
    _, c = _candidate(find_builtin("window_attention_swin").path, "sdpa")
    body = c.source.split("def forward")[1]
    assert "self.bias_table[" in body and "biased_sdpa(mul, " in body and "scale=1.0" in body


def test_a_chain_cast_whole_to_fp32_calls_sdpa_on_the_casts(tmp_path):
    """q, k and v cast to fp32, the output cast back (BLOOM's spelling, no bias here):
    ``sdpa`` calls SDPA on the casts, the reference's fp32 math."""
    path = _problem(tmp_path, "s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * 0.25"
                    "\n        return torch.matmul(F.softmax(s, -1), v.float()).to(q.dtype)",
                    BF16 + "return [q, k, v]", precision="bf16")
    assert _kinds(path) == ["sdpa"]
    _, c = _candidate(path, "sdpa")
    assert "F.scaled_dot_product_attention(float_1, float_2, float_3, scale=0.25)" in c.source
    mod, ref, new = _models(tmp_path, path, c.source, train=False)
    args = mod.get_inputs()
    torch.testing.assert_close(new(*args), ref(*args), rtol=0, atol=0)
