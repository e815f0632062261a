"""Index outputs judged by what they select (``compare.py``, ``spec.IndexOutput``): real
candidates in real sandboxed runners on a top-k router whose scores tie, a plain
KernelBench argmin file, and the comparison itself on hand-made results."""

from __future__ import annotations

import pytest
import torch

from solforge.bench.measure.compare import compare, compare_outputs, infer_index_outputs
from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from solforge.records.evaluation import Status
from solforge.problems import ProblemError, load_problem
from solforge.problems.precision import get_precision
from solforge.problems.spec import IndexOutput

# one evaluation after another on one judge: the next runner starts during the current one
pytestmark = pytest.mark.usefixtures("two_spares")

FP32 = get_precision("fp32")

ROUTER = '''"""Top-k router: softmax over experts, the k largest; logits on a coarse grid, so most
rows tie and which of two equal experts top-k takes is its sort's choice."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "router_ties",
    "precision": "fp32",
    "distributions": ["normal"],
    "workloads": [{"name": "small", "params": {"tokens": 64, "experts": 8, "top_k": 2},
                   "cpu": True}],
    "index_outputs": {1: {"from_inputs": lambda logits: F.softmax(logits, -1), "dim": -1}},
}


class Model(nn.Module):
    def __init__(self, top_k: int = 2):
        super().__init__()
        self.top_k = top_k

    def forward(self, logits):
        return torch.topk(F.softmax(logits, dim=-1), self.top_k, dim=-1)


def get_inputs(tokens: int = 64, experts: int = 8):
    return [(gen.randn(tokens, experts) * 2).round()]


def get_init_inputs(top_k: int = 2):
    return [top_k]
'''

DECLARATION = next(line + "\n" for line in ROUTER.splitlines() if '"index_outputs"' in line)

HEAD = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, top_k: int = 2):
        super().__init__()
        self.top_k = top_k

    def forward(self, logits):
        probs = F.softmax(logits, dim=-1)
'''
# ties broken towards the highest expert id instead of top-k's own order
OTHER_TIE = HEAD + '''        w, ids = torch.topk(probs.flip(-1), self.top_k, dim=-1)
        return w, probs.shape[-1] - 1 - ids
'''
SMALLER = HEAD + '''        w, _ = torch.topk(probs, self.top_k, dim=-1)
        return w, torch.topk(probs, self.top_k, dim=-1, largest=False)[1]
'''
# the largest expert k times, with the right weights beside it
REPEATED = HEAD + '''        w, ids = torch.topk(probs, self.top_k, dim=-1)
        return w, ids[:, :1].expand(-1, self.top_k).contiguous()
'''
OUT_OF_RANGE = HEAD + '''        w, ids = torch.topk(probs, self.top_k, dim=-1)
        return w, ids + probs.shape[-1]
'''

PLAIN_ARGMIN = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmin(x, dim=self.dim)


def get_inputs():
    # small integers: most columns hold their minimum more than once
    return [torch.randint(0, 4, (4, 12, 5)).float()]


def get_init_inputs():
    return [1]
'''
ARG_HEAD = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
'''
# the last index of each minimum, where torch.argmin gives the first
LAST_MIN = ARG_HEAD + '''        n = x.shape[self.dim]
        return n - 1 - torch.argmin(x.flip(self.dim), dim=self.dim)
'''
ARGMAX = ARG_HEAD + '''        return torch.argmax(x, dim=self.dim)
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("index_outputs")
    (d / "router_ties.py").write_text(ROUTER)
    # the same router without the declaration: its ids are compared exactly
    exact = ROUTER.replace('"name": "router_ties"', '"name": "router_exact"')
    (d / "router_exact.py").write_text(exact.replace(DECLARATION, ""))
    (d / "kb_argmin.py").write_text(PLAIN_ARGMIN)
    for name, src in (("other_tie", OTHER_TIE), ("smaller", SMALLER),
                      ("repeated", REPEATED), ("out_of_range", OUT_OF_RANGE),
                      ("last_min", LAST_MIN), ("argmax", ARGMAX)):
        (d / f"{name}.py").write_text(src)
    return d


@pytest.fixture(scope="module")
def ev():
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=40, timeout_s=60,
                               seed=3)) as e:
        yield e


