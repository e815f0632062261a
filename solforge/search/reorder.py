"""The exploration's queue, reordered by what the evaluations so far measured.

The generators (``candidates.py``) order what they propose by estimated cost; the search
agent (``agent.py``) then moves candidates up or down here, from measured facts alone: the
reference's evaluation (``reorder_after_reference``, ``baseline_first``,
``slow_compile_reason``), a candidate's own record (``replay_of_host_bound``,
``compiled_after_a_winning_part``) and the ranking so far (``graphs_of_the_best_first``).
Each rule cites the run that made it. These functions lived in ``candidates.py`` until
session 34; results READMEs written before then cite them as ``candidates.<name>``.

The reordering functions return the candidates they were given in a new order (or the
same list) and drop none: whether a candidate is evaluated at all is the agent's budget
decision. ``slow_compile_reason`` is the one exception that drops: it names why the
compiled candidates are skipped, and the agent skips them. The predicates
(``fp32_gemm_bound``, ``compile_out_of_tolerance``, ``host_bound``) read one record.

Not covered: an order learnt across problems or runs (each rule reads this problem's
records only), or a cost model beyond each family's estimate in seconds.
"""

from __future__ import annotations

from solforge.records.evaluation import EvaluationRecord
from solforge.search.candidates import Candidate, order_candidates
from solforge.search.patterns.gemm_f32x3 import KIND as F32X3_KIND
from solforge.sol.units import TF32X3


# torch.compile's baseline this much faster than the reference (speedup_vs_compile of the
# reference below it): the compiled candidates are evaluated next
PROMOTE_COMPILE_BELOW = 0.9
# promoted: compiled candidates estimated at most this times the cheapest compiled one
PROMOTE_COST_FACTOR = 1.5


def reorder_after_reference(rest: list[Candidate], reference: EvaluationRecord
                            ) -> list[Candidate]:
    """The candidates still to evaluate, reordered by what the reference's evaluation
    showed (parents still before their children; otherwise cheapest first):

    - torch.compile's baseline beat the reference (``PROMOTE_COMPILE_BELOW``): the cheap
      candidates that compile (``PROMOTE_COST_FACTOR``; not max-autotune) come first.
      They start from the best baseline's figure; a cheaper candidate that does not
      compile has to beat it from the eager side, and a short budget must not run out
      before the compiled ones where torch.compile is several times faster than eager
      (benchmarks/results/2026-12-01-h200-s5).
    - candidates on the operands' own low-precision tensor cores (``lowp_tensor_cores``)
      come first, after their TF32 parent: promoted compiled candidates must not take the
      last slots of a small budget from the FP8/int8 GEMMs
      (benchmarks/results/2026-12-02-h200-s10).
    - candidates that replay CUDA graphs go last: the ranking figure is device kernel
      time, where a graph's copies in and out count and its gain (no launch gaps) does
      not show, so X replayed as a graph ranks below X (0.09-0.55x against the best
      baseline: benchmarks/results/2026-12-01-h200-s5).
    - the reference is bound by its fp32 GEMMs (``fp32_gemm_bound``): the 3xTF32 GEMM's
      candidates (``F32X3_KIND``, after their parent) come first. They are the only
      lever on such a problem's bound, and the dearest of the library's: cheaper ones
      that leave the GEMM on the SIMT units took KernelBench ``99_Matmul_GELU_Softmax``'s
      40 s before it, and the problem kept 1.00x where the 3xTF32 candidate had given
      1.44x (benchmarks/results/2026-12-06-h100-s23). Those compiled around
      (``<...>+compile``) too, unless the next point holds.
    - torch.compile's baseline failed the problem's tolerance on every timed workload
      (``compile_out_of_tolerance``): the compiled candidates come after every other
      (before the graphs). They round as the baseline does and would fail as it did;
      the candidates that keep the reference's own numerics (library kernels around the
      reference's convolutions) must not wait behind them (KernelBench's ResNet block:
      cuDNN's TF32 convolutions, benchmarks/results/2026-12-04-h200-s14).

    Not covered: a reference that failed (the order is left as it is)."""
    if not reference.passed:
        return rest
    compiled = [c.cost for c in rest
                if "compile" in c.levers and "cuda_graphs" not in c.levers]
    # the cheap compiled ones only: max-autotune (minutes) still waits its turn by cost
    cheap = min(compiled, default=0.0) * PROMOTE_COST_FACTOR
    demote = compile_out_of_tolerance(reference)
    promote = (not demote and reference.speedup_vs_compile is not None
               and reference.speedup_vs_compile < PROMOTE_COMPILE_BELOW)
    gemm_bound = fp32_gemm_bound(reference)

    def tier(c: Candidate) -> float:
        if "cuda_graphs" in c.levers:
            return 2
        if "lowp_tensor_cores" in c.levers:
            return 0
        compiled = "compile" in c.levers
        if compiled and demote:
            return 1.5
        if gemm_bound and F32X3_KIND in c.name.split("+"):
            return 0
        if compiled:
            # a tuning compile (coordinate descent, max-autotune) waits its turn by cost:
            # its tuning is on top of the compile that won
            return 0 if promote and c.cost <= cheap and "autotune" not in c.levers else 1
        return 1

    return order_candidates(rest, key=lambda c: (tier(c), c.cost, c.name))


