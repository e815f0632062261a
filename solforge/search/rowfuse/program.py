"""The nouns of a row program: what the classifier (``classify.py``) finds in a traced
forward and the code generator (``codegen.py``) writes as one Triton kernel.

Every tensor of a row program has a :class:`Kind` relative to one row space: the inputs'
leading dims multiplied are the rows, their last dim is ``N``. A :class:`Value` is one
tensor or number of the forward as the kernel holds it, for a tile of ``BLOCK_M`` rows (a
``[BLOCK_M, BLOCK_N]`` tile for ROW, ``[1, BLOCK_N]`` for COL, ``[BLOCK_M, 1]`` for ROWSTAT,
a number for SCALAR); a :class:`Step` computes one
reference node; a :class:`Source` is what the forward passes the kernel (an input or a
parameter).

Not covered: anything the classifier refuses (it says why); the code's text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch
import torch.fx as fx

from solforge.search.trace import AttrRef


class Refused(Exception):
    """The forward is not a row program; the message says why (for the search log)."""


class Kind(str, Enum):
    ROW = "row"          # (*lead, N): the whole tensor
    ROWSTAT = "rowstat"  # (*lead, 1) or (*lead): a number per row
    COL = "col"          # (N,): a number per column
    SCALAR = "scalar"    # a Python number or a 0-d tensor


@dataclass(frozen=True)
class Value:
    """A tensor or number of the forward as the kernel holds it (in fp32, or bool)."""

    name: str                  # its name in the generated code (the fx node's)
    kind: Kind
    dtype: torch.dtype | None  # the reference's dtype; None: a Python number
    keepdim: bool = True       # ROWSTAT: (*lead, 1); False: (*lead)
    flat: bool = False         # ROW/ROWSTAT: the leading dims merged (a view(-1, N))


@dataclass(frozen=True)
class Const:
    """A number operand: a literal (``text`` is its source), a module attribute (passed
    to the kernel as an argument named ``text``), or the row length ``N``."""

    text: str
    value: Any
    attr: AttrRef | None = None


Operand = Value | Const


@dataclass(frozen=True)
class Source:
    """A tensor or number the forward hands the kernel: a forward input (``placeholder``)
    or a module parameter (``param``, its qualified name)."""

    value: Value
    placeholder: str | None = None
    param: str | None = None


@dataclass(frozen=True)
class Step:
    """One reference node, computed in the kernel: ``op`` (a name of ``kernel_ops.py``)
    of ``args`` into ``out``. ``node`` is the reference node (for comments)."""

    out: Value
    op: str
    args: tuple[Operand, ...]
    node: fx.Node = field(compare=False)
    options: tuple[tuple[str, Any], ...] = ()

    def option(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)


@dataclass(frozen=True)
class Stored:
    """A per-row output the kernel writes: the output node, and the value it holds (a
    view's is the value it views)."""

    node: str
    value: Value


# the column reductions: accumulated in fp32 across a program's rows
COLUMN_OPS = ("colsum", "colmean")
# the steps that reduce over a row (a row's numbers summed, or its max)
ROW_REDUCING_OPS = ("rowsum", "rowmean", "rowmax", "rowmin", "softmax", "log_softmax",
                    "layer_norm")


@dataclass
class RowProgram:
    """A whole forward as one row program (see the module docstring)."""

    sources: list[Source]          # inputs and parameters the kernel reads, in order
    steps: list[Step]              # in graph order: the kernel's work
    stored: list[Stored]           # ROW/ROWSTAT outputs the kernel writes
    attrs: list[Const]             # module numbers and number inputs the kernel takes
    n_max: int                     # the longest row at the traced workloads
    row_input: str = ""            # the input whose shape defines the row space

    @property
    def column_steps(self) -> list[Step]:
        return [s for s in self.steps if s.op in COLUMN_OPS]

    @property
    def has_reduction(self) -> bool:
        """A column reduction or a reduction over a row: where one kernel beats
        TorchInductor (a pure pointwise graph it already fuses at the roofline)."""
        return any(s.op in COLUMN_OPS or s.op in ROW_REDUCING_OPS for s in self.steps)
