"""The exploration queue's reordering by measured results (``search/reorder.py``): each
rule moves the candidates it names and drops none."""

from __future__ import annotations

from solforge.problems import find_builtin
from solforge.search.candidates import Candidate, generate_candidates, search_context


def test_after_the_reference_compile_comes_first_when_it_won_and_graphs_go_last():
    # on the H200 a 50 s budget ran out on the reference and a CUDA-graph candidate while
    # torch.compile was 10x faster than eager (rmsnorm_gemma2): no compiled candidate ran
    from solforge.records.evaluation import EvaluationRecord, Status
    from solforge.search.reorder import reorder_after_reference

    cands, _ = generate_candidates(search_context(find_builtin("rmsnorm_gemma2"), "cuda"))
    assert [c.name for c in cands][:4] == ["reference", "library", "rowfuse", "cuda_graphs"]
    rest = cands[1:]

    def ref(vs_compile, status=Status.PASSED):
        return EvaluationRecord(problem="p", solution="s", status=status,
                                speedup_vs_eager=1.0, speedup_vs_compile=vs_compile)

    slow = [c.name for c in reorder_after_reference(rest, ref(0.1))]
    assert slow[:2] == ["compile", "library"], slow  # max-autotune (minutes) by its cost
    assert slow.index("compile_max_autotune") < slow.index("cuda_graphs")
    graphs = [n for n in slow if "cuda_graphs" in n]
    assert slow[-len(graphs):] == graphs and len(graphs) == 3, slow
    # compile no better than the reference: cheapest first, graphs still last
    even = [c.name for c in reorder_after_reference(rest, ref(1.0))]
    assert even[0] == "library" and even[-len(graphs):] == graphs
    assert even.index("compile") < even.index("compile_max_autotune")
    # a failed reference says nothing about the baselines
    failed = reorder_after_reference(rest, ref(None, Status.RUNTIME_ERROR))
    assert [c.name for c in failed] == [c.name for c in rest]
    assert sorted(slow) == sorted(c.name for c in rest)


def test_compiled_candidates_wait_when_the_compile_baseline_failed_the_tolerance():
    # KernelBench's ResNet block (fp32, 1e-4): torch.compile 2.3x faster than eager but
    # outside the tolerance (cuDNN's TF32 convolutions round by algorithm); every compiled
    # candidate failed the same way while the library's kernels waited behind them
    from solforge.records.evaluation import EvaluationRecord, Status, WorkloadResult
    from solforge.search.reorder import compile_out_of_tolerance, reorder_after_reference

    cands, _ = generate_candidates(search_context(find_builtin("rmsnorm_gemma2"), "cuda"))
    rest = cands[1:]

    def ref(*within):
        r = EvaluationRecord(problem="p", solution="s", status=Status.PASSED,
                             speedup_vs_eager=1.0, speedup_vs_compile=0.43)
        r.workloads = [WorkloadResult(name=f"w{i}", compile_ms=1.0, compile_within_tolerance=w)
                       for i, w in enumerate(within)]
        return r

    assert compile_out_of_tolerance(ref(False, False))
    assert not compile_out_of_tolerance(ref(False, True))
    assert not compile_out_of_tolerance(ref(None))          # never checked
    assert not compile_out_of_tolerance(ref())              # no compile timed
    order = [c.name for c in reorder_after_reference(rest, ref(False, False))]
    compiled = [c.name for c in rest if "compile" in c.levers and "cuda_graphs" not in c.levers]
    graphs = [c.name for c in rest if "cuda_graphs" in c.levers]
    others = [c.name for c in rest if c.name not in compiled and c.name not in graphs]
    assert order[:len(others)] == [n for n in order if n in others], order
    assert set(order[len(others):len(others) + len(compiled)]) == set(compiled), order
    assert order[-len(graphs):] == [n for n in order if n in graphs]
    # within tolerance on one workload: compile is promoted as before
    assert reorder_after_reference(rest, ref(False, True))[0].name == "compile"


