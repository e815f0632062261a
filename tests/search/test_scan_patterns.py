"""The ``cumulative`` pattern: cumsum/cumprod calls of problem files written here in
KernelBench's form (its level-1 scans 89-93, traced on meta at their own sizes) become the
library's ``cumulative``, on a GPU only, with the product, both flips or the exclusive
form's narrow and cat folded into the call; what would change the result (a casting
``dtype``, integers, one row) is left alone, and a prologue that cannot be folded stays
PyTorch's beside the replaced scan. The candidates compute the reference, and pass the
real evaluator on this CPU (the kernel under Triton's interpreter)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from solforge.bench.evaluator import Evaluator
from solforge.problems import load_problem
from solforge.problems.loader import import_file
from solforge.records.evaluation import Status
from solforge.search.candidates import generate_candidates, search_context
from tests.conftest import interpreted_options

# KernelBench's level-1 scan problems, written here in their form: a module with
# ``self.dim``, module-level sizes, ``get_inputs`` / ``get_init_inputs``
KERNELBENCH = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, {args}):
        {body}


batch_size = {batch}
input_shape = ({n},)
dim = 1


def get_inputs():
    {inputs}


def get_init_inputs():
    return [dim]
'''
RAND = "return [torch.rand(batch_size, *input_shape)]"
MASKED = ("x = torch.rand(batch_size, *input_shape)\n"
          "    mask = torch.randint(0, 2, x.shape).bool()\n"
          "    return [x, mask]")
EXCLUSIVE = ("cumsum = torch.cumsum(x.narrow(dim=self.dim, start=0, "
             "length=x.size(self.dim)-1), dim=self.dim)\n"
             "        return torch.cat((torch.zeros_like(x.select(self.dim, 0)"
             ".unsqueeze(self.dim)), cumsum), dim=self.dim)")
# name: (forward's arguments, its body, get_inputs' body, the match's folded form,
#        the library call in the candidate)
FORMS = {
    "89_cumsum": ("x", "return torch.cumsum(x, dim=self.dim)", RAND, "",
                  "cumulative(x, self.dim, 'sum')"),
    "90_cumprod": ("x", "return torch.cumprod(x, dim=self.dim)", RAND, "",
                   "cumulative(x, self.dim, 'prod')"),
    "91_cumsum_reverse": ("x", "return torch.cumsum(x.flip(self.dim), dim=self.dim)"
                          ".flip(self.dim)", RAND, ", reversed (both flips folded)",
                          "cumulative(x, self.dim, 'sum', reverse=True)"),
    "92_cumsum_exclusive": ("x", EXCLUSIVE, RAND,
                            ", exclusive (the narrow and the cat folded)",
                            "cumulative(x, self.dim, 'sum', exclusive=True)"),
    "93_masked_cumsum": ("x, mask", "return torch.cumsum(x * mask, dim=self.dim)", MASKED,
                         ", the product before it read in the same pass",
                         "cumulative(x, self.dim, 'sum', multiplier=mask)"),
}


def _kernelbench(tmp_path: Path, name: str, batch: int, n: int) -> Path:
    args, body, inputs, _, _ = FORMS[name]
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(KERNELBENCH).lstrip().format(
        args=args, body=body, inputs=inputs, batch=batch, n=n))
    return path


def _problem(tmp_path: Path, name: str, body: str, x: str, m: str = "torch.rand(1)") -> Path:
    """A problem with inputs ``x`` and ``m`` whose forward is ``body``."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(f'''
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def forward(self, x, m):
                {body}


        def get_inputs():
            return [{x}, {m}]


        def get_init_inputs():
            return []
        ''').lstrip())
    return path


def _candidates(path: Path, device: str = "cuda"):
    ctx = search_context(load_problem(path), device)
    assert ctx.trace_error is None and ctx.traced is not None, ctx.trace_error
    return ctx, {c.name: c for c in generate_candidates(ctx)[0]}


def _forward(cand) -> str:
    return cand.source.split("def forward")[1]


def _computes_the_reference(path: Path, cand, inputs, init=()):
    """The candidate file, built like the reference, gives the reference's output on
    ``inputs`` (the kernel under the interpreter; the CPU reference sums in another
    order: close, not equal)."""
    sol = path.with_name(path.stem + "_cand.py")
    sol.write_text(cand.source)
    ref, new = import_file(path).Model(*init), import_file(sol).ModelNew(*init)
    with torch.no_grad():
        want, got = ref(*inputs), new(*inputs)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(FORMS))
def test_kernelbench_s_scans_at_their_size(tmp_path, name):
    path = _kernelbench(tmp_path, name, 32768, 32768)
    ctx, cands = _candidates(path)
    kind = "cumprod" if name == "90_cumprod" else "cumsum"
    width = 32767 if name == "92_cumsum_exclusive" else 32768  # the narrowed scan's
    folded, call = FORMS[name][3], FORMS[name][4]
    assert [m.description for m in ctx.matches] == [
        f"{kind} over dim 1 of (32768, {width}) float32{folded} → cumulative (ATen's order)"]
    lib = cands["library"]
    assert lib.language == "triton"
    forward = _forward(lib)
    assert f"scanned = {call}" in forward and "return scanned" in forward
    # the folded forms' own calls are gone: one read, one write
    for eager in ("flip", "narrow", "torch.cat", "zeros_like", " * "):
        assert eager not in forward, (name, eager)
    assert ("fusion" in lib.levers) == bool(folded)
    # on a CPU the kernel would only run under the interpreter: not offered
    ctx, cands = _candidates(path, "cpu")
    assert not ctx.matches and "library" not in cands


@pytest.mark.parametrize("body, x, why", [
    ("return torch.cumsum(x, 1, dtype=torch.float64)", "torch.rand(8, 64)",
     "a dtype that casts"),
    ("return x.cumprod(1, dtype=torch.float16)", "torch.rand(8, 64)", "a method's dtype"),
    ("return torch.cumsum(x, 1)", "torch.randint(0, 9, (8, 64))", "integers"),
    ("return torch.cumsum(x, 1)", "torch.rand(1, 64)", "one row"),
    ("return torch.cumsum(x, 0)", "torch.rand(64)", "one row, 1-d"),
    ("return torch.cumsum(x.narrow(1, 0, x.size(1) - 1), 1)", "torch.rand(1, 64)",
     "the narrowed scan is one row"),
    ("return torch.logcumsumexp(x, 1)", "torch.rand(8, 64)", "not a sum or a product"),
    ("return torch.cummax(x, 1).values", "torch.rand(8, 64)", "not a sum or a product"),
])
def test_what_would_change_the_result_is_left_alone(tmp_path, body, x, why):
    ctx, cands = _candidates(_problem(tmp_path, "other", body, x))
    assert not [m for m in ctx.matches if m.kind == "cumulative"], why
    assert "library" not in cands, why


def test_a_same_dtype_dtype_argument_is_the_plain_scan(tmp_path):
    path = _problem(tmp_path, "same", "return torch.cumsum(x, 1, dtype=torch.float32)",
                    "torch.rand(8, 64)")
    ctx, cands = _candidates(path)
    assert [m.description for m in ctx.matches] == [
        "cumsum over dim 1 of (8, 64) float32 → cumulative (ATen's order)"]
    _computes_the_reference(path, cands["library"], [torch.rand(6, 40), torch.rand(1)])


# what cannot be folded: the scan is still replaced, the prologue/epilogue left to PyTorch
@pytest.mark.parametrize("body, m, kept, why", [
    ("return torch.cumsum(x * m, 1)", "torch.rand(64)", "mul = x * m",
     "the multiplier broadcasts"),
    ("return torch.cumsum(x * m, 1)", "torch.rand(8, 64).double()", "mul = x * m",
     "the product promotes (an fp64 scan of x * m)"),
    ("y = x * m\n                return torch.cumsum(y, 1) + y", "torch.rand(8, 64)",
     "add = scanned + mul", "the product has another reader"),
    ("return torch.cumsum(x.flip(0), 1).flip(0)", "torch.rand(1)", "flip_1 = scanned.flip(0)",
     "flips over another dim"),
    ("return torch.cumsum(x.flip(1), 1).flip(0)", "torch.rand(1)", "flip_1 = scanned.flip(0)",
     "the outer flip over another dim"),
    ("y = x.flip(1)\n                return torch.cumsum(y, 1).flip(1) + y",
     "torch.rand(8, 64)", "flip_1 = scanned.flip(1)", "the inner flip has another reader"),
    ("c = torch.cumsum(x.narrow(1, 0, x.size(1) - 1), 1)\n"
     "                return torch.cat((torch.ones_like(x[:, :1]), c), 1)", "torch.rand(1)",
     "torch.cat", "ones in front, not zeros"),
    ("c = torch.cumsum(x.narrow(1, 1, x.size(1) - 1), 1)\n"
     "                return torch.cat((torch.zeros_like(x[:, :1]), c), 1)", "torch.rand(1)",
     "torch.cat", "the narrow drops the first element"),
])
def test_what_cannot_be_folded_stays_beside_the_scan(tmp_path, body, m, kept, why):
    path = _problem(tmp_path, "unfolded", body, "torch.rand(8, 64)", m)
    ctx, cands = _candidates(path)
    [match] = [mm for mm in ctx.matches if mm.kind == "cumulative"]
    # a narrow not folded: its scan is of 63 (the narrowed length)
    assert match.description.startswith("cumsum over dim 1 of (8, 6"), why
    assert "," not in match.description.split(" float")[1], (why, match.description)
    forward = _forward(cands["library"])
    assert "cumulative(" in forward and kept in forward, (why, forward)
    for kw in ("multiplier=", "reverse=", "exclusive="):
        assert kw not in forward, (why, kw)
    x = torch.rand(6, 40)
    mm = {"torch.rand(64)": torch.rand(40), "torch.rand(8, 64)": torch.rand(6, 40),
          "torch.rand(8, 64).double()": torch.rand(6, 40).double(),
          "torch.rand(1)": torch.rand(1)}[m]
    _computes_the_reference(path, cands["library"], [x, mm])


def test_the_folded_forms_compute_the_reference(tmp_path):
    """Generated at KernelBench's (large) sizes, the files are shape-generic: at small
    sizes they give the reference's output (interpreter), for another dim too."""
    torch.manual_seed(0)
    for name in FORMS:
        path = _kernelbench(tmp_path, name, 32768, 32768)
        _, cands = _candidates(path)
        x = torch.rand(6, 40, 3) * 2 - 1
        inputs = [x, torch.rand(x.shape) < 0.5] if name == "93_masked_cumsum" else [x]
        if name == "90_cumprod":
            inputs = [0.9 + 0.2 * torch.rand(6, 40, 3)]
        _computes_the_reference(path, cands["library"], inputs, init=(1,))


@pytest.fixture(scope="module")
def ev():
    # one judge for both problems below: a judge's start (its process and its runner
    # zygote, each importing torch) is 6-7 s of CPU
    with Evaluator(interpreted_options()) as e:
        yield e


@pytest.mark.parametrize("name", ["93_masked_cumsum", "92_cumsum_exclusive"])
def test_the_candidate_passes_the_evaluator(ev, tmp_path, name):
    """A problem small enough for the interpreter: the real evaluator (fresh inputs,
    held-out checks, anti-cheat) passes it."""
    path = _kernelbench(tmp_path, name, 4, 300)
    ctx, cands = _candidates(path)
    assert FORMS[name][3] in ctx.matches[0].description
    sol = tmp_path / "solution.py"
    sol.write_text(cands["library"].source)
    assert f"scanned = {FORMS[name][4]}" in sol.read_text()
    r = ev.evaluate(load_problem(path), sol)
    assert r.status is Status.PASSED, r.message
    assert r.language == "triton"
    assert "torch_fallback" not in r.flags and "calls_reference" not in r.flags
