"""Compositions of 1 to 5 catalogue ops into one KernelBench-format problem, from a seed.

Draw ``i`` of seed ``s`` uses its own ``random.Random("solforge-synth:s:i")`` (string seeds
hash the same in every process), so a draw does not depend on the draws before it, and the
source is emitted from sorted, plain data only: the same seed gives the same bytes.

A draw picks an input layout (``vec`` ``(batch, d0)``, ``seq`` ``(batch, seq, d0)``, ``sig``
``(batch, d0, length)`` or ``img`` ``(batch, d0, height, width)``), a precision (fp32, or
bf16 for a quarter of the draws whose ops all take it), then up to ``max_ops`` ops each
accepting the shape the previous one left (an op is not drawn twice in a row; the first
is a GEMM or convolution half the time when one applies).

Every problem has four workloads: ``cpu_small`` (visible) and ``cpu_odd`` (held out, odd
sizes) that run on a CPU in milliseconds, ``gpu_medium`` (visible; also the defaults of
``get_inputs``/``get_init_inputs``, KernelBench's single workload) and ``gpu_large`` (held
out). Inputs are ``torch.randn`` (signed, unit scale), so the code stays a plain
KernelBench module for other harnesses; ``distributions`` is ``["normal", "outliers"]``:
under ``outliers`` the evaluator's ``torch.randn`` draws carry 0.1% spikes of 30x
(``problems/gen.py``), so correctness runs two distributions.

Not covered: FLOP and byte counts (the SOL bound of a synthesized problem falls back to
what the evaluator measures), backward problems, and multiple outputs.
"""

from __future__ import annotations

import pprint
import random
import re
from dataclasses import dataclass

from solforge.synth.catalogue import (
    CHANNELS,
    WIDTHS,
    Dim,
    Op,
    State,
    Step,
    catalogue,
    param_names,
)

TIERS = ("cpu_small", "cpu_odd", "gpu_medium", "gpu_large")
TIER_FLAGS = {"cpu_small": {"cpu": True}, "cpu_odd": {"cpu": True, "visible": False},
               "gpu_medium": {}, "gpu_large": {"visible": False}}
DEFAULT_TIER = "gpu_medium"

# layout -> (dims of the input, sizes per tier of its fixed parameters, table of d0)
LAYOUTS: dict[str, tuple[tuple[str, ...], dict[str, tuple[int, ...]], list[tuple[int, ...]]]] = {
    "vec": (("batch", "d0"), {"batch": (4, 3, 256, 2048)}, WIDTHS),
    "seq": (("batch", "seq", "d0"), {"batch": (2, 1, 8, 16), "seq": (5, 7, 512, 2048)}, WIDTHS),
    "sig": (("batch", "d0", "length"), {"batch": (2, 3, 16, 32), "length": (12, 17, 1024, 4096)},
            CHANNELS),
    "img": (("batch", "d0", "height", "width"),
            {"batch": (2, 1, 16, 32), "height": (8, 9, 64, 128), "width": (8, 11, 64, 96)},
            CHANNELS),
}
BF16_SHARE = 0.25


@dataclass(frozen=True)
class Composition:
    """One drawn problem: its ops and steps, and every parameter's size per tier."""

    seed: int
    index: int
    layout: str
    ops: tuple[str, ...]
    precision: str
    steps: tuple[Step, ...]
    input_shape: tuple[Dim, ...]
    sizes: dict[str, dict[str, int]]

    @property
    def name(self) -> str:
        slug = re.sub(r"[^0-9a-z]+", "_", "_".join(self.ops))[:60].strip("_")
        return f"synth_s{self.seed}_{self.index:05d}_{slug}"

    def code(self) -> str:
        """The KernelBench module (no SOLFORGE dict): what the jsonl row carries."""
        return emit(self)

    def meta(self) -> dict:
        """The SOLFORGE dict of the problem file."""
        return {
            "name": self.name, "category": "synth", "models": ["synthetic"],
            "family": "synthetic", "precision": self.precision,
            "description": f"synthesized composition ({self.layout} input): "
                           + " -> ".join(self.ops),
            "shapes_from": f"synth seed {self.seed}", "distributions": ["normal", "outliers"],
            "workloads": [{"name": t, "params": dict(self.sizes[t]), **TIER_FLAGS[t]}
                          for t in TIERS],
            "origin": {"format": "solforge-synth", "seed": str(self.seed),
                       "draw": str(self.index), "ops": ", ".join(self.ops),
                       "license": "Apache-2.0"},
        }

    def problem_text(self) -> str:
        """The problem file: the module, then its SOLFORGE dict."""
        return with_meta(self.code(), self.meta())


