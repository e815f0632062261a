"""The comparison of outputs (``bench/compare.py``) on hand-made results: what an integer
output freed by a problem's ``ignore_where_zero`` may differ in, and what it may not."""

from __future__ import annotations

import pytest
import torch

from solforge.bench.measure.compare import compare
from solforge.records.evaluation import Status
from solforge.problems import ProblemError, load_problem
from solforge.problems.precision import get_precision

BF16 = get_precision("bf16")


def _routing():
    # top-4 of 16 experts: the last two weights of row 1 are zero (probabilities that
    # underflowed), so which experts fill those slots is not defined
    w = torch.tensor([[0.5, 0.3, 0.15, 0.05], [1.0, 0.2, 0.0, 0.0]], dtype=torch.bfloat16)
    ids = torch.tensor([[3, 7, 1, 12], [5, 0, 2, 9]])
    return w, ids


def test_ids_may_differ_only_where_both_weights_are_zero():
    w, ids = _routing()
    other = ids.clone()
    other[1, 2:] = torch.tensor([14, 1])  # other experts in the zero-weight slots
    assert not compare((w, other), (w, ids), BF16).ok  # without the problem's say-so: exact
    assert compare((w, other), (w, ids), BF16, {1: 0}).ok
    # a slot with a weight is compared, and so is one where only the reference's is zero
    nonzero = ids.clone()
    nonzero[0, 3] = 4
    c = compare((w, nonzero), (w, ids), BF16, {1: 0})
    assert c.status is Status.INCORRECT_NUMERICAL and "1 of 8" in c.message
    w_cand = w.clone()
    w_cand[1, 3] = 2 ** -12  # within bf16's tolerance of 0, yet not zero: its id counts
    assert compare((w_cand, other), (w, ids), BF16).status is Status.INCORRECT_NUMERICAL
    c = compare((w_cand, other), (w, ids), BF16, {1: 0})
    assert not c.ok and "1 of 8" in c.message, c.message


def test_a_pairing_with_an_output_of_another_shape_is_a_clear_failure():
    w, ids = _routing()
    c = compare((w[:, :2], ids), (w[:, :2], ids), BF16, {1: 0})
    assert c.status is Status.INCORRECT_SHAPE
    assert "ignore_where_zero pairs output 1 with output 0" in c.message
    assert compare((w, ids), (w, ids), BF16, {1: 5}).status is Status.INCORRECT_SHAPE


def test_the_problem_file_declares_it_and_a_bad_value_is_named(tmp_path):
    from solforge.problems.loader import find_builtin

    src = find_builtin("moe_router_mixtral").path.read_text()
    bad = tmp_path / "router_bad.py"
    # output 1 pointing at itself (its own zeros) is no declaration of where it may differ
    bad.write_text(src.replace('"index_outputs"',
                               '"ignore_where_zero": {1: 1},\n    "index_outputs"'))
    with pytest.raises(ProblemError, match="must map an output's index to another output's"):
        load_problem(bad)