def test_the_undeclared_copy_has_no_index_outputs(files):
    assert load_problem(files / "router_exact.py").index_outputs == {}
    assert set(load_problem(files / "router_ties.py").index_outputs) == {1}


def test_ties_broken_the_other_way_pass_and_fail_where_undeclared(ev, files):
    r = ev.evaluate(files / "router_ties.py", files / "other_tie.py")
    # timed too: the judge's re-checks of timed calls and of the batch judge them alike
    assert r.status is Status.PASSED, r.message
    assert r.workloads[0].trials == 5 and r.workloads[0].time_ms
    # the same candidate against exact comparison: its ids do differ from top-k's
    r = ev.evaluate(files / "router_exact.py", files / "other_tie.py", timing=False)
    assert r.status is Status.INCORRECT_NUMERICAL
    assert "torch.int64 values differ (must be exact)" in r.message, r.message


@pytest.mark.parametrize("solution, needle", [
    ("smaller", "the values its indices select from the tensor the problem computes from the "
                "inputs differ from those the reference's select"),
    ("repeated", "rows repeat an index along dim -1"),
    ("out_of_range", "indices outside [0, 8)"),
])
def test_wrong_indices_fail(ev, files, solution, needle):
    r = ev.evaluate(files / "router_ties.py", files / f"{solution}.py", timing=False)
    assert r.status is Status.INCORRECT_NUMERICAL, r.message
    assert needle in r.message, r.message


def test_a_plain_kernelbench_argmin_is_judged_by_the_values_it_selects(ev, files):
    r = ev.evaluate(files / "kb_argmin.py", files / "last_min.py")
    assert r.status is Status.PASSED, r.message
    assert "input 0's argmin along dim 1" in r.workloads[0].message
    assert "inferred for a plain KernelBench file" in r.workloads[0].message
    r = ev.evaluate(files / "kb_argmin.py", files / "argmax.py", timing=False)
    assert r.status is Status.INCORRECT_NUMERICAL, r.message
    assert "differ from those the reference's select" in r.message, r.message


# -- the comparison on hand-made results ------------------------------------------------

def _topk(scores: torch.Tensor, k: int = 2):
    return torch.topk(scores, k, dim=-1)


def test_near_ties_within_the_tolerance_pass_beyond_it_fail():
    scores = torch.tensor([[0.5, 0.50001, 0.1, 0.2], [0.9, 0.3, 0.3, 0.29]])
    ref = _topk(scores)
    decl = {1: IndexOutput(input=0)}
    near = torch.tensor([[0, 1], [0, 2]])  # 0.5 for 0.50001 in row 0, a tie in row 1
    w = scores.gather(1, near)
    assert not compare((w, near), ref, FP32).ok  # undeclared: exact
    assert compare((w, near), ref, FP32, index_outputs=decl, inputs=[scores]).ok
    far = torch.tensor([[1, 0], [0, 3]])  # 0.29 for 0.3: 0.01 over fp32's tolerance
    c = compare((scores.gather(1, far), far), ref, FP32, index_outputs=decl, inputs=[scores])
    assert c.status is Status.INCORRECT_NUMERICAL and "1 of 4 selected values" in c.message


def test_indices_into_an_output_select_from_the_references_values():
    # output 0: the argmax of each row of output 1, the full score tensor
    scores = torch.tensor([[0.1, 0.9, 0.3], [0.7, 0.2, 0.7]])
    ref = (scores.argmax(-1), scores)
    decl = {0: IndexOutput(values=1)}
    assert compare((torch.tensor([1, 2]), scores), ref, FP32, index_outputs=decl).ok
    # consistent but wrong: its scores make its own choice look tied with the largest; the
    # indices select from the reference's scores, so they fail on their own (output 0 is
    # judged before the scores are)
    fake = scores.clone()
    fake[0, 0] = 0.9
    c = compare((torch.tensor([0, 0]), fake), ref, FP32, index_outputs=decl)
    assert c.status is Status.INCORRECT_NUMERICAL
    assert c.message.startswith("output 0: the values its indices select from output 1"), \
        c.message


