"""What KernelBench's files (levels 1-3) made the tracer refuse, each construct in a small
file of its own in KernelBench's format (``tests/fixtures/problems/kb_*.py``): tensors made
in ``forward`` (``torch.tensor(self.constant_value)``), optional inputs ``get_inputs()``
does not give (an RNN's ``h0=None``, NetVLAD's ``mask=None``), size and device checks in
Python, a constructor that reads tensor values (Swin's drop-path rates). Each now traces,
its printed graph computes exactly what the reference computes, and its library candidate
passes the real evaluator. What stays refused says why
(``benchmarks/results/2026-12-06-cpu-kb-survey``)."""

from __future__ import annotations

import textwrap

import pytest
import torch

from solforge.bench.evaluator import Evaluator
from solforge.bench.measure.inputs import build_model, init_args, make_inputs
from solforge.problems import load_problem
from solforge.problems.loader import import_file
from solforge.records.evaluation import Status
from solforge.search.align import trace_reference
from solforge.search.candidates import generate_candidates, search_context
from solforge.search.emit import BASE_IMPORTS, standalone_file
from solforge.search.fxsource import forward_source
from solforge.search.trace import HOST_ELEMENTS, TraceError, _SmallOnHost
from tests.conftest import PROBLEMS, interpreted_options

pytestmark = pytest.mark.usefixtures("two_spares")  # evaluations back to back

# fixture: what its printed forward must say
CASES = {
    "kb_tensor_made_in_forward.py": [
        "torch.tensor(self.floor)", "torch.full((max_1.shape[-1],), self.scale, device=",
        "torch.ones(1, device="],
    "kb_optional_hidden.py": [
        "def forward(self, x, h0=None):", "torch._assert(h0 is None, ",
        "torch.zeros(self.num_layers, x.size(0), self.hidden_size, device=x.device)"],
    "kb_checked_pooling.py": [
        "def forward(self, x, mask=None):", "torch._assert(mask is None, ",
        "torch._assert(x.size(1) == self.tokens, ",
        "torch._assert(x.device == self.centroids.device, "],
    # the rates the constructor read, exactly: (1 - rate) of each layer
    "kb_rates_read_in_init.py": ["0.8499999940395355 * relu_1", "0.699999988079071 * relu_2"],
}


def _traced_solution(tmp_path, p, graph):
    path = tmp_path / f"traced_{p.path.stem}.py"
    path.write_text(standalone_file(problem=p.name, candidate="traced", summary="traced",
                                    details=[], levers=[], reference_path=p.path,
                                    imports=list(BASE_IMPORTS),
                                    forward=forward_source(graph, {})))
    return import_file(path)


def _models(p, solution):
    module = import_file(p.path)
    w = p.workloads[0]
    args = init_args(module, dict(w.params))
    cpu = torch.device("cpu")
    ref = build_model(module.Model, args, cpu, True)
    new = build_model(solution.ModelNew, args, cpu, True, ref.state_dict())
    return module, ref, new


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_refused_constructs_trace_and_print_exactly(tmp_path, name):
    p = load_problem(PROBLEMS / name)
    assert p.kernelbench_plain
    ctx = search_context(p, "cpu")
    assert ctx.trace_error is None
    assert [m.kind for m in ctx.matches] == ["softmax"]
    src = forward_source(ctx.traced.graph, {})
    for says in CASES[name]:
        assert says in src, src
    module, ref, new = _models(p, _traced_solution(tmp_path, p, ctx.traced.graph))
    for seed in (0, 1):
        inputs = make_inputs(module, dict(p.workloads[0].params), seed, "normal",
                             torch.device("cpu"))
        with torch.no_grad():
            assert torch.equal(new(*inputs), ref(*inputs))


def test_the_graphs_guards_refuse_what_was_not_traced(tmp_path):
    """A parameter traced as its default, a size or a device checked in Python: the
    printed forward raises for another value instead of computing something else."""
    p = load_problem(PROBLEMS / "kb_optional_hidden.py")
    _, _, new = _models(p, _traced_solution(tmp_path, p, trace_reference(
        p, import_file(p.path)).graph))
    x = torch.randn(3, 7, 10)
    new(x)
    with pytest.raises(AssertionError, match="h0 was traced as None"):
        new(x, torch.zeros(2, 3, 16))
    p = load_problem(PROBLEMS / "kb_checked_pooling.py")
    _, _, new = _models(p, _traced_solution(tmp_path, p, trace_reference(
        p, import_file(p.path)).graph))
    new(torch.randn(2, 9, 12), None)
    with pytest.raises(AssertionError, match="size or device check"):
        new(torch.randn(2, 8, 12), None)  # the reference asserts 9 tokens too
    with pytest.raises(AssertionError, match="mask was traced as None"):
        new(torch.randn(2, 9, 12), torch.ones(2, 9, 5, dtype=torch.bool))


