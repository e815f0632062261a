"""Is a traced forward, whole, one row program? :func:`classify` answers with a
:class:`~solforge.search.rowfuse.program.RowProgram` or the reason it is not.

Structural, not by a formula's spelling: every value gets a kind (``program.Kind``)
from its inputs' kinds and its operation, and its example shape must be the one that
kind predicts. The inputs' kinds come from their shapes at every traced workload, and
must be unambiguous there (a 1-D input of 4096 elements beside 4096 x 4096 rows could be
a column vector or a per-row value: refused where no workload tells them apart).

The operations (``nodes.op``'s names): pointwise arithmetic with broadcasting between
the kinds (the ops of ``kernel_ops.py``), casts between fp32, fp16 and bf16 (and from
bool), sums, means, maxima and minima over the last dim, sums and means over all leading
dims (a column reduction), softmax, log-softmax and layer norm over the last dim, views
that only merge or keep the leading dims, parameters and module numbers. Values computed
from a column reduction are left to PyTorch after the kernel (they are per column).

Not covered (refused, with the reason): matmuls, indexing, concatenation, reductions over
other dims or over everything, a row value computed from a column reduction (a second
pass), views that split the leading dims or change the last, in-place ops, fp64 and
integer tensors, bool inputs, leading sizes read in the forward, rows longer than
``MAX_N`` or shorter than 2, inputs whose leading dims differ.
"""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Any

import torch
import torch.fx as fx

from solforge.search.nodes import op, tensor
from solforge.search.rowfuse.codegen import RESERVED
from solforge.search.rowfuse.operations import read_step
from solforge.search.rowfuse.program import (
    COLUMN_OPS,
    Const,
    Kind,
    Operand,
    Refused,
    RowProgram,
    Source,
    Step,
    Stored,
    Value,
)
from solforge.search.trace import AttrRef

# the whole row in registers: beyond this a row's registers spill (GPU survey: the
# training kernels this imitates keep rows of up to 16k)
MAX_N = 16384
FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _kinds_of(shape: tuple[int, ...], lead: tuple[int, ...], n: int) -> set[tuple]:
    """Every (kind, keepdim) an input of ``shape`` can have in the row space."""
    out = set()
    if shape == (*lead, n):
        out.add((Kind.ROW, True))
    if shape == (*lead, 1):
        out.add((Kind.ROWSTAT, True))
    if shape == lead:
        out.add((Kind.ROWSTAT, False))
    if shape == (n,):
        out.add((Kind.COL, True))
    if shape == ():
        out.add((Kind.SCALAR, True))
    return out


def _row_space(shapes: list[tuple | None]) -> tuple[tuple[int, ...], int]:
    widest = max((s for s in shapes if s is not None), key=len, default=())
    if len(widest) < 2:
        raise Refused("no input has rows (a tensor of 2 dims or more)")
    return tuple(widest[:-1]), widest[-1]


def _name(text: str) -> str:
    return text.replace(".", "_")