def fp32_gemm_bound(reference: EvaluationRecord) -> bool:
    """True when every timed workload of the reference's evaluation is bound by compute
    on the 3xTF32 unit (``sol.units.TF32X3``: the SOL bound counts fp32 tensor work at
    3xTF32's rate, so fp32 GEMM FLOPs set it); False where some workload is bound by
    memory or another unit, or none was bounded."""
    timed = [w for w in reference.workloads if w.time_ms and w.sol_ms]
    return bool(timed) and all(w.bound == "compute" and w.sol_unit == TF32X3 for w in timed)


def compile_out_of_tolerance(reference: EvaluationRecord) -> bool:
    """True when torch.compile's baseline was timed on some workload of the reference's
    evaluation and its outputs failed the problem's tolerance on every one of them
    (``WorkloadResult.compile_within_tolerance``); False where it passed anywhere or was
    never checked."""
    timed = [w for w in reference.workloads if w.compile_ms]
    return bool(timed) and all(w.compile_within_tolerance is False for w in timed)


# the candidate that is torch.compile's baseline as a solution (``families.generic.compile_family``)
BASELINE_CANDIDATE = "compile"
# the candidates that are a baseline's own program, by the baseline they are: the final
# verdict marks them (``EvaluationRecord.baseline_itself``)
BASELINE_PROGRAMS = {"reference": "eager", BASELINE_CANDIDATE: "compile"}


def baseline_first(rest: list[Candidate], reference: EvaluationRecord
                   ) -> tuple[list[Candidate], str | None]:
    """When torch.compile's baseline beat the reference (``speedup_vs_compile`` below 1),
    the candidate that is that baseline (``BASELINE_CANDIDATE``: the reference compiled in
    the baseline's own mode) moves to the head of ``rest``, and its name comes back as
    owed: the search evaluates it whatever its budgets and the run's stop say, so a cut
    can never leave the reference, slower than the best baseline, as the only passing
    candidate. Otherwise ``rest`` as it is and ``None``.

    Nothing is owed when the compile baseline's outputs fail the problem's tolerance on
    every workload (``WorkloadResult.compile_within_tolerance``): the candidate would too.

    Not covered: a baseline the candidate cannot reproduce (a compile that fails or
    recompiles inside the runner fails or times as itself; the verdict then keeps the
    best of what passed)."""
    vs_compile = reference.speedup_vs_compile
    if not reference.passed or vs_compile is None or vs_compile >= 1.0:
        return rest, None
    if compile_out_of_tolerance(reference):
        return rest, None  # the baseline's own outputs fail the tolerance: so would it
    owed = [c for c in rest if c.name == BASELINE_CANDIDATE]
    if not owed:
        return rest, None
    return owed + [c for c in rest if c.name != BASELINE_CANDIDATE], BASELINE_CANDIDATE


# a library candidate is host-bound when, on some timed workload, the judge's clock over
# back-to-back calls (``host_ms``) exceeds its kernel time this many times, by at least
# this much: Triton's Python launch path costs tens of microseconds a kernel, and a GEMM
# stack of short kernels spends more on the host than on the device
HOST_BOUND_RATIO = 1.5
HOST_BOUND_MIN_MS = 0.2


def host_bound(record: EvaluationRecord) -> bool:
    """Whether a passing record's calls spend far more time on the host than on the device
    (``HOST_BOUND_RATIO``, ``HOST_BOUND_MIN_MS``) on some timed workload. Not covered: a
    CPU record (its kernel time is the host's clock)."""
    return record.passed and any(
        w.time_ms and w.host_ms and w.host_ms >= HOST_BOUND_RATIO * w.time_ms
        and w.host_ms - w.time_ms >= HOST_BOUND_MIN_MS for w in record.workloads)


def replay_of_host_bound(queue: list[Candidate], evaluated: Candidate,
                         record: EvaluationRecord) -> tuple[list[Candidate], str | None]:
    """When ``evaluated``, a candidate of library kernels (lever ``library_kernel``), passed
    but is host-bound (:func:`host_bound`), its CUDA-graph replay (the candidate in
    ``queue`` whose parent it is, with lever ``cuda_graphs``) moves to the head of
    ``queue`` and its name comes back as owed: the search evaluates it whatever its budgets
    say. Ranked on kernel time, the host-bound parent goes first to the final verdict,
    where the judge's clock check fails it (KernelBench's ``3_DeepNarrowMLP``: 17 Triton
    GEMMs, 1.10 ms of kernels, 2.1 ms a call on the host, ``off_device_work`` at the
    verdict; benchmarks/results/2026-12-06-h100-s22), and its replay, skipped for the
    budget the parent's autotuning had spent, is what is left to keep. Otherwise ``queue``
    as it is and None."""
    if "library_kernel" not in evaluated.levers or not host_bound(record):
        return queue, None
    replay = [c for c in queue if c.parent == evaluated.name and "cuda_graphs" in c.levers]
    if not replay:
        return queue, None
    return replay[:1] + [c for c in queue if c is not replay[0]], replay[0].name


