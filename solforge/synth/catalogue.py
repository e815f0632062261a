"""The operator catalogue: torch and ``nn`` ops with their shape, dtype and parameter rules.

A tensor flowing through a composition has a symbolic shape: a tuple of :class:`Dim`, each
a Python expression of workload parameters (``"d0"``, ``"height // 2"``, ``"8"``). Every
workload gives each parameter a number, so an op's rule (:meth:`Op.applies`) can ask for
the smallest and largest size a dimension takes over all workloads (a top-k needs k
entries in every workload; a group norm needs channels the groups divide in every one).

An :class:`Op` turns the current :class:`State` into a :class:`Step`: the lines it adds
to ``Model.__init__`` (its ``nn`` layers and parameters, sized by parameter names) and to
``forward`` (on the variable ``x``), the shape it leaves, the new parameters it introduces
(an output width: one size per workload) and any extra forward input it needs.

Built-in ops and plug-ins share one door: :func:`register_op` (or a row of ``OPS`` naming
``"module:attr"``), read through :func:`catalogue`; a package may also expose an
``solforge.synth_ops`` entry point (an :class:`Op`, or a function that registers some).

Not covered: ops with integer or boolean outputs (argmax, comparisons), ops whose output
shape depends on the data (nonzero, unique), random ops (dropout: the filters would
reject them), and complex dtypes.
"""

from __future__ import annotations

import ast
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points

from solforge.registry import lookup

FLOAT_DTYPES = frozenset({"fp32", "bf16"})


@dataclass(frozen=True)
class Dim:
    """One dimension: a Python expression of workload parameters."""

    expr: str
    channels: bool = False   # a multiple of 8 in every workload (groups may split it)


@dataclass(frozen=True)
class State:
    """What the next op sees: the current shape, the first input's shape, and the sizes
    of every parameter in every workload (``sizes[workload][param]``)."""

    shape: tuple[Dim, ...]
    input_shape: tuple[Dim, ...]
    sizes: dict[str, dict[str, int]]

    def size(self, dim: Dim) -> tuple[int, int]:
        """The smallest and largest size ``dim`` takes over the workloads."""
        # a dim is an expression the ops wrote: parameter names and integer arithmetic
        values = [int(eval(dim.expr, {"__builtins__": {}}, dict(p)))
                  for p in self.sizes.values()]
        return min(values), max(values)

    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Step:
    """What one op adds to the module."""

    init: list[str]                      # lines of __init__ (after super().__init__())
    forward: list[str]                   # lines of forward, reading and writing ``x``
    shape: tuple[Dim, ...]               # the shape after the op
    new_params: dict[str, tuple[int, ...]] = field(default_factory=dict)  # name -> per-workload
    extra_inputs: list[tuple[str, tuple[Dim, ...]]] = field(default_factory=list)
    init_params: list[str] = field(default_factory=list)  # parameters __init__ must take


@dataclass(frozen=True)
class Op:
    """A catalogue entry. ``applies`` says whether the op accepts the current state; ``build``
    writes its step, drawing its own choices (kernel size, dim, constants) from ``rng``."""

    name: str
    kind: str                                            # activation, norm, linear, ...
    applies: Callable[[State], bool]
    build: Callable[[State, random.Random, int], Step]   # (state, rng, slot) -> step
    dtypes: frozenset[str] = FLOAT_DTYPES
    heavy: bool = False                                  # a GEMM or conv: drawn more often first


# -- shape helpers ----------------------------------------------------------------------------
def _any(_: State) -> bool:
    return True


def _rank(lo: int, hi: int = 8) -> Callable[[State], bool]:
    return lambda st: lo <= st.rank() <= hi


def _last_min(n: int) -> Callable[[State], bool]:
    return lambda st: st.rank() >= 2 and st.size(st.shape[-1])[0] >= n


def _pick(options: list, rng: random.Random):
    return options[rng.randrange(len(options))]


# the widths an op may introduce: one size per workload tier (cpu_small, cpu_odd,
# gpu_medium, gpu_large); every one a multiple of 8 so norms' groups divide it
WIDTHS = [(16, 24, 512, 1024), (32, 40, 1024, 2048), (48, 16, 2048, 4096), (24, 8, 256, 512),
          (40, 32, 768, 1536)]
CHANNELS = [(8, 16, 32, 64), (16, 8, 64, 128), (24, 16, 128, 256)]


def _new_dim(st: State, slot: int, table: list[tuple[int, ...]], rng: random.Random
             ) -> tuple[Dim, dict[str, tuple[int, ...]]]:
    name = f"d{slot + 1}"
    return Dim(name, channels=True), {name: _pick(table, rng)}


