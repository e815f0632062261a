"""Draw the held-out KernelBench set (``benchmarks/gpu/kernelbench_heldout.txt``) again, or
another one with another seed, from a KernelBench mirror: five files a level, at random,
among those the other KernelBench lists of ``benchmarks/gpu/`` do not name.

Usage: ``python benchmarks/kb_heldout.py [--seed 20261207] [--per-level 5]`` prints the
paths; ``--extract DIR`` also writes the files under DIR (``DIR/KernelBench/level1/...``),
the folder a device call carries (``.kb2``).

Not covered: fetching the mirror (``fetch github:ScalingIntelligence/KernelBench``).
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
from pathlib import Path

MIRROR = "/work/.mirror/ScalingIntelligence+KernelBench/repo"
COMMIT = "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"
ROOT = Path(__file__).resolve().parent
USED = [ROOT / "gpu" / "kernelbench_set.txt", ROOT / "gpu" / "kernelbench_reductions.txt"]


def _git(mirror: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", mirror, *args], check=True,
                          capture_output=True, text=True).stdout


def draw(mirror: str, commit: str, seed: int, per_level: int) -> list[str]:
    files = [f for f in _git(mirror, "ls-tree", "-r", "--name-only", commit, "KernelBench").split()
             if f.endswith(".py") and re.search(r"/level[123]/", f)]
    used = {m.group(1) for p in USED for line in p.read_text().splitlines()
            if (m := re.match(r"^(KernelBench/\S+)", line))}
    rng = random.Random(seed)
    out: list[str] = []
    for level in ("level1", "level2", "level3"):
        pool = sorted(f for f in files if f"/{level}/" in f and f not in used)
        out += sorted(rng.sample(pool, per_level))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", default=MIRROR)
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--per-level", type=int, default=5)
    ap.add_argument("--extract", type=Path, help="write the drawn files under this folder")
    a = ap.parse_args()
    for path in draw(a.mirror, a.commit, a.seed, a.per_level):
        print(path)
        if a.extract:
            dest = a.extract / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(_git(a.mirror, "show", f"{a.commit}:{path}"))


if __name__ == "__main__":
    main()