def test_the_compile_baseline_as_a_candidate_is_owed_when_it_beat_the_reference():
    # on KernelBench at real sizes a planner's wall budget ended before the compiled
    # candidate ran, and the kept solution (the reference) came to 0.66x the best baseline
    from solforge.records.evaluation import EvaluationRecord, Status
    from solforge.search.reorder import BASELINE_CANDIDATE, baseline_first

    def ref(vs_compile, status=Status.PASSED):
        return EvaluationRecord(problem="p", solution="s", status=status,
                                speedup_vs_eager=1.0, speedup_vs_compile=vs_compile)

    problem = find_builtin("fp8_gemm_per_tensor_llama3")
    cands, _ = generate_candidates(search_context(problem, "cuda"))
    rest = cands[1:]
    queue, owed = baseline_first(rest, ref(0.69))
    assert owed == BASELINE_CANDIDATE == queue[0].name
    assert sorted(c.name for c in queue) == sorted(c.name for c in rest)
    assert [c.name for c in queue[1:]] == [c.name for c in rest if c.name != "compile"]
    # compile no faster than the reference, no compile baseline, a failed reference
    for record in (ref(1.0), ref(None), ref(0.5, Status.RUNTIME_ERROR)):
        assert baseline_first(rest, record) == (rest, None)
    # the compile baseline's own outputs outside the tolerance: the candidate would fail too
    from solforge.records.evaluation import WorkloadResult

    outside = ref(0.4)
    outside.workloads = [WorkloadResult(name="w", compile_ms=1.0, compile_within_tolerance=False)]
    assert baseline_first(rest, outside) == (rest, None)
    # no compile candidate among those left (its family not selected): nothing owed
    assert baseline_first([c for c in rest if c.name != "compile"], ref(0.5))[1] is None
    # the candidate is compiled the way the baseline is
    tuned = "max-autotune-no-cudagraphs"
    cands, _ = generate_candidates(search_context(problem, "cuda", compile_mode=tuned),
                                   ["compile"])
    assert [c.name for c in cands] == ["compile"]
    assert f"torch.compile(mode={tuned!r})" in cands[0].source


def test_after_the_reference_the_native_lowp_gemm_comes_before_compiled_candidates():
    # on the H200 on 2026-12-02 the promoted compiled candidates took a four-candidate
    # budget's last slots and the FP8 GEMM on its own tensor cores never ran
    from solforge.records.evaluation import EvaluationRecord, Status
    from solforge.search.reorder import reorder_after_reference

    cands, _ = generate_candidates(search_context(find_builtin("fp8_gemm_per_tensor_llama3"),
                                                  "cuda"))
    ref = EvaluationRecord(problem="p", solution="s", status=Status.PASSED,
                           speedup_vs_eager=1.0, speedup_vs_compile=0.69)
    order = [c.name for c in reorder_after_reference(cands[1:], ref)]
    assert order[:4] == ["library", "library:lowp_tensor_cores", "compile", "library+compile"], order


def test_slow_compile_reason_reads_the_references_record():
    from solforge.records.evaluation import EvaluationRecord, WorkloadResult
    from solforge.search.reorder import slow_compile_reason

    def rec(baseline_s: float, message: str = "") -> EvaluationRecord:
        return EvaluationRecord(problem="p", solution="s", status="PASSED",
                                phase_seconds={"baseline": baseline_s},
                                workloads=[WorkloadResult(name="w1", status="PASSED",
                                                          message=message)])

    assert slow_compile_reason(rec(16.2), 45.0) is None
    # paged_decode_vllm on the H200: 86 s preparing its baselines
    assert "86 s" in slow_compile_reason(rec(86.1), 45.0)
    why = slow_compile_reason(rec(3.0, "compile:default baseline unavailable: recompiled "
                                       "past 90 s"), 45.0)
    assert "did not settle" in why and "w1" in why


