"""The ``rowfuse`` family: which traced forwards are row programs (``rowfuse.classify``),
and that the one Triton kernel generated for each (``rowfuse.codegen``), run on this CPU
under Triton's interpreter, computes what the reference computes at the problem's CPU
workloads (odd sizes included: rows of 509, a row count no multiple of the programs),
judged by the problem's own precision class; one is judged by the real evaluator. The
kernel walks its rows in tiles of ``BLOCK_M``: each value the GPU's autotuner may pick is
forced in turn at the tiles' edges (chunks no multiple of it, or shorter; one row; N=2)."""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

import pytest
import torch
import triton

from solforge.bench.evaluator import Evaluator
from solforge.bench.measure.compare import compare_outputs
from solforge.bench.measure.inputs import build_model, init_args, make_inputs
from solforge.problems import find_builtin, load_problem
from solforge.problems.loader import import_file
from solforge.problems.spec import Workload
from solforge.records.evaluation import Status
from solforge.search.candidates import generate_candidates, search_context
from solforge.search.families.rowfuse import row_program
from solforge.search.rowfuse.program import Kind
from solforge.kernels.triton._common import ROW_TILE_BLOCK_M, fitting_row_tiles
from tests.conftest import FIXTURES, PROBLEMS, interpreted_options

ROW_PROGRAMS = ["rmsnorm_bwd_llama3", "rmsnorm_bwd_gemma2", "layernorm_bwd_gpt2",
                "add_rmsnorm_bwd_mistral", "bias_gelu_bwd_bert", "layerscale_bwd_dinov2",
                "rmsnorm_llama3", "layernorm_vit", "softmax_bwd_bert",
                # most operations at once: 3-D bf16 rows of 37 and 48, a merged view, a
                # column sum over (0, 1), a 0-d parameter, module numbers, a max's values
                "rowfuse_ops.py"]
KB = FIXTURES / "kernelbench_reductions" / "KernelBench" / "level1"


@functools.lru_cache(maxsize=None)
def _context(name: str, device: str = "cuda"):
    problem = load_problem(PROBLEMS / name) if name.endswith(".py") else find_builtin(name)
    return search_context(problem, device)


def _rowfuse(ctx):
    cands, errors = generate_candidates(ctx, ["rowfuse"])
    assert not errors, errors
    return next((c for c in cands if c.name == "rowfuse"), None)


def _problem_file(tmp_path: Path, body: str, sizes: str = "(7, 33)") -> Path:
    path = tmp_path / "rowprog.py"
    path.write_text(textwrap.dedent(f"""
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(33))

            def forward(self, x):
                {body}


        def get_inputs():
            return [torch.randn{sizes}]


        def get_init_inputs():
            return []
        """))
    return path


class _Forced:
    """The generated kernel launched past its autotuner with explicit meta-parameters
    (``BLOCK_M``, ``num_warps``): ``kernel[grid](...)`` as the launcher calls it."""

    def __init__(self, tuned, **meta):
        self.fn, self.meta = tuned.fn, meta  # the autotuner's underlying jitted function

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.fn[grid](*args, **kwargs, **self.meta)


def _check_against_reference(problem, source: str, tmp_path: Path, workloads,
                             **meta) -> list:
    """The candidate's outputs and the reference's at each workload, judged by the
    problem's precision class: the comparisons. ``meta`` (say ``BLOCK_M=4``) forces the
    kernel's config instead of the interpreter's one."""
    sol_path = tmp_path / "rowfuse_solution.py"
    sol_path.write_text(source)
    ref, sol = import_file(problem.path, prefix="rowfuse_ref"), import_file(sol_path,
                                                                             prefix="rowfuse_sol")
    if meta:
        sol._rowfuse_kernel = _Forced(sol._rowfuse_kernel, **meta)
    out = []
    for w in workloads:
        args = init_args(ref, w.params)
        model = build_model(ref.Model, args, torch.device("cpu"), True)
        new = build_model(sol.ModelNew, args, torch.device("cpu"), True, model.state_dict())
        xs = make_inputs(ref, w.params, 7, "normal", torch.device("cpu"))
        with torch.no_grad():
            out.append((w.name, compare_outputs(new(*xs), model(*xs), problem, xs)))
    return out


@pytest.mark.parametrize("name", ROW_PROGRAMS)
def test_corpus_row_programs_are_recognised(name):
    prog, why = row_program(_context(name))
    assert prog is not None, why
    assert prog.has_reduction