def test_a_declaration_that_does_not_fit_the_reference_is_invalid_reference():
    scores = torch.rand(3, 5)
    ref = _topk(scores, 2)
    wrong_dim = {1: IndexOutput(input=0, dim=0)}
    c = compare(ref, ref, FP32, index_outputs=wrong_dim, inputs=[scores])
    assert c.status is Status.INVALID_REFERENCE and "shape (3, 5)" in c.message
    c = compare(ref, ref, FP32, index_outputs={1: IndexOutput(input=0, dim=2)},
                inputs=[scores])
    assert c.status is Status.INVALID_REFERENCE and "which has 2 dims" in c.message
    repeated = (ref[0], ref[1][:, :1].expand(-1, 2))
    c = compare(repeated, repeated, FP32, index_outputs={1: IndexOutput(input=0)},
                inputs=[scores])
    assert c.status is Status.INVALID_REFERENCE and "'distinct': False" in c.message
    assert compare(repeated, repeated, FP32, index_outputs={
        1: IndexOutput(input=0, distinct=False)}, inputs=[scores]).ok
    c = compare(ref, ref, FP32, index_outputs={0: IndexOutput(input=0)}, inputs=[scores])
    assert c.status is Status.INVALID_REFERENCE and "not integer indices" in c.message


def test_inference_is_only_for_an_exact_argmax_or_argmin_of_an_input():
    x = torch.tensor([[0., 2, 1, 2, 0, 1], [1, 1, 0, 2, 2, 0], [2, 0, 0, 1, 2, 2],
                      [0, 0, 1, 0, 2, 1]])
    index, note = infer_index_outputs(x.argmax(1), [x])
    assert index == {0: IndexOutput(input=0, dim=1, distinct=False)} and "argmax" in note
    # counts have that shape too, but are no argmax: exact
    assert infer_index_outputs((x > 0).sum(1), [x]) == ({}, "")
    # a problem with a SOLFORGE dict and no declaration: exact, nothing inferred
    from solforge.problems.loader import find_builtin

    p = find_builtin("moe_router_deepseek_v3")
    assert not p.kernelbench_plain and p.index_outputs == {}
    ids = torch.tensor([[0, 1]])
    c = compare_outputs((torch.ones(1, 2), ids), (torch.ones(1, 2), torch.tensor([[1, 0]])),
                        p, [torch.ones(1, 2)])
    assert "must be exact" in c.message and c.note == ""


def test_built_in_routers_and_argmax_declare_their_index_outputs():
    from solforge.problems.loader import find_builtin

    mixtral = find_builtin("moe_router_mixtral")
    assert set(mixtral.index_outputs) == {1} and mixtral.index_outputs[1].from_inputs
    assert find_builtin("argmax_greedy_llama3").index_outputs == {0: IndexOutput(input=0)}
    # the near-tie that failed on the H200: ids flipped between two equal probabilities
    logits = torch.tensor([[1.0, 3.0, 3.0, -2.0, 0.5, 0.0, 0.1, 0.2]])
    w, ids = torch.topk(torch.softmax(logits, 1), 2, dim=-1)
    ref = ((w / w.sum(-1, keepdim=True)).bfloat16(), ids)
    assert compare_outputs((ref[0], ids.flip(-1)), ref, mixtral, [logits]).ok


@pytest.mark.parametrize("declaration, needle", [
    ("{1: {'input': 0, 'values': 0}}", "give exactly one of 'values'"),
    ("{1: {'dim': -1}}", "got none"),
    ("{1: {'values': 1}}", "cannot hold indices into itself"),
    ("{1: {'input': 0, 'dims': 1}}", "dims: Extra inputs are not permitted"),
    ("{1: {'input': -1}}", "input: Input should be greater than or equal to 0"),
    ("[1, 0]", "must map an output's index to a declaration"),
    ("{'ids': {'input': 0}}", "must map an output's index to a dict"),
])
def test_a_bad_declaration_says_what_to_fix(tmp_path, declaration, needle):
    path = tmp_path / "router_bad.py"
    path.write_text(ROUTER.replace(DECLARATION, f'    "index_outputs": {declaration},\n'))
    with pytest.raises(ProblemError, match="SOLFORGE\\['index_outputs'\\]") as e:
        load_problem(path)
    assert needle in str(e.value), str(e.value)


def test_an_output_in_both_ignore_where_zero_and_index_outputs_is_refused(tmp_path):
    path = tmp_path / "router_both.py"
    path.write_text(ROUTER.replace('"distributions"', '"ignore_where_zero": {1: 0},\n    '
                                   '"distributions"'))
    with pytest.raises(ProblemError, match="also in ignore_where_zero; keep one"):
        load_problem(path)