# -- elementwise ------------------------------------------------------------------------------
def _unary(name: str, expr: str, kind: str = "activation") -> Op:
    def build(st: State, rng: random.Random, slot: int) -> Step:
        return Step([], [f"x = {expr}"], st.shape)
    return Op(name, kind, _any, build)


def _leaky(st: State, rng: random.Random, slot: int) -> Step:
    return Step([], [f"x = F.leaky_relu(x, negative_slope={_pick([0.01, 0.1, 0.2], rng)})"],
                st.shape)


def _clamp(st: State, rng: random.Random, slot: int) -> Step:
    lo, hi = _pick([-2.0, -1.0, -0.5], rng), _pick([0.5, 1.0, 2.0], rng)
    return Step([], [f"x = torch.clamp(x, min={lo}, max={hi})"], st.shape)


def _scalar(op: str) -> Callable[[State, random.Random, int], Step]:
    def build(st: State, rng: random.Random, slot: int) -> Step:
        c = _pick([0.5, 1.5, 2.0, 3.0] if op in "*/" else [-1.0, 0.5, 1.0, 2.0], rng)
        return Step([], [f"x = x {op} {c}"], st.shape)
    return build


def _param(op: str) -> Callable[[State, random.Random, int], Step]:
    # a learned vector along the last dimension, broadcast over the others
    def build(st: State, rng: random.Random, slot: int) -> Step:
        last = st.shape[-1].expr
        init = ("torch.rand({}) + 0.5" if op == "/" else "torch.randn({})").format(last)
        return Step([f"self.p{slot} = nn.Parameter({init})"], [f"x = x {op} self.p{slot}"],
                    st.shape, init_params=param_names(last))
    return build


def _add_input(st: State, rng: random.Random, slot: int) -> Step:
    op = _pick(["+", "*", "-"], rng)
    return Step([], [f"x = x {op} y{slot}"], st.shape, extra_inputs=[(f"y{slot}", st.shape)])


def _residual(st: State, rng: random.Random, slot: int) -> Step:
    return Step([], ["x = x + x0"], st.shape)


# -- softmax, reductions, scans ----------------------------------------------------------------
def _dims_over(st: State, lo: int = 1) -> list[int]:
    return [i for i in range(1, st.rank()) if st.size(st.shape[i])[0] >= lo]


def _softmax(fn: str) -> Callable[[State, random.Random, int], Step]:
    def build(st: State, rng: random.Random, slot: int) -> Step:
        d = _pick(_dims_over(st, 2), rng) - st.rank()
        return Step([], [f"x = {fn}(x, dim={d})"], st.shape)
    return build


def _reduce(fn: str) -> Callable[[State, random.Random, int], Step]:
    def build(st: State, rng: random.Random, slot: int) -> Step:
        d = _pick(_dims_over(st, 2), rng)
        keep = st.rank() <= 2 or rng.random() < 0.5
        shape = st.shape[:d] + ((Dim("1"),) if keep else ()) + st.shape[d + 1:]
        call = {"max": f"torch.max(x, dim={d}, keepdim={keep}).values"}.get(
            fn, f"torch.{fn}(x, dim={d}, keepdim={keep})")
        return Step([], [f"x = {call}"], shape)
    return build


def _cumsum(st: State, rng: random.Random, slot: int) -> Step:
    return Step([], [f"x = torch.cumsum(x, dim={_pick(_dims_over(st), rng)})"], st.shape)


def _topk(st: State, rng: random.Random, slot: int) -> Step:
    k = _pick([2, 4, 8], rng)
    return Step([], [f"x = torch.topk(x, {k}, dim=-1).values"], st.shape[:-1] + (Dim(str(k)),))


def _can_reduce(st: State) -> bool:
    return st.rank() >= 2 and bool(_dims_over(st, 2))


# -- norms ------------------------------------------------------------------------------------
def param_names(expr: str) -> list[str]:
    """The parameter names an expression reads, sorted."""
    return sorted({n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)})


def _layer(name: str, make: Callable[[State, random.Random], tuple[str, tuple[Dim, ...], list[str]]]
           ) -> Callable[[State, random.Random, int], Step]:
    def build(st: State, rng: random.Random, slot: int) -> Step:
        ctor, shape, params = make(st, rng)
        return Step([f"self.{name}{slot} = {ctor}"], [f"x = self.{name}{slot}(x)"], shape,
                    init_params=params)
    return build


