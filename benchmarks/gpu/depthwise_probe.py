"""The library's depthwise convolution against PyTorch's on a GPU: bit-equality and time.

For each shape (KernelBench's level-1 depthwise problems at their sizes, and the corpus's
depthwise layers), PyTorch's call (``F.conv1d`` / ``F.conv2d`` with ``groups == C``) and
``solforge.kernels.triton.depthwise_conv_raw`` on the same inputs: whether the outputs are
equal bit for bit (fp32 and bf16 should be: the kernel's docstring), the largest
difference, and the median of CUDA-event timings of each (``--reps`` calls after
warm-up, interleaved), with the bytes each moves at the device's bandwidth.

Usage (on a GPU machine, from the repository root):
``python benchmarks/gpu/depthwise_probe.py --json OUT.json``

Not covered: the search's candidates (the optimize run judges those), backward passes.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from event_timing import add_speeds, interleaved_ms  # a sibling module: run from the repository root

# (name, dtype, N, C, H (None: 1-D), W, K (kh, kw), mult, stride, padding, dilation, bias)
SHAPES = [
    ("kb82_3x3", torch.float32, 16, 64, 512, 512, (3, 3), 1, 1, 0, 1, False),
    ("kb83_3x1", torch.float32, 64, 8, 512, 512, (3, 1), 1, 1, 0, 1, False),
    ("kb84_3x3_asym", torch.float32, 64, 128, 256, 512, (3, 3), 1, 1, 0, 1, False),
    ("kb85_asym", torch.float32, 32, 128, 128, 256, (3, 7), 1, 1, 0, 1, False),
    ("kb86_dw", torch.float32, 16, 64, 512, 512, (3, 3), 1, 1, 1, 1, False),
    ("mobilenet_s2", torch.float32, 10, 64, 112, 112, (3, 3), 1, 2, 1, 1, False),
    ("mobilenet_7x7", torch.float32, 10, 1024, 7, 7, (3, 3), 1, 1, 1, 1, False),
    ("convnext_7x7_fp16", torch.float16, 64, 96, 56, 56, (7, 7), 1, 1, 3, 1, True),
    ("convnext_7x7_fp32", torch.float32, 64, 96, 56, 56, (7, 7), 1, 1, 3, 1, True),
    ("effnet_5x5_bf16", torch.bfloat16, 64, 240, 28, 28, (5, 5), 1, 1, 2, 1, False),
    ("mamba_k4_bf16", torch.bfloat16, 4, 8192, None, 2048, (1, 4), 1, 1, 3, 1, True),
    ("conformer_k31_fp16", torch.float16, 8, 1024, None, 499, (1, 31), 1, 1, 15, 1, False),
    ("mult2_dil2", torch.float32, 8, 32, 128, 128, (3, 3), 2, 1, 2, 2, True),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    from solforge.kernels.triton.depthwise import depthwise_conv_raw

    props = torch.cuda.get_device_properties(0)
    out = {"device": props.name, "torch": torch.__version__, "date": time.strftime("%F"),
           "shapes": []}
    for name, dt, n, c, h, w, k, mult, s, p, d, has_bias in SHAPES:
        torch.manual_seed(0)
        one_d = h is None
        x = torch.rand(n, c, w, device="cuda", dtype=dt) if one_d else \
            torch.rand(n, c, h, w, device="cuda", dtype=dt)
        wt = (torch.randn(c * mult, 1, k[1], device="cuda", dtype=dt) if one_d else
              torch.randn(c * mult, 1, *k, device="cuda", dtype=dt)) / (k[0] * k[1]) ** 0.5
        b = torch.randn(c * mult, device="cuda", dtype=dt) if has_bias else None
        conv = F.conv1d if one_d else F.conv2d

        def ref():
            return conv(x, wt, b, s, p, d, c)

        def lib():
            return depthwise_conv_raw(x, wt, b, s, p, d, c)

        r, y = ref(), lib()  # the second also autotunes
        torch.cuda.synchronize()
        row = {"name": name, "dtype": str(dt)[6:], "input": list(x.shape),
               "weight": list(wt.shape), "stride": s, "padding": p, "dilation": d,
               "equal": bool(torch.equal(r, y)),
               "max_abs_diff": float((r.float() - y.float()).abs().max()),
               "mismatches": int((r != y).sum())}
        row["torch_ms"], row["library_ms"] = interleaved_ms(ref, lib, a.reps, warmup=3)
        moved = x.numel() * x.element_size() + r.numel() * r.element_size()
        add_speeds(row, moved)
        out["shapes"].append(row)
        print(f"{name:20s} equal={row['equal']!s:5} maxdiff={row['max_abs_diff']:.2e} "
              f"torch {row['torch_ms']:.3f} ms ({row['torch_gb_s']:.0f} GB/s)  "
              f"library {row['library_ms']:.3f} ms ({row['library_gb_s']:.0f} GB/s)  "
              f"x{row['speedup']:.2f}", flush=True)
        del x, wt, b, r, y
        torch.cuda.empty_cache()
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
