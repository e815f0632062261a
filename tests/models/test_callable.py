"""`module:callable` models: no transformers needed; constructors read from the modules."""

from __future__ import annotations

import json

import pytest

from solforge.models.extract import Step, extract
from solforge.models.source import ModelSpecError, build_model
from solforge.problems import load_problem
from solforge.problems.loader import import_file


def test_callable_model_blocks_deduplicated_and_rebuilt(tmp_path):
    built = build_model("tests.models.tiny_net:build", batch=4)
    m = extract(built, [Step("prefill", 4, 1)], tmp_path, tag="tiny")
    by_class = {p["class"].rsplit(".", 1)[-1]: p for p in m["problems"]}
    block = by_class["Block"]
    assert block["paths"] == ["blocks.0", "blocks.1", "blocks.2"]
    assert block["workloads"]["prefill_b4_s1"]["calls"] == 3
    # the blocks' Linear layers (32 -> 32) are one problem; the head (32 -> 10) another
    linears = [p for p in m["problems"] if p["class"] == "torch.nn.modules.linear.Linear"]
    assert sorted(len(p["paths"]) for p in linears) == [1, 3]
    assert json.loads((tmp_path / "extract.json").read_text())["problems"] == m["problems"]
    problem = load_problem(tmp_path / block["file"])
    module = import_file(problem.path)
    rebuilt = module.Model(*module.get_init_inputs())
    # scale=0.5 read from the module; the class name aside, the same module
    assert repr(rebuilt).partition("(")[2] == repr(built.model.blocks[0]).partition("(")[2]
    (x,) = module.get_inputs(**problem.workloads[0].params)
    assert x.shape == (4, 32) and rebuilt(x).shape == (4, 32)


def test_decode_needs_a_causal_lm_and_bad_callables_say_so():
    built = build_model("tests.models.tiny_net:build")
    with pytest.raises(ModelSpecError, match="--decode needs a transformers causal LM"):
        built.inputs("decode", 1, 8)
    with pytest.raises(ModelSpecError, match="cannot import 'nope'"):
        build_model("tests.models.tiny_net:nope")
    with pytest.raises(ModelSpecError, match=r"must return \(nn.Module, example_inputs\)"):
        build_model("tests.models.tiny_net:Net")


def test_extracting_again_replaces_the_earlier_problems(tmp_path):
    built = build_model("tests.models.tiny_net:build")
    first = extract(built, [Step("prefill", 2, 1)], tmp_path, tag="a")
    (tmp_path / "notes.py").write_text("# not a problem of ours\n")
    second = extract(built, [Step("prefill", 2, 1)], tmp_path, tag="b")
    names = {p.name for p in tmp_path.glob("*.py")}
    assert names == {p["file"] for p in second["problems"]} | {"notes.py"}
    assert not names & {p["file"] for p in first["problems"]}


def test_a_bad_model_share_names_the_file_and_field(tmp_path):
    from solforge.problems.spec import ProblemError

    built = build_model("tests.models.tiny_net:build")
    m = extract(built, [Step("prefill", 2, 1)], tmp_path, tag="t")
    path = tmp_path / m["problems"][0]["file"]
    text = path.read_text()
    path.write_text(text.replace("'model_share': ", "'model_share': 2 + 0 * ", 1))
    with pytest.raises(ProblemError, match=r"model_share'\] must be a fraction"):
        load_problem(path)


def test_a_module_timed_above_its_step_gets_a_share_of_one():
    # seen: qwen3_moe's experts at 1.013 of a CPU step (each a median of its own repeats),
    # which made the written problem fail to load
    from solforge.models.problem_file import fraction

    assert fraction(1.013, 1.0) == 1.0
    assert fraction(0.25, 1.0) == 0.25
    assert fraction(0.5, 0.0) == 0.0
