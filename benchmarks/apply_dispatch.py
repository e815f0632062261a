"""What ``solforge.apply``'s dispatcher costs per call, on the host, against an unpatched
module and against the dispatcher of an earlier revision (``git show REV:...``).

A patched module's forward is the dispatcher: it checks the call's shapes and dtypes
against those its solution was verified on, then runs the solution. This times a
one-parameter module (``x * w`` on a 1x1x64 tensor: its own work is near nothing, so the
difference is the dispatch) three ways, interleaved round by round, and prints the minimum
over rounds of the mean per call.

    python3 benchmarks/apply_dispatch.py [--against e8f6e15] [--rounds 7] [--calls 20000]

Not covered: a GPU's launch cost (the solution here is the same module), several tensor
arguments, keyword calls (the dispatcher's general path).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn

import solforge.models.apply as current

ROOT = Path(__file__).resolve().parents[1]


class Scale(nn.Module):
    def __init__(self, n: int = 64) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states * self.weight


def _module_at(rev: str):
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:solforge/models/apply.py"],
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "apply_at_rev.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("apply_at_rev", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["apply_at_rev"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _patched(mod) -> nn.Module:
    live, new = Scale(), Scale()
    kept = mod.Kept(problem="p", problem_path=Path("p.py"), solution_path=Path("s.py"),
                    record={}, extracted={}, device_type="cpu",
                    signatures={(("hidden_states", (1, 1, 64), "float32"),)})
    patch = mod.Patch(model=live)
    live.forward = mod._Dispatch(patch, "", live, new, kept)
    return live


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", default="e8f6e15", help="the earlier revision")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000)
    a = ap.parse_args()
    x = torch.randn(1, 1, 64)
    fns = {"unpatched": Scale(), a.against: _patched(_module_at(a.against)),
           "working tree": _patched(current)}

    def per_call(f: nn.Module, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            f(x)
        return (time.perf_counter() - t0) / n * 1e6

    times: dict[str, list[float]] = {k: [] for k in fns}
    with torch.no_grad():
        for f in fns.values():
            per_call(f, 2000)
        for _ in range(a.rounds):
            for k, f in fns.items():
                times[k].append(per_call(f, a.calls))
    base = min(times["unpatched"])
    for k, v in times.items():
        print(f"{k:>14}: {min(v):7.2f} us per call (+{min(v) - base:.2f} over unpatched)")


if __name__ == "__main__":
    main()
