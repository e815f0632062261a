"""The environment a contained process starts with, and the one the judge keeps.

:func:`runner_env` rebuilds a runner's environment (and the LLM worker's shell tool's,
``agents/shell.py``) from an allowlist: API keys, tokens, cloud credentials and every
variable not needed to run Python, CUDA and Triton are gone; HOME and TMPDIR point into
its private working directory, every build cache under ``workdir/cache`` (its own,
``caches.py``). :func:`judge_env` is the caller's environment minus anything named like a
secret, for the judge process. :data:`QUIET_THREADS` makes idle OpenMP threads wait
passively in every solforge process.

Not covered: the limits, namespaces and privileges a process gets (``confinement.py``),
starting and killing a runner (``sandbox.py``), and the environment of the *caller's*
process, which a runner with the caller's uid can read unless that process is
non-dumpable (``confinement.protect_judge``).
"""

from __future__ import annotations

import os
from pathlib import Path

import solforge
from solforge import env
from solforge.bench.measure.slots import slots_dir

# Variables a runner may inherit; everything else (keys, tokens, credentials) is dropped.
_ENV_ALLOW = (
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM",
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "CUDA_MODULE_LOADING",
    "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV",
    "TORCH_CUDA_ARCH_LIST", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH",
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", env.CACHE, env.CUDA_ARCH,
    "CUTE_DSL_ARCH", "CUTE_DSL_CACHE_DIR",
)
# Variables the judge never inherits from its caller (an agent holding API keys): a
# runner could read the judge's environment through /proc where it is not hardened.
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH",
                 "COOKIE", "SESSION", "PRIVATE")


def judge_env(env: dict[str, str]) -> dict[str, str]:
    """The caller's environment minus anything that looks like a secret."""
    return {k: v for k, v in env.items()
            if not any(w in k.upper() for w in _SECRET_WORDS)}


# Idle OpenMP threads spin for a while after each parallel region and steal the cores a
# runner is being timed on (benchmarks/results/FINDINGS.md, "OpenMP"): every solforge
# process waits passively instead.
QUIET_THREADS = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}


def runner_env(device: str, workdir: Path, extra: dict[str, str]) -> dict[str, str]:
    """A contained child's environment: the allowlist, HOME and TMPDIR in ``workdir``, and
    every build cache under ``workdir/cache`` (its own: ``caches.py``)."""
    cache = workdir / "cache"
    out = {k: v for k, v in os.environ.items() if k in _ENV_ALLOW}
    out.update({
        "HOME": str(workdir), "TMPDIR": str(workdir / "tmp"), "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
        # the candidate's own compile caches (caches.py), inside its writable directory
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "CUTE_DSL_CACHE_DIR": str(cache / "cute_dsl"),
        env.CACHE: str(cache),
        # Triton's autotuner keeps its choice per (kernel source, config list, key) on disk:
        # every fresh runner re-tuned the same kernels on every workload otherwise. A choice
        # only decides speed, which is measured anyway; correctness is checked on any.
        "TRITON_CACHE_AUTOTUNING": "1",
    })
    out.update(QUIET_THREADS)
    out[env.SLOTS] = str(slots_dir())  # the judge's: the runner's TMPDIR is private
    # the package must stay importable from the private working directory
    src_root = str(Path(solforge.__file__).resolve().parents[1])
    out["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, out.get("PYTHONPATH", "")) if p)
    if device == "cpu":
        out["CUDA_VISIBLE_DEVICES"] = ""
        out["TRITON_INTERPRET"] = "1"
    out.update(extra)
    return out
