"""Masked attention (``sdpa`` with ``masked_fill``) and ``nn.MultiheadAttention`` with
unused weights (``mha_no_weights``): matched in the two KernelBench attention problems
and in forms written here, not where the rewrite would change the result, and their
candidates pass the real evaluator against the reference on a CPU (small copies of the
KernelBench files; the fixtures themselves are KernelBench's sizes, traced on meta)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from solforge.bench.evaluator import Evaluator
from solforge.problems import load_problem
from solforge.problems.loader import import_file
from solforge.records.evaluation import Status
from solforge.search import runtime
from solforge.search.align import trace_reference
from solforge.search.candidates import generate_candidates, search_context
from solforge.search.match import find_matches
from tests.conftest import FIXTURES, interpreted_options

KB3 = FIXTURES / "kernelbench" / "KernelBench" / "level3"
MINGPT = KB3 / "43_MinGPTCausalAttention.py"
VISION = KB3 / "31_VisionAttention.py"
MINGPT_SMALL = dict(batch_size=2, max_seqlen=24, seq_len=16, n_embd=32, n_head=4)
VISION_SMALL = dict(embed_dim=16, num_heads=4, batch_size=2, image_height=4, image_width=5)


def _small(tmp_path: Path, src: Path, sizes: dict) -> Path:
    """A copy of a KernelBench file (same name) with its module-level sizes replaced."""
    text = src.read_text()
    for name, value in sizes.items():
        text, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", text, flags=re.M)
        assert n == 1, name
    path = tmp_path / src.name
    path.write_text(text)
    return path


def _file(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("import math\nimport torch\nimport torch.nn as nn\n"
                    "import torch.nn.functional as F\n\n" + textwrap.dedent(body))
    return path


def _candidate(path: Path, name: str):
    p = load_problem(path)
    cands, _ = generate_candidates(search_context(p, "cpu"))
    return p, next(c for c in cands if c.name == name)


def _kinds(path: Path) -> list[str]:
    p = load_problem(path)
    return [m.kind for m in find_matches(trace_reference(p, import_file(p.path)))]


def _models(tmp_path: Path, path: Path, source: str, train: bool):
    """The reference and the candidate built alike, the candidate with the reference's
    state (buffers included), both in ``train`` mode."""
    ref_mod = import_file(path)
    sol = tmp_path / "cand.py"
    sol.write_text(source)
    torch.manual_seed(0)
    ref = ref_mod.Model(*ref_mod.get_init_inputs()).train(train)
    new = import_file(sol).ModelNew(*ref_mod.get_init_inputs()).train(train)
    new.load_state_dict(ref.state_dict())
    return ref_mod, ref, new


@pytest.fixture(scope="module")
def ev():
    with Evaluator(interpreted_options()) as e:
        yield e


def _passes(ev, problem, source: str, tmp_path: Path) -> None:
    sol = tmp_path / "solution.py"
    sol.write_text(source)
    r = ev.evaluate(problem, sol)
    assert r.status is Status.PASSED, r.message
    assert "torch_fallback" not in r.flags and "calls_reference" not in r.flags


# -- the KernelBench problems, at their own sizes (traced on meta) ---------------------------
def test_mingpt_causal_attention_becomes_masked_sdpa_on_its_buffer():
    p = load_problem(MINGPT)
    ctx = search_context(p, "cpu")
    (m,) = ctx.matches
    assert m.kind == "sdpa" and "self.bias[...] == 0" in m.description
    c = next(c for c in generate_candidates(ctx)[0] if c.name == "sdpa")
    forward = c.source.split("def forward")[1]
    assert "masked_sdpa(" in forward and "buffer=True" in forward
    assert "scale=truediv" in forward and "import math" in c.source  # 1/sqrt(k.size(-1))
    assert "dropout_p=" in forward and "softmax" not in forward and "masked_fill" not in forward
    assert c.language == "pytorch"


def test_a_match_that_cannot_become_a_candidate_says_why(monkeypatch):
    """The search logs ``rewrite_failed`` from ``ctx.rewrite_errors``: on an H100 with
    torch 2.11 MinGPT's attention matched and no ``sdpa`` candidate came, silently."""
    from solforge.search.families import rewrite as families

    ctx = search_context(load_problem(MINGPT), "cuda")
    assert ctx.matches and not ctx.rewrite_errors

    def refuse(traced, matches):
        raise ValueError("an output is needed before the match ends")

    monkeypatch.setattr(families, "substitute", refuse)
    names = [c.name for c in generate_candidates(ctx)[0]]
    assert not [n for n in names if n.startswith("sdpa")] and "compile" in names
    assert ctx.rewrite_errors[0] == ("sdpa: substituting the matches failed: an output is "
                                     "needed before the match ends")