def test_a_host_bound_library_candidate_owes_its_graph_replay():
    # KernelBench's 3_DeepNarrowMLP on an H100 (session 22): 17 Triton GEMMs, 1.10 ms of
    # kernels, 2.1 ms a call on the judge's clock; its replay was skipped for the budget and
    # the clock check failed the parent at the verdict
    from solforge.records.evaluation import EvaluationRecord, Status, WorkloadResult
    from solforge.search.reorder import host_bound, replay_of_host_bound

    def rec(time_ms, host_ms, status=Status.PASSED):
        return EvaluationRecord(problem="p", solution="s", status=status, workloads=[
            WorkloadResult(name="small", time_ms=None),  # correctness only: no figures
            WorkloadResult(name="w", time_ms=time_ms, host_ms=host_ms)])

    def c(name, parent=None, levers=()):
        return Candidate(name=name, family="library", parent=parent, cost=1.0, source="",
                         reasoning="", levers=list(levers))

    gemm = c("f32x3_gemm", levers=("library_kernel", "fusion", "autotune"))
    queue = [c("compile", levers=("compile",)), c("cuda_graphs", levers=("cuda_graphs",)),
             c("f32x3_gemm+cuda_graphs", "f32x3_gemm", ("library_kernel", "cuda_graphs"))]
    assert host_bound(rec(1.10, 2.11)) and not host_bound(rec(1.77, 1.82))
    assert not host_bound(rec(0.01, 0.05))  # launch-bound, but under 0.2 ms a call
    assert not host_bound(rec(1.10, 2.11, Status.INCORRECT_NUMERICAL))
    out, owed = replay_of_host_bound(queue, gemm, rec(1.10, 2.11))
    assert owed == "f32x3_gemm+cuda_graphs" == out[0].name
    assert [x.name for x in out[1:]] == ["compile", "cuda_graphs"]
    # device-bound, not a library candidate, or no replay of its own: nothing owed
    assert replay_of_host_bound(queue, gemm, rec(1.10, 1.20)) == (queue, None)
    compiled = c("compile", levers=("compile",))
    assert replay_of_host_bound(queue, compiled, rec(1.10, 2.11)) == (queue, None)
    other = c("library", levers=("library_kernel",))
    assert replay_of_host_bound(queue, other, rec(1.10, 2.11)) == (queue, None)


def test_a_part_faster_than_eager_moves_its_compiled_around_child_up():
    from solforge.records.evaluation import EvaluationRecord, Status, WorkloadResult
    from solforge.search.reorder import compiled_after_a_winning_part

    def rec(vs_eager, vs_compile, status=Status.PASSED):
        return EvaluationRecord(problem="p", solution="s", status=status,
                                speedup_vs_eager=vs_eager, speedup_vs_compile=vs_compile)

    def c(name, parent=None, levers=()):
        return Candidate(name=name, family="library", parent=parent, cost=1.0, source="",
                         reasoning="", levers=list(levers))

    # KernelBench 50_ReLUSelfAttention's queue after its 3xTF32 rewrite ran (session 33)
    gemm = c("f32x3_gemm", levers=("library_kernel", "autotune"))
    queue = [c("inductor:freezing", levers=("compile", "freezing")),
             c("f32x3_gemm+cuda_graphs", "f32x3_gemm", ("library_kernel", "cuda_graphs")),
             c("f32x3_gemm+compile", "f32x3_gemm", ("compile", "library_kernel")),
             c("f32x3_gemm+max_autotune", "f32x3_gemm", ("compile", "autotune")),
             c("blas:cublaslt", levers=("blas_choice",))]
    names = lambda q: [x.name for x in q]  # noqa: E731
    out = compiled_after_a_winning_part(queue, gemm, rec(1.116, 0.709))
    assert names(out) == ["f32x3_gemm+compile", "inductor:freezing", "f32x3_gemm+cuda_graphs",
                          "f32x3_gemm+max_autotune", "blas:cublaslt"]
    # faster than compile already (MiniGPTBlock's library+f32x3_gemm: 1.54x of eager,
    # 1.18x of compile): compiling around it still fuses the rest
    assert names(compiled_after_a_winning_part(queue, gemm, rec(1.536, 1.178)))[0] == \
        "f32x3_gemm+compile"
    # no gain over eager, compile no faster than eager (99_Matmul's 1.44x against both),
    # no compile figure, failed, or itself compiled: as is
    assert compiled_after_a_winning_part(queue, gemm, rec(1.01, 0.70)) == queue
    assert compiled_after_a_winning_part(queue, gemm, rec(1.44, 1.44)) == queue
    assert compiled_after_a_winning_part(queue, gemm, rec(1.5, None)) == queue
    # torch.compile's output out of the tolerance (the ResNet block's TF32 convolutions)
    outside = rec(1.465, 0.619)
    outside.workloads = [WorkloadResult(name="w", time_ms=1.0, compile_ms=0.4,
                                        compile_within_tolerance=False)]
    assert compiled_after_a_winning_part(queue, gemm, outside) == queue
    outside.workloads[0].compile_within_tolerance = True
    assert compiled_after_a_winning_part(queue, gemm, outside) != queue
    failed = rec(1.5, 0.7, Status.INCORRECT_NUMERICAL)
    assert compiled_after_a_winning_part(queue, gemm, failed) == queue
    compiled = c("f32x3_gemm", levers=("compile",))
    assert compiled_after_a_winning_part(queue, compiled, rec(1.5, 0.7)) == queue
