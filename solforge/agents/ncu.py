"""Nsight Compute figures for the ``profile`` tool, where ``ncu`` exists and may profile.

One forward of the candidate (after a warm-up call, on the first visible workload of the
workspace's ``problem.py``) runs under ``ncu`` inside the agent's sandbox
(:func:`~solforge.agents.shell.run_contained`, so the device's timing slot is held), with
a handful of metrics per kernel: duration, DRAM and SM throughput as a share of peak,
achieved occupancy, registers per thread. The CSV that ``ncu --csv`` prints (one row per
kernel and metric) is parsed into one line per kernel.

When ``ncu`` is missing, or the driver forbids performance counters to this user
(``ERR_NVGPUCTRPERM``), the summary says so in one line and the PyTorch profiler's table
stands alone. Not covered: sections beyond these metrics, source-level attribution,
replay modes other than ncu's default (kernel replay; each kernel runs several times).
This path has not been exercised on a GPU by the project's tests; the CSV parser is
tested on ncu's documented layout.
"""

from __future__ import annotations

import csv
import io
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from solforge.agents.shell import run_contained
from solforge.problems.spec import Problem

METRICS = {
    "gpu__time_duration.sum": "time",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm%",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy%",
    "launch__registers_per_thread": "regs",
}

_DRIVER = '''
import sys, torch
from solforge.bench.measure import inputs as I
from solforge.problems.loader import import_file, load_problem
problem_path, solution_path, device = sys.argv[1:4]
problem = load_problem(problem_path)
ws = [w for w in problem.visible_workloads() if not w.cpu] or problem.visible_workloads()
w = ws[0]
ref_mod = import_file(problem.path, prefix="solforge_reference")
sol_mod = import_file(solution_path, prefix="solforge_candidate")
dev = torch.device(device)
args = I.init_args(ref_mod, w.params)
ref = I.build_model(ref_mod.Model, args, dev, False)
state = {k: v.detach().clone() for k, v in ref.state_dict().items()}
del ref
model = I.build_model(sol_mod.ModelNew, args, dev, True, state)
x = I.make_inputs(ref_mod, w.params, 1234, "normal", dev)
with torch.no_grad():
    model(*x)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    model(*x)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
print("solforge-ncu-driver: workload", w.name)
'''


@dataclass
class KernelRow:
    """One profiled kernel launch: its name and the metrics read (by short name)."""

    name: str
    values: dict[str, float] = field(default_factory=dict)


def parse_ncu_csv(text: str) -> list[KernelRow]:
    """Kernels from ``ncu --csv --print-units base`` output, in launch order, with the
    metrics of :data:`METRICS` (``time`` in microseconds)."""
    start = text.find('"ID"')
    if start < 0:
        return []
    kernels: dict[str, KernelRow] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        kid = row.get("ID")
        metric = row.get("Metric Name")
        if not kid or metric not in METRICS:
            continue
        k = kernels.setdefault(kid, KernelRow(row.get("Kernel Name") or "?"))
        try:
            value = float((row.get("Metric Value") or "").replace(",", ""))
        except ValueError:
            continue
        if METRICS[metric] == "time":
            unit = (row.get("Metric Unit") or "").lower()
            value *= _TIME_UNITS.get(unit, 1e-3)
        k.values[METRICS[metric]] = value
    return list(kernels.values())


_TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3,
               "ms": 1e3, "second": 1e6, "s": 1e6}


def format_kernels(kernels: list[KernelRow], top: int = 10) -> str:
    """One line per kernel, longest first."""
    ordered = sorted(kernels, key=lambda k: -k.values.get("time", 0.0))
    lines = ["Nsight Compute (one call, per kernel):"]
    for k in ordered[:top]:
        v = k.values
        parts = [f"{v['time']:9.2f} us" if "time" in v else "        ? us"]
        parts += [f"{key[:-1]} {v[key]:5.1f}%" for key in ("dram%", "sm%", "occupancy%")
                  if key in v]
        if "regs" in v:
            parts.append(f"regs {int(v['regs'])}")
        parts.append(k.name[:100])
        lines.append("  " + "  ".join(parts))
    if len(ordered) > top:
        lines.append(f"  ... {len(ordered) - top} more kernels")
    return "\n".join(lines)


def ncu_summary(problem: Problem, solution: Path, workspace: Path, device: str,
                timeout_s: float = 300.0) -> str:
    """The Nsight Compute lines for ``profile``, or one line saying why there are none."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return "Nsight Compute: ncu is not on PATH (install the CUDA toolkit's nsight-compute)"
    with tempfile.TemporaryDirectory(prefix="solforge-ncu-") as tmp:
        driver = Path(tmp) / "driver.py"
        driver.write_text(_DRIVER)
        driver.chmod(0o644)
        Path(tmp).chmod(0o755)
        problem_file = workspace / "problem.py"
        cmd = " ".join(shlex.quote(str(x)) for x in (
            ncu, "--csv", "--print-units", "base", "--profile-from-start", "off",
            "--metrics", ",".join(METRICS), sys.executable, driver,
            problem_file if problem_file.is_file() else problem.path, solution, device))
        res = run_contained(cmd, workspace, device=device, timeout_s=timeout_s,
                            max_output_chars=200_000)
    if "ERR_NVGPUCTRPERM" in res.output:
        return ("Nsight Compute: this user may not read GPU performance counters "
                "(ERR_NVGPUCTRPERM); an administrator can allow it with the nvidia driver "
                "option NVreg_RestrictProfilingToAdminUsers=0")
    kernels = parse_ncu_csv(res.output)
    if not kernels:
        last = [ln for ln in res.output.strip().splitlines() if ln.strip()][-3:]
        return f"Nsight Compute: no kernel data ({res.describe().splitlines()[0]}): " + \
            " | ".join(last)[:600]
    return format_kernels(kernels)