def test_vision_attention_calls_its_multihead_attention_without_weights():
    p = load_problem(VISION)
    ctx = search_context(p, "cpu")
    assert [m.kind for m in ctx.matches] == ["mha_no_weights", "layer_norm"]
    c = next(c for c in generate_candidates(ctx)[0] if c.name == "library")
    assert "self.attn(permute, permute, permute, need_weights=False)" in c.source
    assert "nan_where_no_key" not in c.source  # no mask passed: no row without keys


def test_kernelbench_candidates_pass_the_evaluator_at_small_sizes(ev, tmp_path):
    for src, sizes, name in ((MINGPT, MINGPT_SMALL, "sdpa"), (VISION, VISION_SMALL, "library")):
        d = tmp_path / src.stem
        d.mkdir()
        p, c = _candidate(_small(d, src, sizes), name)
        assert p.kernelbench_plain  # judged in training mode, Dropout(0.0) included
        _passes(ev, p, c.source, d)


# -- forms written here ----------------------------------------------------------------------
NANOGPT = '''
SOLFORGE = {"precision": "fp32", "workloads": [{"name": "small", "params": {}, "cpu": True}]}


class Model(nn.Module):
    """nanoGPT's slow path: a [1, 1, T, T] causal buffer, attention dropout 0.1 (eval)."""

    def __init__(self, n_embd=32, n_head=4, block_size=24):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.attn_dropout = nn.Dropout(%(p)s)
        self.register_buffer("bias", %(bias)s.view(1, 1, block_size, block_size))
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        return att @ v


def get_inputs():
    return [torch.randn(2, 16, 32)]


def get_init_inputs():
    return []
'''
TRIL = "torch.tril(torch.ones(block_size, block_size))"
# a sliding window of 4 keys: lower-triangular, but not tril(ones)
BANDED = ("torch.tril(torch.ones(block_size, block_size)) - "
          "torch.tril(torch.ones(block_size, block_size), -4)")


def test_nanogpt_attention_with_eval_dropout_passes_the_evaluator(ev, tmp_path):
    path = _file(tmp_path, "nanogpt", NANOGPT % {"p": 0.1, "bias": TRIL})
    p, c = _candidate(path, "sdpa")
    assert "masked_sdpa(" in c.source and "= 1.0 / sqrt" in c.source  # x / math.sqrt(d)
    _passes(ev, p, c.source, tmp_path)


def test_a_buffer_is_causal_only_where_its_values_are(tmp_path):
    """A sliding-window buffer (not tril(ones)) is passed as the mask; a tril buffer runs
    the causal kernel; a write into the buffer (its version changes) is seen."""
    path = _file(tmp_path, "banded", NANOGPT % {"p": 0.0, "bias": BANDED})
    _, c = _candidate(path, "sdpa")
    mod, ref, new = _models(tmp_path, path, c.source, train=False)
    x = mod.get_inputs()[0]
    view = new.bias[:, :, :16, :16]
    assert not runtime._is_causal(view, 0, 16, 16)
    torch.testing.assert_close(new(x), ref(x), rtol=1e-4, atol=1e-4)
    with torch.no_grad():  # now lower-triangular ones: the next call checks again
        for m in (ref, new):
            m.bias.copy_(torch.tril(torch.ones(24, 24)).view(1, 1, 24, 24))
    assert runtime._is_causal(new.bias[:, :, :16, :16], 0, 16, 16)
    torch.testing.assert_close(new(x), ref(x), rtol=1e-4, atol=1e-4)
    new.load_state_dict(import_file(path).Model().state_dict())  # banded again
    ref.load_state_dict(new.state_dict())
    torch.testing.assert_close(new(x), ref(x), rtol=1e-4, atol=1e-4)


INPUT_MASK = '''
SOLFORGE = {"precision": "fp32", "workloads": [{"name": "s", "params": {}, "cpu": True}]}


class Model(nn.Module):
    def forward(self, q, k, v, keep):
        s = torch.matmul(q, k.transpose(-1, -2)) * 0.25
        return torch.matmul(s.masked_fill(~keep, float("-inf")).softmax(dim=-1), v)


def get_inputs():
    keep = torch.rand(2, 1, 7, 9) > 0.5
    keep[..., 0] = True  # every query keeps a key
    return [torch.randn(2, 3, 7, 16), torch.randn(2, 3, 9, 16), torch.randn(2, 3, 9, 16), keep]


def get_init_inputs():
    return []
'''