# a candidate's own gain over eager from which its compiled-around child moves up
PART_GAIN = 1.02
# ... where torch.compile's baseline beat eager by this much on the same workloads
COMPILE_GAIN = 1.05


def compiled_after_a_winning_part(queue: list[Candidate], evaluated: Candidate,
                                  record: EvaluationRecord) -> list[Candidate]:
    """When ``evaluated``, a candidate that does not compile, passed faster than eager
    (``PART_GAIN``) on workloads where torch.compile's baseline beat eager too
    (``COMPILE_GAIN``: the reference has work Inductor fuses), its children in ``queue``
    that compile around it (``<X>+compile``: lever ``compile``; not the CUDA-graph
    replays, not the tuning compiles) move to the head of ``queue``: its own kernels beat
    ATen's and compile fuses the rest, so together they are the likeliest winner. Left
    behind the plain compile variants by cost, the compiled-around rewrite of KernelBench's
    ``50_ReLUSelfAttention`` (1.12x of eager alone, torch.compile 1.57x; compiled around,
    1.13x of Inductor's program in a probe) came fourth, and a reopened search did not
    reach it (benchmarks/results/2026-12-07-h100-s33). Not where torch.compile's output
    failed the tolerance (``compile_out_of_tolerance``: KernelBench's ResNet block, TF32
    convolutions). Otherwise ``queue`` as it is.

    Not covered: a gain measured only on the visible workloads (the record is the
    exploring evaluation's); whether Inductor's fusion is worth the graph breaks around
    each library call (the child's evaluation says)."""
    # compiled, the rest would round as the baseline did and fail where it failed
    if "compile" in evaluated.levers or not record.passed or compile_out_of_tolerance(record):
        return queue
    vs_eager, vs_compile = record.speedup_vs_eager, record.speedup_vs_compile
    if vs_eager is None or vs_eager < PART_GAIN or not vs_compile or \
            vs_eager / vs_compile < COMPILE_GAIN:
        return queue
    up = [c for c in queue if c.parent == evaluated.name and "compile" in c.levers
          and "cuda_graphs" not in c.levers and "autotune" not in c.levers]
    if not up:
        return queue
    moved = {id(c) for c in up}
    return up + [c for c in queue if id(c) not in moved]


def graphs_of_the_best_first(queue: list[Candidate], scores: dict[str, float]
                              ) -> list[Candidate]:
    """``queue`` with its CUDA-graph candidates reordered: the replay of the best candidate
    evaluated so far first (a graph candidate's base is its parent, or the reference when
    it has none; ``scores`` maps evaluated names to their ranking figure, -1 for a
    failure). The other candidates keep their places; graph candidates whose base was not
    evaluated go last, in their old order. With ``SearchConfig.graph_candidates`` at 1,
    the one graph evaluated is the replay of the candidate most likely to be kept."""
    slots = [i for i, c in enumerate(queue) if "cuda_graphs" in c.levers]
    graphs = [queue[i] for i in slots]
    ranked = sorted(graphs, key=lambda c: -scores.get(c.parent or "reference", -2.0))
    out = list(queue)
    for i, c in zip(slots, ranked):
        out[i] = c
    return out


def slow_compile_reason(reference: EvaluationRecord, limit_s: float) -> str | None:
    """Why compiled candidates should not be evaluated on this problem, judging by the
    reference's evaluation, or None.

    torch.compile recompiles a reference with data-dependent values (a ``tolist()`` of
    lengths, a Python loop over them) for new inputs: its baseline is then found
    unavailable, or takes long to warm up. A compiled candidate recompiles the same way
    at each correctness trial with fresh inputs, inside the device's slot, so every other
    evaluator on the GPU waits behind it (benchmarks/results/2026-12-01-h200-single).
    Not covered: a slow compile that would have settled and won (the baseline shows what
    torch.compile gives; the reported figures still compare against it)."""
    for w in reference.workloads:
        if "compile" in w.message and "baseline unavailable" in w.message:
            return f"torch.compile did not settle on the reference (workload {w.name}: " \
                   f"its compile baseline is unavailable)"
    spent = reference.phase_seconds.get("baseline", 0.0)
    if spent > limit_s:
        return f"torch.compile took {spent:.0f} s to warm up the reference's baselines " \
               f"(more than {limit_s:g} s): a compiled candidate would recompile as " \
               f"long at each trial, inside the device's slot"
    return None