def _layer_norm(st: State, rng: random.Random):
    d = st.shape[-1].expr
    return f"nn.LayerNorm({d})", st.shape, param_names(d)


def _rms_norm(st: State, rng: random.Random):
    d = st.shape[-1].expr
    return f"nn.RMSNorm({d}, eps=1e-6)", st.shape, param_names(d)


def _group_norm(st: State, rng: random.Random):
    c = st.shape[1].expr
    return f"nn.GroupNorm({_pick([2, 4, 8], rng)}, {c})", st.shape, param_names(c)


def _batch_norm(st: State, rng: random.Random):
    c = st.shape[1].expr
    return f"nn.BatchNorm{st.rank() - 2}d({c})", st.shape, param_names(c)


def _channels_dim1(st: State) -> bool:
    return st.rank() in (3, 4) and st.shape[1].channels


# -- GEMMs and convolutions -------------------------------------------------------------------
def _linear(st: State, rng: random.Random, slot: int) -> Step:
    new, params = _new_dim(st, slot, WIDTHS, rng)
    d = st.shape[-1].expr
    bias = rng.random() < 0.7
    return Step([f"self.linear{slot} = nn.Linear({d}, {new.expr}, bias={bias})"],
                [f"x = self.linear{slot}(x)"], st.shape[:-1] + (new,), params,
                init_params=sorted({*param_names(d), new.expr}))


def _matmul(st: State, rng: random.Random, slot: int) -> Step:
    new, params = _new_dim(st, slot, WIDTHS, rng)
    d = st.shape[-1].expr
    return Step([f"self.w{slot} = nn.Parameter(torch.randn({d}, {new.expr}) * ({d}) ** -0.5)"],
                [f"x = torch.matmul(x, self.w{slot})"], st.shape[:-1] + (new,), params,
                init_params=sorted({*param_names(d), new.expr}))


def _conv(nd: int) -> Callable[[State, random.Random, int], Step]:
    def build(st: State, rng: random.Random, slot: int) -> Step:
        new, params = _new_dim(st, slot, CHANNELS, rng)
        c = st.shape[1].expr
        smallest = min(st.size(d)[0] for d in st.shape[2:])
        k = _pick([k for k in ((1, 3, 5) if nd == 1 else (1, 3)) if k <= smallest], rng)
        return Step([f"self.conv{slot} = nn.Conv{nd}d({c}, {new.expr}, {k}, padding={k // 2})"],
                    [f"x = self.conv{slot}(x)"], (st.shape[0], new, *st.shape[2:]), params,
                    init_params=sorted({*param_names(c), new.expr}))
    return build


def _conv_applies(nd: int) -> Callable[[State], bool]:
    return lambda st: st.rank() == nd + 2 and st.size(st.shape[1])[1] <= 4096


def _pool(fn: str, nd: int) -> Callable[[State, random.Random, int], Step]:
    def build(st: State, rng: random.Random, slot: int) -> Step:
        shape = (*st.shape[:2], *(Dim(f"({d.expr}) // 2") for d in st.shape[2:]))
        return Step([], [f"x = F.{fn}{nd}d(x, 2)"], shape)
    return build


def _pool_applies(nd: int) -> Callable[[State], bool]:
    return lambda st: st.rank() == nd + 2 and all(st.size(d)[0] >= 4 for d in st.shape[2:])


# -- layout -----------------------------------------------------------------------------------
def _transpose(st: State, rng: random.Random, slot: int) -> Step:
    return Step([], ["x = x.transpose(-1, -2)"], st.shape[:-2] + (st.shape[-1], st.shape[-2]))


def _permute(st: State, rng: random.Random, slot: int) -> Step:
    order = _pick([(0, 2, 3, 1), (0, 3, 1, 2), (0, 2, 1, 3)], rng)
    return Step([], [f"x = x.permute{order}"], tuple(st.shape[i] for i in order))


def _flatten(st: State, rng: random.Random, slot: int) -> Step:
    a, b = st.shape[-2], st.shape[-1]
    merged = Dim(f"({a.expr}) * ({b.expr})", channels=a.channels or b.channels)
    return Step([], ["x = x.flatten(-2)"], st.shape[:-2] + (merged,))


