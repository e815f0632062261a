"""How CLI targets become problems: names, categories, files, folders, lists."""

from __future__ import annotations

import pytest

from solforge.bench.suite import with_solutions
from solforge.problems import ProblemError, resolve_target
from tests.conftest import PROBLEMS


def test_comma_separated_targets_are_their_union_in_order():
    got, broken = resolve_target("silu_llama3,quant,silu_llama3")
    names = [p.name for p in got]
    quant, _ = resolve_target("quant")
    assert names[0] == "silu_llama3" and names.count("silu_llama3") == 1
    assert names[1:] == [p.name for p in quant]
    assert broken == []


def test_a_list_with_a_bad_item_names_it():
    with pytest.raises(ProblemError, match="'no_such_problem'"):
        resolve_target("silu_llama3,no_such_problem")


def test_a_list_may_hold_files(tmp_path):
    got, _ = resolve_target(f"{PROBLEMS / 'tiny_linear.py'},rmsnorm_llama3")
    assert [p.name for p in got] == ["tiny_linear", "rmsnorm_llama3"]


def test_with_solutions_keeps_the_problems_a_folder_solves(tmp_path):
    problems, _ = resolve_target("silu_llama3,rmsnorm_llama3,layernorm_vit")
    (tmp_path / "rmsnorm_llama3.py").write_text("")
    assert [p.name for p in with_solutions(problems, str(tmp_path))] == ["rmsnorm_llama3"]
    assert with_solutions(problems, "reference") == problems
    with pytest.raises(FileNotFoundError):
        with_solutions(problems, str(tmp_path / "missing"))
