"""The library's scan (``cumulative``) against PyTorch's on a GPU: bit-equality and time.

For each case (KernelBench's level-1 scans 89-93 at their sizes, and other shapes: a
scan over a middle dim, half-precision rows, short rows, Mamba-2's chunk cumsum), the
eager composite (``torch.cumsum(x * mask, 1)``, the two flips, the narrow and the cat)
and ``solforge.kernels.triton.scan.cumulative`` on the same inputs, signed (uniform in
[-1, 1): the running sums cross zero, where an order's rounding shows): whether the
outputs are equal bit for bit (the kernel's docstring says they are), the mismatches,
and the best of three interleaved rounds of the median of ``--reps`` CUDA-event timings,
with the bytes each moves; and the autotuner's choice.

Usage (on a GPU machine, from the repository root):
``python benchmarks/gpu/scan_probe.py --json OUT.json``

Not covered: the search's candidates (the optimize run judges those), backward passes.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from event_timing import add_speeds, interleaved_ms  # a sibling module: run from the repository root

BIG = (32768, 32768)
# (name, op, shape, dim, dtype, form: "" | "mask" | "reverse" | "exclusive")
CASES = [
    ("kb89_cumsum", "sum", BIG, 1, torch.float32, ""),
    ("kb90_cumprod", "prod", BIG, 1, torch.float32, ""),
    ("kb91_reverse", "sum", BIG, 1, torch.float32, "reverse"),
    ("kb92_exclusive", "sum", BIG, 1, torch.float32, "exclusive"),
    ("kb93_masked", "sum", BIG, 1, torch.float32, "mask"),
    ("middle_dim", "sum", (64, 4096, 1024), 1, torch.float32, ""),
    ("rows_fp16", "sum", (8192, 8192), -1, torch.float16, ""),
    ("rows_bf16_4k", "sum", (16, 1024, 4096), -1, torch.bfloat16, ""),
    ("short_rows_20", "sum", (1 << 20, 20), -1, torch.float32, ""),
    ("mamba2_segsum", "sum", (16, 8, 32, 256), -1, torch.float32, ""),
    ("long_rows_2", "sum", (2, 1 << 22), -1, torch.float32, ""),
    ("top_p_rows_8", "sum", (8, 128256), -1, torch.float32, ""),  # few rows of a vocabulary
]


def _eager(x, m, dim, op, form):
    f = torch.cumsum if op == "sum" else torch.cumprod
    if form == "mask":
        return f(x * m, dim)
    if form == "reverse":
        return f(x.flip(dim), dim).flip(dim)
    if form == "exclusive":
        c = f(x.narrow(dim, 0, x.size(dim) - 1), dim)
        return torch.cat((torch.zeros_like(x.select(dim, 0).unsqueeze(dim)), c), dim)
    return f(x, dim)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--only", default="", help="comma-separated case names")
    a = ap.parse_args()
    from solforge.kernels.triton import scan

    props = torch.cuda.get_device_properties(0)
    out = {"device": props.name, "torch": torch.__version__, "date": time.strftime("%F"),
           "cases": []}
    only = set(filter(None, a.only.split(",")))
    for name, op, shape, dim, dt, form in CASES:
        if only and name not in only:
            continue
        torch.manual_seed(0)
        x = (torch.rand(shape, device="cuda") * 2 - 1).to(dt)
        if op == "prod":  # factors near 1, so the products stay finite for a while
            x = (x.float() * 0.05 + 1.0).to(dt)
        m = torch.rand(shape, device="cuda") > 0.5 if form == "mask" else None

        def ref():
            return _eager(x, m, dim, op, form)

        def lib():
            return scan.cumulative(x, dim, op, multiplier=m, reverse=form == "reverse",
                                   exclusive=form == "exclusive")

        r, y = ref(), lib()  # the second also autotunes
        torch.cuda.synchronize()
        row = {"name": name, "op": op, "form": form, "dtype": str(dt)[6:],
               "shape": list(shape), "dim": dim,
               "equal": bool(torch.equal(r, y)),
               "mismatches": int((r != y).sum()),
               "max_abs_diff": float((r.double() - y.double()).abs().max())}
        for kern in (scan._scan_rows, scan._scan_cols):
            if getattr(kern, "best_config", None) is not None:
                row.setdefault("configs", []).append(str(kern.best_config))
        row["torch_ms"], row["library_ms"] = interleaved_ms(ref, lib, a.reps, warmup=2)
        moved = x.numel() * x.element_size() * 2 + (m.numel() if m is not None else 0)
        add_speeds(row, moved)
        out["cases"].append(row)
        print(f"{name:16s} equal={row['equal']!s:5} mismatches={row['mismatches']} "
              f"torch {row['torch_ms']:.3f} ms ({row['torch_gb_s']:.0f} GB/s)  "
              f"library {row['library_ms']:.3f} ms ({row['library_gb_s']:.0f} GB/s)  "
              f"x{row['speedup']:.2f} {row.get('configs', '')}", flush=True)
        del x, m, r, y
        torch.cuda.empty_cache()
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