def test_an_input_mask_passes_the_evaluator_as_sdpa_s_boolean_mask(ev, tmp_path):
    p, c = _candidate(_file(tmp_path, "padding", INPUT_MASK), "sdpa")
    assert "masked_sdpa(q, k, v, keep, False, fill=-float('inf'), scale=0.25)" in c.source
    _passes(ev, p, c.source, tmp_path)


@pytest.mark.parametrize("fill", ["float('-inf')", "-1e9"])
@pytest.mark.parametrize("form", ["~keep", "keep == 0", "keep.logical_not()"])
def test_input_masks_keep_the_references_rows_without_keys(form, fill):
    """A boolean mask given as an input, with a row masked whole: NaN there for -inf
    (softmax of only -inf), the mean of v for a finite fill; the other rows as SDPA."""
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    keep = torch.rand(2, 1, 5, 5) > 0.4
    keep[..., 0] = True
    keep[1, 0, 2] = False  # a row with no key
    scores = q @ k.transpose(-2, -1) * 0.3
    mask = eval(form, {"keep": keep})
    want = F.softmax(scores.masked_fill(mask, eval(fill)), dim=-1) @ v
    source, masked = {"~keep": (keep, False), "keep == 0": (keep, 0),
                      "keep.logical_not()": (keep, False)}[form]
    got = runtime.masked_sdpa(q, k, v, source, masked, fill=eval(fill), scale=0.3)
    assert got[1, :, 2].isnan().all() == (fill != "-1e9")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("forward", [
    "return F.softmax(((q @ k.transpose(-2, -1)) * 0.3).masked_fill(~m, -1e3), -1) @ v",
    "return F.softmax(((q @ k.transpose(-2, -1)) * 0.3).masked_fill(~m, 0.0), -1) @ v",
    "return F.softmax(((q @ k.transpose(-2, -1)).masked_fill(~m, -1e9)) * 0.3, -1) @ v",
    ("return F.dropout(F.softmax(((q @ k.transpose(-2, -1)) * 0.3).masked_fill(~m, "
     "float('-inf')), -1), p=0.1, training=True) @ v"),
    ("return F.softmax((q @ k.transpose(-2, -1)).masked_fill(~m, float('-inf')), -1)"
     ".masked_fill(~m, 0.0) @ v"),
])
def test_masks_and_dropouts_that_would_change_the_result_are_not_matched(tmp_path, forward):
    """Fills not negative enough, a finite fill before the scale, dropout 0.1 while
    training, a second mask after the softmax. (A float mask added is ``sdpa_bias``'s:
    test_attention_bias.py.)"""
    path = _file(tmp_path, "variant", f'''
        SOLFORGE = {{"precision": "fp32", "workloads": [{{"name": "s", "params": {{}},
                                                          "cpu": True}}]}}


        class Model(nn.Module):
            def forward(self, q, k, v, m):
                {forward}


        def get_inputs():
            return [torch.randn(1, 2, 6, 8) for _ in range(3)] + [torch.rand(6, 6) > 0.3]


        def get_init_inputs():
            return []
    ''')
    assert "sdpa" not in _kinds(path)


def test_dropout_that_drops_while_training_is_not_matched(tmp_path):
    """The same nanoGPT module with dropout 0.1 in training mode (a KernelBench-style file
    is judged in training mode): its random weights cannot be reproduced."""
    body = NANOGPT % {"p": 0.1, "bias": TRIL}
    path = _file(tmp_path, "train", body.replace('"precision": "fp32",',
                                                 '"precision": "fp32", "train_mode": True,'))
    assert load_problem(path).train_mode and "sdpa" not in _kinds(path)
    path = _file(tmp_path, "train0", NANOGPT.replace(
        '"precision": "fp32",', '"precision": "fp32", "train_mode": True,')
        % {"p": 0.0, "bias": TRIL})
    assert _kinds(path) == ["sdpa"]


# -- nn.MultiheadAttention ------------------------------------------------------------------
MHA = '''
SOLFORGE = {"precision": "fp32", %(mode)s"workloads": [{"name": "s", "params": {}, "cpu": True}]}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True, dropout=%(p)s)

    def forward(self, x, pad):
        %(body)s


def get_inputs():
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True  # the second sequence is padded
    return [torch.randn(2, 6, 16), pad]


def get_init_inputs():
    return []
'''
KPM = "out, _ = self.attn(x, x, x, key_padding_mask=pad)\n        return out"