def test_the_rmsnorm_backward_reads_as_rows_row_stats_and_columns():
    prog, _ = row_program(_context("rmsnorm_bwd_llama3"))
    assert {s.value.name: s.value.kind for s in prog.sources} == {
        "grad_out": Kind.ROW, "x": Kind.ROW, "rstd": Kind.ROWSTAT, "weight": Kind.COL}
    assert [s.out.name for s in prog.column_steps] == ["sum_1"]  # dweight, before its cast
    assert [(st.node, st.value.dtype) for st in prog.stored] == [("to", torch.bfloat16)]
    mean = next(s for s in prog.steps if s.op == "rowmean")
    assert mean.out.kind is Kind.ROWSTAT and mean.out.keepdim


@pytest.mark.parametrize("name,reason", [
    ("linear_llama3_8b_qkv", "linear is not a row-program operation"),  # a matmul
    ("embedding_bwd_llama3", "int64"),                                    # token ids
    ("moe_sum_deepseek_v3", "a reduction over dims [1]"),                 # not the last dim
    ("gelu_tanh_bwd_gpt2", None),  # a row program, pointwise: no candidate (below)
])
def test_what_is_not_a_row_program_says_why(name, reason):
    prog, why = row_program(_context(name))
    if reason is None:
        assert prog is not None and not prog.has_reduction, why
    else:
        assert prog is None and reason in why, why


@pytest.mark.parametrize("body,reason", [
    ("return torch.softmax(x, dim=0)", "softmax over a dim other than the row's"),
    ("return x - x.sum(0)", "a row value from a column reduction"),
    ("return x.sum()", "a reduction over every element"),
    ("return x[:, :4].sum(-1)", "indexing"),
    ("return x.mul_(2).sum(-1)", "not a row-program operation"),
])
def test_synthetic_forwards_outside_the_op_set_are_refused(tmp_path, body, reason):
    ctx = search_context(load_problem(_problem_file(tmp_path, body)), "cuda")
    prog, why = row_program(ctx)
    assert prog is None and reason in why, why
    assert _rowfuse(ctx) is None and any(reason in d for d in ctx.declined)


def test_a_column_vector_as_long_as_the_rows_are_many_is_ambiguous(tmp_path):
    # (33, 33) rows and a 33-vector input: per row or per column? one workload cannot say
    path = _problem_file(tmp_path, "return (x * v).sum(-1)", "(33, 33), torch.randn(33)")
    text = path.read_text().replace("def forward(self, x):", "def forward(self, x, v):")
    path.write_text(text)
    prog, why = row_program(search_context(load_problem(path), "cuda"))
    assert prog is None and "ambiguous" in why, why


@pytest.mark.parametrize("name", ROW_PROGRAMS)
def test_the_generated_kernel_computes_the_reference(tmp_path, name):
    ctx = _context(name)
    c = _rowfuse(ctx)
    assert c is not None and c.language == "triton" and c.levers == ["fusion", "autotune"]
    assert "@triton.autotune" in c.source and "rows_idx.to(tl.int64) * N" in c.source
    cpu = [w for w in ctx.problem.workloads if w.cpu]
    assert any(w.params != cpu[0].params for w in cpu)  # the odd sizes too
    for w, cmp in _check_against_reference(ctx.problem, c.source, tmp_path, cpu):
        assert cmp.status is Status.PASSED, f"{w}: {cmp.message}"


# (params, what they make of the tile edges) under the interpreter's 4 SMs: 16 programs
# at most, each a chunk of ceil(rows / programs) rows
_EDGES = {
    "rowfuse_ops.py": [{"b": 1, "s": 1, "n": 2},      # one row of 2: one program, 1 row
                       {"b": 2, "s": 150, "n": 2},    # 300 rows: chunks of 19, the last 15
                       {"b": 4, "s": 25, "n": 37},    # 100 rows: chunks of 7, the last 2
                       {"b": 3, "s": 11, "n": 509}],  # 33 rows: chunks of 3
    "layernorm_bwd_gpt2": [{"tokens": 1, "hidden": 2}, {"tokens": 300, "hidden": 2},
                           {"tokens": 100, "hidden": 37}, {"tokens": 33, "hidden": 509}],
}