def with_meta(code: str, meta: dict) -> str:
    """``code`` with ``SOLFORGE = meta`` appended (deterministic: insertion order kept)."""
    return code.rstrip() + "\n\n\nSOLFORGE = " + pprint.pformat(meta, sort_dicts=False,
                                                                 width=96) + "\n"


def draw(seed: int, index: int, ops: list[str] | None = None, max_ops: int = 5
         ) -> Composition | None:
    """Draw ``index`` of ``seed``: a composition of 1 to ``max_ops`` ops drawn from ``ops``
    (default: the whole catalogue), or None when no op accepts the drawn input."""
    if not 1 <= max_ops <= 5:
        raise ValueError(f"max_ops must be 1 to 5, got {max_ops}")
    rng = random.Random(f"solforge-synth:{seed}:{index}")
    pool = catalogue(ops)
    layout = sorted(LAYOUTS)[rng.randrange(len(LAYOUTS))]
    dims, fixed, d0_table = LAYOUTS[layout]
    d0 = d0_table[rng.randrange(len(d0_table))]
    per_param = {**fixed, "d0": d0}
    sizes = {t: {p: per_param[p][i] for p in sorted(per_param)} for i, t in enumerate(TIERS)}
    shape = tuple(Dim(d, channels=(d == "d0")) for d in dims)
    precision = "bf16" if rng.random() < BF16_SHARE else "fp32"
    pool = [op for op in pool if precision in op.dtypes]
    state = State(shape, shape, sizes)
    steps: list[Step] = []
    names: list[str] = []
    for slot in range(rng.randint(1, max_ops)):
        fits = [op for op in pool if (not names or op.name != names[-1]) and op.applies(state)]
        heavy = [op for op in fits if op.heavy]
        if slot == 0 and heavy and rng.random() < 0.5:
            fits = heavy
        if not fits:
            break
        op: Op = fits[rng.randrange(len(fits))]
        step = op.build(state, rng, slot)
        steps.append(step)
        names.append(op.name)
        grown = {t: {**state.sizes[t], **{p: v[i] for p, v in step.new_params.items()}}
                 for i, t in enumerate(TIERS)}
        state = State(step.shape, state.input_shape, grown)
    if not steps:
        return None
    return Composition(seed, index, layout, tuple(names), precision, tuple(steps), shape,
                       state.sizes)


def _shape_text(shape: tuple[Dim, ...]) -> str:
    return "(" + ", ".join(d.expr for d in shape) + ")"


def _params_of(shapes: list[tuple[Dim, ...]]) -> list[str]:
    return sorted({n for s in shapes for d in s for n in param_names(d.expr)}, key=_param_order)


def _param_order(name: str) -> tuple[int, str]:
    order = ["batch", "seq", "length", "height", "width"]
    return (order.index(name), "") if name in order else (len(order), f"{name:>8}")


def emit(c: Composition) -> str:
    """The source of ``c``'s module, line by line from its plain data."""
    medium = c.sizes[DEFAULT_TIER]
    bf16 = c.precision == "bf16"
    dtype = ", dtype=torch.bfloat16" if bf16 else ""
    init_params = sorted({p for s in c.steps for p in s.init_params}, key=_param_order)
    extras = [(n, shp) for s in c.steps for n, shp in s.extra_inputs]
    input_params = _params_of([c.input_shape] + [shp for _, shp in extras])

    def sig(params: list[str]) -> str:
        return ", ".join(f"{p}: int = {medium[p]}" for p in params)

    uses_input = any("x0" in line for s in c.steps for line in s.forward)
    doc = (f'"""Synthesized by solforge synth (seed {c.seed}, draw {c.index}): '
           f'{" -> ".join(c.ops)}."""')
    lines = [doc, "", "import torch", "import torch.nn as nn",
             "import torch.nn.functional as F", "", "", "class Model(nn.Module):",
             f"    def __init__(self{', ' if init_params else ''}{sig(init_params)}):",
             "        super().__init__()"]
    lines += [f"        {line}" for s in c.steps for line in s.init]
    if bf16:
        lines.append("        self.to(torch.bfloat16)")
    args = ", ".join(["x", *(n for n, _ in extras)])
    lines += ["", f"    def forward(self, {args}):"]
    lines += ["        x0 = x"] if uses_input else []
    for s in c.steps:
        for line in s.forward:
            lines.append(f"        {line}  # {_shape_text(s.shape)}")
    lines += ["        return x", "", "", f"def get_inputs({sig(input_params)}):",
              "    return [" + ", ".join(
                  f"torch.randn({', '.join(d.expr for d in shp)}{dtype})"
                  for shp in [c.input_shape] + [shp for _, shp in extras]) + "]",
              "", "", f"def get_init_inputs({sig(init_params)}):",
              f"    return [{', '.join(init_params)}]", ""]
    return "\n".join(lines)
