"""``batch_norm_act`` against ``nn.BatchNorm*`` (so ``F.batch_norm``), ``relu`` and the
residual add, under the interpreter: 2-D to 5-D inputs of odd sizes (the interpreter's tiles
are small, so these cross tiles, channel blocks and pieces), training and eval, running
buffers and ``num_batches_tracked`` after two calls, momentum None, affine=False, untracked
statistics, 16-bit inputs, and inputs far from zero mean."""

import copy
import os

os.environ["TRITON_INTERPRET"] = "1"  # read by the kernels when they are imported, below

import pytest
import torch
import torch.nn as nn

pytest.importorskip("triton")  # an optional dependency: solforge[triton]

from solforge.kernels.triton import batch_norm_act  # noqa: E402

CLASSES = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}
SHAPES = [(6, 5), (3, 5, 9), (2, 3, 5, 7), (2, 3, 3, 4, 5), (3, 11, 1, 1)]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _bn(shape, **kw) -> nn.Module:
    bn = CLASSES[len(shape)](shape[1], **kw)
    with torch.no_grad():
        if bn.weight is not None:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.normal_()
        if bn.running_mean is not None:
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 2.0)
    return bn


def _ref(x, bn, relu, residual=None, rbn=None):
    y = bn(x)
    if residual is not None:
        y = y + (rbn(residual) if rbn is not None else residual)
    return torch.relu(y) if relu else y


def _same_state(a: nn.Module, b: nn.Module) -> None:
    for (name, s), (_, t) in zip(a.state_dict().items(), b.state_dict().items()):
        torch.testing.assert_close(s, t, rtol=1e-6, atol=1e-7, msg=name)


# every shape with one residual kind, and every kind on the 4-D shape
CASES = [(s, r) for s, r in zip(SHAPES, ["batch_norm", None, "tensor", "batch_norm", None])]
CASES += [(SHAPES[2], r) for r in ("batch_norm", None)]


@pytest.mark.parametrize("shape, residual", CASES)
@pytest.mark.parametrize("training", [True, False])
def test_matches_batch_norm_relu_and_residual(shape, training, residual):
    relu = residual != "tensor" or training  # both, over the cases
    bn, rbn = _bn(shape).train(training), _bn(shape).train(training)
    ref_bn, ref_rbn = copy.deepcopy(bn), copy.deepcopy(rbn)
    x = torch.randn(shape) * 2 + 0.5
    r = torch.randn(shape) * 3 - 1 if residual else None
    for _ in range(2):  # the second call sees the buffers the first one updated
        got = batch_norm_act(x, bn, relu=relu, residual=r,
                             residual_bn=rbn if residual == "batch_norm" else None)
        want = _ref(x, ref_bn, relu, r, ref_rbn if residual == "batch_norm" else None)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    _same_state(bn, ref_bn)
    _same_state(rbn, ref_rbn)
    assert int(bn.num_batches_tracked) == (2 if training else 0)


@pytest.mark.parametrize("momentum", [None, 0.3])
def test_running_statistics_follow_the_module_for_any_momentum(momentum):
    """momentum None: the cumulative average over ``num_batches_tracked`` batches."""
    bn = _bn((4, 6, 3, 5), momentum=momentum)
    ref = copy.deepcopy(bn)
    for i in range(3):
        x = torch.randn(4, 6, 3, 5) * (i + 1) + i
        torch.testing.assert_close(batch_norm_act(x, bn), ref(x), rtol=1e-5, atol=1e-5)
    _same_state(bn, ref)
    assert int(bn.num_batches_tracked) == 3
    bn.eval(), ref.eval()  # then the running statistics normalise
    x = torch.randn(4, 6, 3, 5)
    torch.testing.assert_close(batch_norm_act(x, bn, relu=True), torch.relu(ref(x)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("training", [True, False])
def test_without_affine_or_tracked_statistics(training):
    shape = (3, 7, 5, 3)
    for kw in ({"affine": False}, {"track_running_stats": False},
               {"affine": False, "track_running_stats": False}):
        bn = _bn(shape, **kw).train(training)
        ref = copy.deepcopy(bn)
        x = torch.randn(shape) + 3
        r = torch.randn(shape)
        torch.testing.assert_close(batch_norm_act(x, bn, relu=True, residual=r),
                                   torch.relu(ref(x) + r), rtol=1e-5, atol=1e-5)
        _same_state(bn, ref)


def test_statistics_stay_accurate_far_from_zero_mean():
    """Mean 1000, spread 0.1: a one-pass E[x^2] - E[x]^2 in fp32 would lose the variance."""
    bn = nn.BatchNorm2d(3, affine=False)
    x = 1000 + 0.1 * torch.randn(4, 3, 9, 11)
    x64 = x.double()
    mean = x64.mean(dim=(0, 2, 3), keepdim=True)
    var = x64.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
    want = (x64 - mean) / torch.sqrt(var + 1e-5)
    got = batch_norm_act(x, bn)
    torch.testing.assert_close(got.double(), want, rtol=0, atol=3e-3)  # fp32 x's own ulp
    torch.testing.assert_close(bn.running_var.double(),
                               0.9 + 0.1 * x64.var(dim=(0, 2, 3)), rtol=1e-5, atol=0)


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_sixteen_bit_inputs_round_as_eager_does(dt):
    """fp32 math; ``bn(x)`` rounded to the input dtype before the add, the sum again."""
    shape = (3, 5, 4, 7)
    bn, rbn = _bn(shape), _bn(shape)
    ref_bn, ref_rbn = copy.deepcopy(bn), copy.deepcopy(rbn)
    x, y = torch.randn(shape).to(dt), torch.randn(shape).to(dt)
    got = batch_norm_act(x, bn, relu=True, residual=y, residual_bn=rbn)
    assert got.dtype == dt
    want = torch.relu(ref_bn(x.float()).to(dt) + ref_rbn(y.float()).to(dt))
    torch.testing.assert_close(got, want, rtol=0, atol=0.02 if dt == torch.bfloat16 else 3e-3)
    _same_state(bn, ref_bn)


def test_channels_last_input_is_read_right():
    bn = _bn((2, 6, 5, 3))
    ref = copy.deepcopy(bn)
    x = torch.randn(2, 6, 5, 3).to(memory_format=torch.channels_last)
    torch.testing.assert_close(batch_norm_act(x, bn), ref(x), rtol=1e-5, atol=1e-5)


def test_one_value_per_channel_while_training_raises_as_torch_does():
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        batch_norm_act(torch.randn(1, 4), nn.BatchNorm1d(4))
    bn = nn.BatchNorm1d(4).eval()
    ref = copy.deepcopy(bn)
    x = torch.randn(1, 4)
    torch.testing.assert_close(batch_norm_act(x, bn), ref(x))