class _Classifier:
    def __init__(self, graph: fx.Graph, workload_shapes: list[list[tuple | None]]) -> None:
        self.graph = graph
        self.ph = [n for n in graph.nodes if n.op == "placeholder"]
        example = [tuple(tensor(p).shape) if tensor(p) is not None else None for p in self.ph]
        self.shapes = [example, *workload_shapes]
        self.lead, self.n = _row_space(example)
        self.rows = 1
        for d in self.lead:
            self.rows *= d
        self.vals: dict[fx.Node, Any] = {}
        self.after_col: set[fx.Node] = set()  # per-column values PyTorch computes after
        self.sources: dict[str, Source] = {}
        self.attrs: dict[str, Const] = {}
        self.steps: list[Step] = []
        self.recording = True  # False while a node computed after the kernel is read

    # -- inputs --------------------------------------------------------------------------
    def placeholder(self, n: fx.Node, i: int) -> Any:
        t = tensor(n)
        if t is None:
            v = n.meta.get("val")
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return self._attr(Const(n.name, v))
            return None  # None or a flag: the trace guards it; the kernel never reads it
        kinds = None
        for shapes in self.shapes:
            if i >= len(shapes) or shapes[i] is None:
                continue
            lead, n_w = _row_space(shapes)
            if not 2 <= n_w <= MAX_N:
                raise Refused(f"rows of {n_w} elements at a traced workload (2 to {MAX_N})")
            k = _kinds_of(shapes[i], lead, n_w)
            kinds = k if kinds is None else kinds & k
        if not kinds or len(kinds) > 1:
            raise Refused(f"input {n.name} of shape {tuple(t.shape)} is "
                          + ("no row, row stat, column or scalar" if not kinds else
                             "ambiguous (its size equals the row count at every traced "
                             "workload)"))
        (kind, keepdim), = kinds
        return self._source(Value(n.name, kind, self._dtype(n, t), keepdim),
                            placeholder=n.name)

    def param(self, path: str, t: torch.Tensor) -> Value:
        if path in self.sources:
            return self.sources[path].value
        kind = Kind.COL if tuple(t.shape) == (self.n,) else \
            Kind.SCALAR if t.dim() == 0 else None
        if kind is None:
            raise Refused(f"parameter {path} of shape {tuple(t.shape)} is no column vector")
        return self._source(Value(_name(path), kind, self._dtype(path, t)), param=path)

    def _source(self, v: Value, **where: str) -> Value:
        if v.dtype == torch.bool:
            raise Refused(f"input {v.name} is bool (only computed masks are covered)")
        self.sources[where.get("param") or v.name] = Source(v, **where)
        return v

    def _attr(self, c: Const) -> Const:
        return self.attrs.setdefault(c.text, c)

    # -- operands ------------------------------------------------------------------------
    def operand(self, a: Any) -> Operand:
        if isinstance(a, fx.Node):
            v = self.vals.get(a)
            if not isinstance(v, (Value, Const)):
                raise Refused(f"{a.name} is no tensor or number the kernel can hold")
            return v
        if isinstance(a, AttrRef) and isinstance(a.value, (int, float)):
            # the kernel's argument: the attribute's name, unless an input or another
            # attribute expression has it
            name = _name(a.name) if not a.source else f"attr_{len(self.attrs)}"
            taken = {p.name for p in self.ph}
            if name in taken or self.attrs.get(name, Const(name, a.value, a)).attr != a:
                name = f"self_{name}_{len(self.attrs)}"
            return self._attr(Const(name, a.value, a))
        if isinstance(a, bool):
            return Const(repr(a), a)
        if isinstance(a, (int, float)):
            return Const(repr(float(a)), a)
        raise Refused(f"an operand {a!r} the kernel cannot hold")

    @staticmethod
    def _dtype(where: Any, t: torch.Tensor) -> torch.dtype:
        if t.dtype not in FLOATS and t.dtype != torch.bool:
            raise Refused(f"{getattr(where, 'name', where)} has dtype {t.dtype} (fp32, fp16, "
                          "bf16 or a bool mask)")
        return t.dtype

    def expect(self, n: fx.Node, v: Value, t: torch.Tensor | None = None) -> Value:
        """``v`` with the node's dtype (of ``t``, default its value), after checking its
        shape is the kind's."""
        t = tensor(n) if t is None else t
        if t is None:
            raise Refused(f"{n.name} is no tensor")
        lead = (self.rows,) if v.flat else self.lead
        want = {Kind.ROW: (*lead, self.n), Kind.COL: (self.n,), Kind.SCALAR: (),
                Kind.ROWSTAT: (*lead, 1) if v.keepdim else lead}[v.kind]
        if tuple(t.shape) != want:
            raise Refused(f"{n.format_node()}: shape {tuple(t.shape)}, not its kind's "
                          f"({v.kind.value}, {want})")
        return replace(v, dtype=self._dtype(n, t))

    def combine(self, n: fx.Node, args: list[Operand]) -> Value:
        """The kind of a pointwise result, by broadcasting its operands' kinds."""
        vs = [a for a in args if isinstance(a, Value) and a.kind is not Kind.SCALAR]
        kinds = {v.kind for v in vs}
        stats = {v.keepdim for v in vs if v.kind is Kind.ROWSTAT}
        if False in stats and (len(stats) > 1 or kinds - {Kind.ROWSTAT}):
            raise Refused(f"{n.format_node()}: a per-row value without its kept dim "
                          "broadcasts against the columns")
        flats = {v.flat for v in vs if v.kind in (Kind.ROW, Kind.ROWSTAT)}
        if len(flats) > 1:
            raise Refused(f"{n.format_node()}: mixes merged and unmerged leading dims")
        if Kind.ROW in kinds or {Kind.COL, Kind.ROWSTAT} <= kinds:
            kind = Kind.ROW
        else:
            kind = next(iter(kinds)) if kinds else Kind.SCALAR
        return self.expect(n, Value(n.name, kind, None, stats != {False},
                                     flats == {True}))

    # -- nodes ---------------------------------------------------------------------------
    def node(self, n: fx.Node) -> Any:
        if n.op == "get_attr":
            t = tensor(n)
            if t is None:
                raise Refused(f"attribute {n.target} is no tensor")
            return self.param(str(n.target), t)
        if n.op == "call_function" and (n.target is torch._assert or n.target in (
                operator.is_, operator.is_not)) or (op(n) in ("eq", "ne") and
                                                    tensor(n) is None):
            return None  # the trace's guards: PyTorch runs them before the kernel
        base = self.vals.get(n.args[0]) if n.args else None
        if n.op == "call_function" and n.target is getattr:
            if n.args[1] == "shape":
                return ("shape", n.args[0])
            if n.args[1] == "values" and isinstance(base, dict):
                return base["values"]
        o = op(n)
        if o == "size" or o == "getitem" and isinstance(base, tuple):
            return self.size(n)
        if o == "getitem":
            if isinstance(base, dict) and n.args[1] == 0:
                return base["values"]
            raise Refused(f"{n.format_node()}: indexing")
        if o is None:
            raise Refused(f"{n.format_node()}: not a row-program operation")
        from_col = any(a in self.after_col for a in n.all_input_nodes)
        self.recording = not from_col
        v = read_step(self, n, o)
        self.recording = True
        if from_col:
            if not isinstance(v, Value) or v.kind in (Kind.ROW, Kind.ROWSTAT):
                raise Refused(f"{n.format_node()}: a row value from a column reduction "
                              "(it needs a second pass)")
            self.after_col.add(n)
        return v

    def size(self, n: fx.Node) -> Const:
        """``x.shape[-1]`` or ``x.size(-1)``: the row length; leading sizes are refused."""
        base = n.args[0]
        src = self.vals.get(base)[1] if isinstance(self.vals.get(base), tuple) else base
        idx = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
        if op(n) == "size" and idx is None:
            return ("shape", base)
        t = tensor(src)
        if t is not None and isinstance(idx, int) and idx in (-1, t.dim() - 1):
            return Const("N", self.n)
        raise Refused(f"{n.format_node()}: reads a size other than the row length")

    def add(self, n: fx.Node, op_name: str, args: list[Operand | None], out: Value,
            **options: Any) -> Value:
        """Record the step computing ``out`` (unless PyTorch computes it after the kernel:
        then its node is only classified); a column reduction's result is such a value's
        start."""
        if self.recording:
            self.steps.append(Step(out, op_name, tuple(args), n, tuple(options.items())))
        if op_name in COLUMN_OPS:
            self.after_col.add(n)
        return out

    # -- the program ---------------------------------------------------------------------
    def run(self) -> RowProgram:
        for i, p in enumerate(self.ph):
            self.vals[p] = self.placeholder(p, i)
        outputs: list[Any] = []
        for n in self.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                outputs = list(n.args[0]) if isinstance(n.args[0], (tuple, list)) \
                    else [n.args[0]]
                continue
            if not n.users and n.target is not torch._assert:
                continue  # dead (an unused max's indices): nothing reads it
            self.vals[n] = self.node(n)
        stored = []
        for o in outputs:
            v = self.vals.get(o) if isinstance(o, fx.Node) else None
            if not isinstance(v, Value) and not isinstance(o, fx.Node):
                raise Refused(f"the forward returns {o!r}, not a tensor")
            if isinstance(v, Value) and v.kind in (Kind.ROW, Kind.ROWSTAT):
                if v.dtype not in FLOATS:
                    raise Refused(f"output {o.name} has dtype {v.dtype}")
                if o.name not in {st.node for st in stored}:
                    stored.append(Stored(o.name, v))
        return self.program(stored)

    def program(self, stored: list[Stored]) -> RowProgram:
        """The steps the stored values and the column reductions need, and their inputs."""
        clash = {v.name for v in self.vals.values() if isinstance(v, Value)} & RESERVED
        if clash:
            raise Refused(f"a value named {sorted(clash)[0]!r}, a name the kernel binds")
        used = {st.value.name for st in stored}
        live = []
        for s in reversed(self.steps):
            if s.out.name in used or s.op in COLUMN_OPS:
                live.append(s)
                used |= {a.name for a in s.args if isinstance(a, Value)}
        live.reverse()
        sources = [s for s in self.sources.values() if s.value.name in used]
        rows = [s for s in sources if s.value.kind is Kind.ROW]
        if not rows:
            raise Refused("the kernel would read no row input")
        n_max = max(_row_space(s)[1] for s in self.shapes)
        attrs = [c for c in self.attrs.values()
                 if any(c in s.args for s in live)]
        return RowProgram(sources=sources, steps=live, stored=stored, attrs=attrs,
                          n_max=n_max, row_input=rows[0].value.name)


def classify(graph: fx.Graph, workload_shapes: list[list[tuple | None]] = ()
             ) -> tuple[RowProgram | None, str]:
    """``(program, "")`` when ``graph`` (a traced forward, ``trace.py``) is one row
    program; ``(None, reason)`` when not. ``workload_shapes``: the forward's input shapes
    (None for a non-tensor) at each other traced workload, to check the row lengths and
    the inputs' kinds there too."""
    try:
        return _Classifier(graph, list(workload_shapes)).run(), ""
    except Refused as e:
        return None, str(e)
