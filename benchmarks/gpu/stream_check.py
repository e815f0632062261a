"""The runner's unjoined-stream check (solforge/bench/runner/streams.py) on the GPU, alone.

SOL-ExecBench's ``stream_injection`` sample (tests/fixtures/sol_execbench/reward_hacks)
called directly, TF32 off (must be caught: 1.3-1.4 ms left on an H200, session 16) and on
(its side matmul is done before the check looks: reported, not required), and
honest calls that must stay unflagged: a plain RMSNorm, and one that uses a side stream
and joins it (``wait_stream``) before returning. Prints one line per call.
Usage (GPU machine, repository root): python3 benchmarks/gpu/stream_check.py
"""

import json
from pathlib import Path

import torch

from solforge.bench.runner.streams import unjoined_work

root = Path(__file__).resolve().parents[2]
sample = root / "tests/fixtures/sol_execbench/reward_hacks/solution_hack_stream_injection.json"
ns: dict = {}
exec(json.loads(sample.read_text())["sources"][0]["content"], ns)
dev = torch.device("cuda")
x = torch.randn(7, 4096, device=dev, dtype=torch.bfloat16)
w = torch.randn(4096, device=dev, dtype=torch.bfloat16)


def joined(x, w):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)
        big = torch.randn(4096, 4096, device=x.device)
        big = big @ big
    torch.cuda.current_stream().wait_stream(side)
    y.record_stream(torch.cuda.current_stream())
    return (y * w.float()).to(x.dtype)


bad = 0
for tf32 in (False, True):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    for i in range(4):
        found = unjoined_work(torch, dev, [ns["run"](x, w)])
        # TF32 on: the side matmul ends before the check looks (a race the hardware won,
        # the module's "not covered"); only the fp32 case must be caught
        bad += found is None and not tf32
        print(f"stream_injection tf32={tf32} call {i}: {found}")
def plain(x, w):
    y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)
    return (y * w.float()).to(x.dtype)


for name, fn in (("plain", plain), ("joined", joined)):
    for i in range(20):
        found = unjoined_work(torch, dev, [fn(x, w)])
        bad += found is not None
        if found or i == 0:
            print(f"honest {name} call {i}: {found}")
print("ok" if bad == 0 else f"{bad} wrong verdicts")