@pytest.fixture(scope="module")
def ev():
    with Evaluator(interpreted_options()) as e:
        yield e


@pytest.mark.parametrize("name", sorted(CASES))
def test_their_library_candidates_pass_the_evaluator(ev, tmp_path, name):
    p = load_problem(PROBLEMS / name)
    cands, errors = generate_candidates(search_context(p, "cpu"))
    assert errors == {}
    c = next(c for c in cands if c.name == "library")
    assert "softmax(" in c.source and c.language == "triton"
    for guard in [s for s in CASES[name] if s.startswith("torch._assert(")]:
        assert guard in c.source  # the rewrite keeps the graph's guards
    path = tmp_path / "cand.py"
    path.write_text(c.source)
    r = ev.evaluate(p, path)
    assert r.status is Status.PASSED, r.message


def test_a_constructor_that_reads_values_is_built_with_small_tensors_on_the_cpu():
    with _SmallOnHost():
        small = torch.linspace(0, 1, 5)
        large = torch.empty(HOST_ELEMENTS + 1)
        named = torch.zeros(3, device="meta")
    assert small.device.type == "cpu" and small[1].item() == 0.25
    assert large.is_meta and named.is_meta


def _kb_file(tmp_path, name, body, init="[]", inputs="[torch.randn(4, 6)]"):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent('''
        import torch
        import torch.nn as nn

        OFFSET = torch.arange(6.0)


        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                self.state = torch.zeros(4, 6)

            def forward(self, x):
        {body}


        def get_inputs():
            return {inputs}


        def get_init_inputs():
            return {init}
    ''').format(body=textwrap.indent(textwrap.dedent(body).strip(), " " * 8),
                inputs=inputs, init=init))
    return load_problem(path)


@pytest.mark.parametrize("body, reason", [
    # VanillaRNN (level 3, 33) keeps its hidden state in a plain attribute
    ("self.state = torch.tanh(x + self.state)\nreturn self.state", "module state"),
    # VanillaRNNHidden: range() of a size (Swin's int() of one is specialised for a
    # one-workload file: test_trace.test_int_of_a_size_is_specialised_and_guarded_...)
    ("return torch.stack([x[t] for t in range(x.size(0))])", "sizes stay symbolic"),
    ("if x.shape[0] > 2:\n    return x * 2\nreturn x", "control flow"),  # not an equality
])
def test_what_stays_refused_says_why(tmp_path, body, reason):
    p = _kb_file(tmp_path, "refused", body)
    with pytest.raises(TraceError, match=reason):
        trace_reference(p, import_file(p.path))


def test_shape_checks_become_guards(tmp_path):
    p = _kb_file(tmp_path, "checked", """
        assert x.shape == (4, 6), "one shape"
        if x.dim() != 2:
            raise ValueError("2-D only")
        return torch.softmax(x, dim=-1)
    """)
    tr = trace_reference(p, import_file(p.path))
    src = forward_source(tr.graph, {})
    assert "torch._assert(x.shape == (4, 6), " in src and "torch._assert(x.dim() == 2, " in src
    _, ref, new = _models(p, _traced_solution(tmp_path, p, tr.graph))
    x = torch.randn(4, 6)
    assert torch.equal(new(x), ref(x))
    with pytest.raises(AssertionError, match="size or device check"):
        new(torch.randn(3, 6))


def test_a_tensor_computed_at_trace_time_gets_no_graph_candidate(tmp_path):
    """A module-level tensor in forward stays fx's constant: the printer refuses it, and
    no file is written with a ``self._tensor_constant0`` it cannot define."""
    p = _kb_file(tmp_path, "constant", "return torch.softmax(x + OFFSET, dim=-1)")
    ctx = search_context(p, "cpu")
    assert ctx.trace_error is None and [m.kind for m in ctx.matches] == ["softmax"]
    cands, _ = generate_candidates(ctx)
    assert "library" not in {c.name for c in cands}
    assert any("made at trace time" in e for e in ctx.rewrite_errors), ctx.rewrite_errors
