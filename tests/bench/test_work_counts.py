"""The reference's work is counted once per workload and input signature, then read back
from the cache (the count held the H200's slot 1-2 s per evaluation)."""

from __future__ import annotations

import torch

from solforge.bench.baselines.work_counts import counted_once
from solforge.problems import find_builtin
from solforge.sol.work import Work, count_work
from tests.bench.live_tensors import LiveTensors


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


class _Argmax(torch.nn.Module):
    def forward(self, x, *more):
        return torch.argmax(x, dim=1)


class _Scales(torch.nn.Module):  # writes to its input, as some references do
    def forward(self, x):
        return x.mul_(2.0).sum(dim=1)


def test_the_count_copies_no_input_unless_the_reference_writes_to_it(tmp_path):
    """The judge counts the work on its own timing inputs (``performance._count_work``): a
    copy of them for the count was an input set's size more of its memory (8 GB for
    KernelBench's argmax). A reference that writes to its input is counted on a copy, and
    the judge's inputs stay as they were."""
    x = torch.rand(64, 1 << 14)  # 4 MiB
    before = x.clone()
    with LiveTensors(str(tmp_path / "peaks.json")) as live:
        work = count_work(_Argmax(), [x])
    assert live.peaks["all"]["all"] == x.numel() * 4  # the input itself, no copy
    assert work.vector_flops == x.numel()
    assert work.bytes == x.numel() * 4 + 64 * 8
    written = count_work(_Scales(), [x])
    assert torch.equal(x, before)  # counted on a copy
    assert written.vector_flops == 2 * x.numel() and written.bytes == x.numel() * 4 + 64 * 4
    assert count_work(_Argmax(), [x, x]).bytes == work.bytes  # one tensor, read once
