"""How far fp32 sums in different orders land from each other and from the exact sum, on
a CPU with NumPy: the question behind KernelBench 47 (``torch.sum(x, dim=1)`` over 4096
signed values) failing a 1e-4 tolerance for a kernel that only sums in another order.

Orders: one running sum (``seq``), ``v`` interleaved running sums combined pairwise
(``inter4``: a stand-in for PyTorch's CUDA reduction, whose 4 accumulators a thread keeps;
its real order also depends on the launch configuration), and Kahan's compensated sum.
Each is compared with the float64 sum and with ``inter4`` by the evaluator's rule
(``|a - b| > atol + rtol * |b|``, 1e-4 each): the count of columns outside and the max
abs difference.

    python benchmarks/sum_order.py --columns 60000

Not covered: PyTorch's exact order on a GPU (so the counts against ``inter4`` show the
size of the effect, not the GPU's own figures); other input distributions than N(0, 1).
"""

from __future__ import annotations

import argparse

import numpy as np


def running(x: np.ndarray, v: int) -> np.ndarray:
    """``v`` interleaved fp32 running sums over axis 0, combined pairwise."""
    accs = [np.zeros(x.shape[1], np.float32) for _ in range(v)]
    for k in range(0, x.shape[0], v):
        for i in range(v):
            accs[i] += x[k + i]
    while len(accs) > 1:
        accs = [accs[i] + accs[i + 1] for i in range(0, len(accs), 2)]
    return accs[0]


def kahan(x: np.ndarray) -> np.ndarray:
    s = np.zeros(x.shape[1], np.float32)
    c = np.zeros_like(s)
    for k in range(x.shape[0]):
        y = x[k] - c
        t = s + y
        c = (t - s) - y
        s = t
    return s


def outside(a: np.ndarray, ref: np.ndarray, tol: float = 1e-4) -> tuple[int, float]:
    d = np.abs(a.astype(np.float64) - ref)
    return int((d > tol + tol * np.abs(ref)).sum()), float(d.max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=4096, help="values summed per column")
    ap.add_argument("--columns", type=int, default=60000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    x = np.random.default_rng(a.seed).standard_normal((a.k, a.columns)).astype(np.float32)
    exact = x.astype(np.float64).sum(0)
    torchlike = running(x, 4).astype(np.float64)
    print(f"{a.columns} columns of {a.k} N(0,1) values; (outside 1e-4, max abs difference)")
    for name, s in (("seq", running(x, 1)), ("inter4", running(x, 4)),
                    ("inter16", running(x, 16)), ("kahan", kahan(x))):
        print(f"{name:8s} vs exact {outside(s, exact)}  vs inter4 {outside(s, torchlike)}")


if __name__ == "__main__":
    main()
