"""Input distributions that do not make problems trivial (issue 28, item 3): a plain
KernelBench file drawing its activations with ``torch.rand`` is judged on signed inputs too, so
"return the input" fails its ReLU, by the real evaluator on a CPU; the value-range generators
give what they say (probabilities summing to one, logits at their stated scale)."""

from __future__ import annotations

import math

import pytest
import torch

from solforge.bench.evaluator import Evaluator
from solforge.problems import gen
from solforge.problems.loader import load_problem
from solforge.records.evaluation import Status
from solforge.records.options import EvalOptions

# three evaluations one after another on one judge: the next runner starts during the current
pytestmark = pytest.mark.usefixtures("two_spares")

RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 4096


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
'''

# a plain file whose reference needs torch.rand's nonnegative range: log of a uniform draw
LOG = RELU.replace("return torch.relu(x)", "return torch.log(x + 1e-3)")

IDENTITY = '''import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clone()
'''

CORRECT_RELU = '''import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0.0)
'''

CORRECT_LOG = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.log(x + 1e-3)
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("dists")
    out = {}
    for name, text in (("19_ReLU.py", RELU), ("log_rand.py", LOG), ("identity.py", IDENTITY),
                       ("relu_ok.py", CORRECT_RELU), ("log_ok.py", CORRECT_LOG)):
        (d / name).write_text(text)
        out[name] = d / name
    return out


@pytest.fixture(scope="module")
def ev():
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=40, timeout_s=60,
                               seed=1)) as e:
        yield e


def test_plain_file_runs_its_own_draw_and_a_signed_one(files):
    p = load_problem(files["19_ReLU.py"])
    assert p.kernelbench_plain and p.distributions == list(gen.PLAIN_DISTRIBUTIONS)
    assert len(set(p.distributions)) >= 2


def test_identity_fails_a_torch_rand_relu_and_a_relu_passes(ev, files):
    bad = ev.evaluate(files["19_ReLU.py"], files["identity.py"])
    assert bad.status is Status.INCORRECT_NUMERICAL, bad.message
    assert "signed inputs" in bad.message, bad.message
    good = ev.evaluate(files["19_ReLU.py"], files["relu_ok.py"])
    assert good.status is Status.PASSED, good.message
    assert {"normal", "signed"} <= set(good.workloads[0].error_by_distribution)


def test_a_reference_that_needs_nonnegative_inputs_keeps_them(ev, files):
    r = ev.evaluate(files["log_rand.py"], files["log_ok.py"])
    assert r.status is Status.PASSED, r.message
    assert "non-finite" in r.workloads[0].message, r.workloads[0].message


def test_signed_applies_to_torch_rand_only_inside_the_block():
    torch.manual_seed(0)
    with gen.distribution("signed"):
        x = torch.rand(4096)
        y = torch.rand_like(x)
        u = gen.uniform(4096)  # gen's own generators keep their documented range
    assert x.min() < -0.5 and y.min() < -0.5 and x.max() < 1.0
    assert u.min() >= 0.0
    assert torch.rand(4096).min() >= 0.0


def test_probs_sum_to_one_and_logits_have_their_scale():
    torch.manual_seed(0)
    for dist in gen.DEFAULT_DISTRIBUTIONS:
        with gen.distribution(dist):
            p = gen.probs(64, 1000, dim=-1)
            d = gen.probs(3, 500, 8, dim=1, alpha=0.3)
            z = gen.logits(256, 4096)
        assert (p >= 0).all() and torch.allclose(p.sum(-1), torch.ones(64), atol=1e-5)
        assert (d >= 0).all() and torch.allclose(d.sum(1), torch.ones(3, 8), atol=1e-5)
        if dist != "outliers":  # unit variance but for its spikes, which add 0.9 to it
            assert abs(float(z.std()) - gen.LOGIT_STD) < 0.1 * gen.LOGIT_STD, (dist, z.std())
        # not flat: the top probability of a row is far above uniform
        assert float(p.max(-1).values.median()) > 5 / 1000


def test_heavy_is_unit_variance_with_heavy_tails():
    torch.manual_seed(0)
    with gen.distribution("heavy"):
        x = gen.randn(1 << 20)
    assert abs(float(x.std()) - 1.0) < 0.05
    kurtosis = float((x ** 4).mean() / (x ** 2).mean() ** 2)
    assert kurtosis > 4.5, kurtosis  # a normal's is 3; Student's t(4)'s is infinite
    assert math.isfinite(float(x.abs().max()))


def test_variance_and_padding_mask():
    torch.manual_seed(0)
    v = gen.variance(10000, low=0.05, high=4.0)
    assert v.min() >= 0.05 and v.max() <= 4.0 and float(v.max() / v.min()) > 40
    lens = torch.tensor([3, 1, 5])
    m = gen.padding_mask(lens)
    assert m.tolist() == [[True] * 3 + [False] * 2, [True] + [False] * 4, [True] * 5]
    add = gen.padding_mask(lens, 6, dtype=torch.float32)
    assert add.shape == (3, 6) and add[1, 1] == float("-inf") and add[2, 4] == 0


def test_torch_randn_in_a_problems_own_code_follows_the_distribution():
    """Files that draw with torch itself (synthesized problems, converted rows) vary with
    the distribution too; the module's own generators are not drawn twice."""
    torch.manual_seed(0)
    with gen.distribution("outliers"):
        x = torch.randn(200_000)
        y = torch.randn_like(x)
        g = gen.randn(200_000)
    for t in (x, y, g):
        big = (t.abs() > 8).float().mean().item()
        assert 2e-4 < big < 2e-3, big  # ~0.1% spikes of 30x (normal: none beyond 8)
    with gen.distribution("uniform"):
        u = torch.randn(10_000, dtype=torch.bfloat16)
    assert u.dtype == torch.bfloat16 and u.float().abs().max() <= 3 ** 0.5 + 1e-2
    with gen.distribution("normal"):
        n = torch.randn(200_000)
    assert (n.abs() > 8).sum() == 0 and torch.randn is gen._torch_randn