@pytest.mark.parametrize("block_m", ROW_TILE_BLOCK_M)
@pytest.mark.parametrize("name", list(_EDGES))
def test_every_tile_height_computes_the_reference_at_the_edges(tmp_path, name, block_m):
    """Column reductions (rowfuse_ops: a sum and a mean; layernorm_bwd: two sums), per-row
    outputs (rowfuse_ops: a max and a root mean square) and row outputs, with each
    ``BLOCK_M`` the GPU's autotuner may choose forced in turn."""
    ctx = _context(name)
    c = _rowfuse(ctx)
    workloads = [Workload(name=f"edge{i}", params=p, cpu=True)
                 for i, p in enumerate(_EDGES[name])]
    for w, cmp in _check_against_reference(ctx.problem, c.source, tmp_path, workloads,
                                           BLOCK_M=block_m, num_warps=4):
        assert cmp.status is Status.PASSED, f"BLOCK_M={block_m}, {w}: {cmp.message}"


def test_the_tiles_kept_suit_the_row_length():
    configs = [triton.Config({"BLOCK_M": m}, num_warps=w)
               for m in ROW_TILE_BLOCK_M for w in (4, 8, 16)]

    def kept(n):
        return {(c.kwargs["BLOCK_M"], c.num_warps) for c in fitting_row_tiles(configs, {"N": n})}

    # GPT-2's 768 (tiles of 1024 columns): 1 to 16 rows, 4 to 64 elements a thread
    assert {m for m, _ in kept(768)} == {1, 2, 4, 8, 16}
    assert all(1024 <= m * 1024 <= 16384 and 4 <= m * 1024 / (32 * w) <= 64
               for m, w in kept(768))
    assert kept(2) == {(32, 4)}        # no tile reaches 1024: the most rows, fewest warps
    assert kept(65536) == {(1, 16)}    # one row is past 16384 already: the most warps
    assert {m for m, _ in kept(200)} == {4, 8, 16, 32}


def test_a_kernel_that_sums_wrong_fails_the_same_check(tmp_path):
    # the check above can fail: the same file with dweight's partial sums negated
    ctx = _context("rmsnorm_bwd_llama3")
    source = _rowfuse(ctx).source
    assert "sum_1_acc += " in source
    bad = source.replace("sum_1_acc += ", "sum_1_acc -= ")
    cpu = [w for w in ctx.problem.workloads if w.cpu]
    assert all(cmp.status is not Status.PASSED
               for _, cmp in _check_against_reference(ctx.problem, bad, tmp_path, cpu))


def test_the_family_offers_it_only_on_a_gpu_and_with_a_reduction():
    assert _rowfuse(_context("rmsnorm_bwd_llama3", "cpu")) is None
    ctx = search_context(find_builtin("gelu_tanh_bwd_gpt2"), "cuda")
    assert _rowfuse(ctx) is None
    assert any("pointwise" in d for d in ctx.declined)
    c = _rowfuse(_context("layernorm_bwd_gpt2"))
    # dweight and dbias: two column reductions, each with its partial rows
    assert c.source.count("_part = torch.empty((programs, n)") == 2
    assert "self.weight" in c.source and "self.bias" in c.source


@pytest.mark.parametrize("file,n", [("24_LogSoftmax.py", 393216), ("38_L1Norm_.py", 65535)])
def test_kernelbench_row_programs_at_their_sizes_and_shrunk(tmp_path, file, n):
    """KernelBench's own files (not ours): too long a row at their sizes, row programs
    (log-softmax; a mean of |x| over the row) and correct once their sizes are small."""
    prog, why = row_program(search_context(load_problem(KB / file), "cuda"))
    assert prog is None and f"rows of {n} elements" in why
    text = (KB / file).read_text()
    small = tmp_path / file
    small.write_text(text.replace("batch_size = ", "batch_size = 33  # ", 1)
                     .replace(f"dim = {n}", "dim = 509"))
    problem = load_problem(small)
    ctx = search_context(problem, "cuda")
    c = _rowfuse(ctx)
    assert c is not None, ctx.declined
    for w, cmp in _check_against_reference(problem, c.source, tmp_path, problem.workloads):
        assert cmp.status is Status.PASSED, f"{w}: {cmp.message}"


@pytest.mark.usefixtures("two_spares")
def test_the_evaluator_passes_the_rmsnorm_backward_kernel(tmp_path):
    ctx = _context("rmsnorm_bwd_llama3")
    path = tmp_path / "rowfuse.py"
    path.write_text(_rowfuse(ctx).source)
    with Evaluator(interpreted_options()) as ev:
        r = ev.evaluate(ctx.problem, path, workloads="all")
    assert r.status is Status.PASSED, r.message
    assert r.held_out_included and r.language == "triton"