def test_batch_first_multihead_attention_with_padding_passes_the_evaluator(ev, tmp_path):
    path = _file(tmp_path, "mha", MHA % {"mode": '"train_mode": True, ', "p": 0.0,
                                          "body": KPM})
    p, c = _candidate(path, "sdpa")
    assert "key_padding_mask=pad, need_weights=False)" in c.source
    assert "nan_where_no_key(self.attn, " in c.source
    _passes(ev, p, c.source, tmp_path)


@pytest.mark.parametrize("train", [True, False])
def test_a_query_with_no_key_is_nan_as_in_the_weights_path(tmp_path, train):
    """A sequence padded whole: the reference (need_weights=True) gives NaN rows, the SDPA
    path 0 while training; the candidate gives the reference's NaN."""
    path = _file(tmp_path, "mha", MHA % {"mode": "", "p": 0.0, "body": KPM})
    _, c = _candidate(path, "sdpa")
    mod, ref, new = _models(tmp_path, path, c.source, train=train)
    x, pad = mod.get_inputs()
    pad[1] = True
    want = ref(x, pad)
    assert want[1].isnan().all() and not want[0].isnan().any()
    torch.testing.assert_close(new(x, pad), want, rtol=1e-5, atol=1e-5, equal_nan=True)
    am = torch.ones(6, 6, dtype=torch.bool).triu(1)
    am[3] = True  # query 3 attends to nothing, in every sequence
    mha = ref.attn.train(train)
    want, _ = mha(x, x, x, attn_mask=am)
    got = runtime.nan_where_no_key(mha, mha(x, x, x, attn_mask=am, need_weights=False)[0],
                                   None, am)
    assert want[:, 3].isnan().all()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("mode, p, body", [
    ("", 0.0, "return self.attn(x, x, x)"),  # the weights returned
    ("", 0.0, "out, w = self.attn(x, x, x)\n        return out * w.mean()"),  # read
    ('"train_mode": True, ', 0.1, KPM),  # dropout while training
    ("", 0.0, "out, _ = self.attn(x, x, x, attn_mask=x.new_ones(6, 6).triu(1).bool(), "
              "is_causal=True)\n        return out"),  # the causal hint
    ("", 0.0, "out, _ = self.attn(x, x, x, need_weights=False)\n        return out"),
])
def test_multihead_attention_whose_weights_matter_is_not_matched(tmp_path, mode, p, body):
    path = _file(tmp_path, "mha", MHA % {"mode": mode, "p": p, "body": body})
    assert "mha_no_weights" not in _kinds(path)


def test_a_module_in_eval_mode_with_dropout_is_matched(tmp_path):
    path = _file(tmp_path, "mha", MHA % {"mode": "", "p": 0.1, "body": KPM})
    assert _kinds(path) == ["mha_no_weights"]


GQA_BESIDE = '''
SOLFORGE = {"precision": "fp32", "workloads": [{"name": "s", "params": {}, "cpu": True}]}


class Model(nn.Module):
    def forward(self, q, k0, v0, keep):
        k = k0[:, :, None, :, :].expand(1, 2, 3, 5, 8).reshape(1, 6, 5, 8)
        v = v0[:, :, None, :, :].expand(1, 2, 3, 5, 8).reshape(1, 6, 5, 8)
        a = F.softmax(((q @ k.transpose(-2, -1)) * 0.3).masked_fill(keep == 0, -1e9), -1) @ v
        k2 = k0[:, :, None, :, :].expand(1, 2, 3, 5, 8).reshape(1, 6, 5, 8)
        v2 = v0[:, :, None, :, :].expand(1, 2, 3, 5, 8).reshape(1, 6, 5, 8)
        return a + F.scaled_dot_product_attention(q, k2, v2, attn_mask=keep != 0)


def get_inputs():
    keep = torch.rand(5, 5) > 0.3
    keep[:, 0] = True
    return [torch.randn(1, 6, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), keep]


def get_init_inputs():
    return []
'''


def test_masked_attention_and_grouped_query_sdpa_compose_in_one_candidate(ev, tmp_path):
    """The hand-written attention becomes masked_sdpa over its repeated keys (one pass:
    its repeat stays); the SDPA call beside it drops its repeat (enable_gqa)."""
    path = _file(tmp_path, "gqa_beside", GQA_BESIDE)
    assert _kinds(path) == ["sdpa", "gqa"]
    p, c = _candidate(path, "sdpa")
    assert "masked_sdpa(q, reshape, reshape_1, keep, 0, fill=-1000000000.0" in c.source
    assert "F.scaled_dot_product_attention(q, k0, v0, attn_mask=ne, enable_gqa=True)" in c.source
    _passes(ev, p, c.source, tmp_path)
