"""The reference's work is counted once per workload and input signature, then read back
from the cache (the count held the H200's slot 1-2 s per evaluation)."""

from __future__ import annotations

import torch

from solforge.bench.baselines.work_counts import counted_once
from solforge.problems import find_builtin
from solforge.sol.work import Work


def test_counted_once_then_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path))
    p = find_builtin("rmsnorm_llama3")
    w = p.workloads[0]
    x = [torch.zeros(4, 8)]
    calls = []

    def count():
        calls.append(1)
        return Work(vector_flops=10.0, bytes=64.0)

    first = counted_once(p, w, "cpu", x, count)
    again = counted_once(p, w, "cpu", x, count)
    assert first == again == Work(vector_flops=10.0, bytes=64.0) and len(calls) == 1
    # other input shapes, another workload: counted afresh
    counted_once(p, w, "cpu", [torch.zeros(4, 16)], count)
    counted_once(p, p.workloads[1], "cpu", x, count)
    assert len(calls) == 3


def test_a_failed_count_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path))
    p = find_builtin("rmsnorm_llama3")
    w, x = p.workloads[0], [torch.zeros(2, 2)]
    assert counted_once(p, w, "cpu", x, lambda: "RuntimeError: no") == "RuntimeError: no"
    ok = Work(bytes=8.0)
    assert counted_once(p, w, "cpu", x, lambda: ok) == ok
    assert counted_once(p, w, "cpu", x, lambda: "never asked") == ok