def _builtins() -> dict[str, Op]:
    ops = [
        _unary("relu", "torch.relu(x)"), _unary("gelu", "F.gelu(x)"),
        _unary("gelu_tanh", 'F.gelu(x, approximate="tanh")'), _unary("silu", "F.silu(x)"),
        _unary("tanh", "torch.tanh(x)"), _unary("sigmoid", "torch.sigmoid(x)"),
        _unary("softplus", "F.softplus(x)"), _unary("elu", "F.elu(x)"),
        _unary("selu", "F.selu(x)"), _unary("mish", "F.mish(x)"),
        _unary("hardswish", "F.hardswish(x)"), _unary("abs", "torch.abs(x)", "elementwise"),
        _unary("square", "x * x", "elementwise"),
        Op("leaky_relu", "activation", _any, _leaky),
        Op("clamp", "elementwise", _any, _clamp),
        Op("mul_scalar", "elementwise", _any, _scalar("*")),
        Op("add_scalar", "elementwise", _any, _scalar("+")),
        Op("div_scalar", "elementwise", _any, _scalar("/")),
        Op("mul_param", "broadcast", _rank(2), _param("*")),
        Op("add_param", "broadcast", _rank(2), _param("+")),
        Op("sub_param", "broadcast", _rank(2), _param("-")),
        Op("div_param", "broadcast", _rank(2), _param("/")),
        Op("binary_input", "broadcast", _any, _add_input),
        Op("residual", "broadcast", lambda st: st.shape == st.input_shape, _residual),
        Op("softmax", "softmax", _can_reduce, _softmax("torch.softmax")),
        Op("log_softmax", "softmax", _can_reduce, _softmax("torch.log_softmax")),
        *(Op(f, "reduction", _can_reduce, _reduce(f))
          for f in ("sum", "mean", "amax", "logsumexp", "max")),
        Op("cumsum", "scan", lambda st: bool(_dims_over(st)), _cumsum),
        Op("topk_values", "selection", _last_min(8), _topk),
        Op("layer_norm", "norm", _last_min(8), _layer("norm", _layer_norm)),
        Op("rms_norm", "norm", _last_min(8), _layer("norm", _rms_norm)),
        Op("group_norm", "norm", _channels_dim1, _layer("norm", _group_norm)),
        Op("batch_norm", "norm", _channels_dim1, _layer("norm", _batch_norm)),
        Op("linear", "linear", lambda st: st.rank() >= 2 and st.size(st.shape[-1])[1] <= 8192,
           _linear, heavy=True),
        Op("matmul", "linear", lambda st: st.rank() >= 2 and st.size(st.shape[-1])[1] <= 8192,
           _matmul, heavy=True),
        Op("conv1d", "conv", _conv_applies(1), _conv(1), heavy=True),
        Op("conv2d", "conv", _conv_applies(2), _conv(2), heavy=True),
        Op("max_pool1d", "pool", _pool_applies(1), _pool("max_pool", 1)),
        Op("avg_pool1d", "pool", _pool_applies(1), _pool("avg_pool", 1)),
        Op("max_pool2d", "pool", _pool_applies(2), _pool("max_pool", 2)),
        Op("avg_pool2d", "pool", _pool_applies(2), _pool("avg_pool", 2)),
        Op("transpose", "layout", _rank(3), _transpose),
        Op("permute", "layout", _rank(4, 4), _permute),
        Op("flatten", "layout", _rank(3), _flatten),
    ]
    return {op.name: op for op in ops}


OPS: dict[str, Op | str] = {}
_LOADED: list[bool] = []


def register_op(op: Op | str, name: str | None = None) -> None:
    """Add an op to the catalogue (a plug-in's door, and the built-ins'): an :class:`Op`, or
    ``"module:attr"`` naming one (then ``name`` is required), resolved when first drawn."""
    if isinstance(op, str):
        if not name:
            raise ValueError("register_op('module:attr') needs the op's name")
        OPS[name] = op
    else:
        OPS[op.name] = op


def catalogue(names: list[str] | None = None) -> list[Op]:
    """The ops, sorted by name (the order a seed draws from), or only ``names``; an unknown
    name raises :class:`~solforge.registry.RegistryError` listing the known ones."""
    if not _LOADED:
        _LOADED.append(True)
        for op in _builtins().values():
            OPS.setdefault(op.name, op)
        for ep in entry_points(group="solforge.synth_ops"):
            try:  # a plug-in's entry point is an Op, or a function registering its ops
                obj = ep.load()
                if isinstance(obj, Op):
                    register_op(obj)
                else:
                    obj()
            except Exception as e:  # noqa: BLE001 - a broken plug-in hides no built-in
                print(f"solforge: ignoring synth op plug-in {ep.name!r}: {e}", file=sys.stderr)
    chosen = sorted(OPS) if names is None else list(dict.fromkeys(names))
    return [lookup(OPS, n, "synth op") for n in chosen]
