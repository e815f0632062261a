"""The fast CUDA C++ path: raw kernels compiled by NVRTC, launched on torch tensors.

``torch.utils.cpp_extension.load_inline`` builds a whole Python extension with nvcc and a host
compiler (about 28 s cold, benchmarks/results/2026-11-30-h200). Most candidate kernels need
none of that: a ``__global__`` function and a launch. This module compiles CUDA C++ (inline PTX
included) to a cubin with NVRTC in well under a second, caches it by content hash, and launches
it through the CUDA driver API on the current torch stream::

    from solforge.kernels import cuda

    SRC = r'''
    extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i];
    }'''
    scale = cuda.compile(SRC, "scale")                 # at import: compiles, even on a CPU
    scale(grid=(cuda.cdiv(n, 256),), block=(256,), args=(x, y, 2.0, n))   # on a GPU

Kernels must be ``extern "C"`` (no C++ name mangling). Argument types are read from the
kernel's declaration: pointers take tensors (their data pointer) or integers; ``int``,
``unsigned``, ``int64_t``/``long long``, ``size_t``, ``float``, ``double`` and ``bool`` take
Python numbers. Pass ``signature=`` to override (e.g. for templated or macro-built code).
A launch with ``shared_mem=`` above 48 KB needs ``kern.set_max_dynamic_shared(nbytes)`` first.

The target architecture is, in order: ``arch=``, ``$SOLFORGE_CUDA_ARCH`` (the judge sets
it for build steps on machines without a GPU), the current GPU's, else ``sm_90``.

Needs ``cuda-python`` (``pip install solforge[nvrtc]``; its NVRTC library comes from the
``nvidia-cuda-nvrtc`` wheel or a CUDA toolkit). Not covered: cooperative launches,
cluster dimensions, tensor-map (TMA) descriptors as parameters, dynamic parallelism.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class NVRTCError(RuntimeError):
    """NVRTC rejected the source; the message holds its log."""


class LaunchError(RuntimeError):
    """A driver-API call around a launch failed."""


_CTYPES = {
    "ptr": ctypes.c_void_p, "i32": ctypes.c_int32, "u32": ctypes.c_uint32,
    "i64": ctypes.c_int64, "u64": ctypes.c_uint64, "f32": ctypes.c_float,
    "f64": ctypes.c_double, "bool": ctypes.c_bool,
}
_C_TO_KIND = [
    (re.compile(r"\*"), "ptr"),
    (re.compile(r"\b(unsigned\s+long\s+long|uint64_t|size_t|unsigned\s+long)\b"), "u64"),
    (re.compile(r"\b(long\s+long|int64_t|long|ptrdiff_t)\b"), "i64"),
    (re.compile(r"\b(unsigned(\s+int)?|uint32_t)\b"), "u32"),
    (re.compile(r"\b(int|int32_t)\b"), "i32"),
    (re.compile(r"\bfloat\b"), "f32"),
    (re.compile(r"\bdouble\b"), "f64"),
    (re.compile(r"\bbool\b"), "bool"),
]


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _cache_root() -> Path:
    from solforge import env

    d = env.cache_dir() / "nvrtc"
    d.mkdir(parents=True, exist_ok=True)
    return d


def target_arch(arch: str | None = None) -> str:
    if arch:
        return arch
    from solforge import env

    if env.cuda_arch():
        return env.cuda_arch()
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}{'a' if major >= 9 else ''}"
    except Exception:
        pass
    return "sm_90a"


def parse_signature(source: str, name: str) -> list[str]:
    """Argument kinds of ``extern "C" __global__ void name(...)`` in ``source``."""
    m = None
    for cand in re.finditer(r"\b" + re.escape(name) + r"\s*\(([^)]*)\)", source):
        # the declaration: `__global__ void` (and perhaps __launch_bounds__) just before it
        head = source[max(0, cand.start() - 200):cand.start()]
        if re.search(r"__global__[^;{}]*\bvoid\b[^;{}]*$", head):
            m = cand
            break
    if m is None:
        raise NVRTCError(f"no `__global__ void {name}(...)` in the source; check the name or "
                         "pass signature='ptr,ptr,i32,...'")
    params = [p.strip() for p in m.group(1).split(",") if p.strip()]
    kinds = []
    for p in params:
        for rx, kind in _C_TO_KIND:
            if rx.search(p):
                kinds.append(kind)
                break
        else:
            raise NVRTCError(f"cannot tell the type of parameter `{p}` of {name}; pass "
                             "signature='ptr,i32,...'")
    return kinds


def _check(result: Any, what: str) -> Any:
    err = result[0] if isinstance(result, tuple) else result
    rest = result[1:] if isinstance(result, tuple) else ()
    if int(err) != 0:
        raise LaunchError(f"{what} failed: {err!r}")
    return rest[0] if len(rest) == 1 else rest


def compile_cubin(source: str, name: str, options: Sequence[str] = (), arch: str | None = None
                  ) -> tuple[bytes, str]:
    """NVRTC-compile ``source`` for ``arch``; returns (cubin, log). Cached by content."""
    arch = target_arch(arch)
    opts = [f"--gpu-architecture={arch}", "-default-device", "-std=c++17", *options]
    key = hashlib.sha256(("\0".join([source, name, *opts])).encode()).hexdigest()[:24]
    path = _cache_root() / f"{key}.cubin"
    if path.exists():
        return path.read_bytes(), ""
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise NVRTCError("the NVRTC path needs cuda-python: pip install 'solforge[nvrtc]'"
                         ) from e
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    if int(err) != 0:
        raise NVRTCError(f"nvrtcCreateProgram: {err!r}")
    try:
        include = _cuda_include()
        all_opts = [o.encode() for o in opts] + ([f"-I{include}".encode()] if include else [])
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(all_opts), all_opts)
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log_s = log.decode(errors="replace").rstrip("\x00 \n")
        if int(err) != 0:
            raise NVRTCError(f"NVRTC could not compile {name} for {arch}:\n{log_s}")
        _, n = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * n
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        if int(err) != 0:
            raise NVRTCError(f"nvrtcGetCUBIN: {err!r}")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(cubin)
    os.replace(tmp, path)
    return cubin, log_s


def _cuda_include() -> str | None:
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and Path(root, "include", "cuda_fp16.h").exists():
            return str(Path(root, "include"))
    return None


@dataclass
class Kernel:
    """A compiled kernel; call it to launch on the current torch CUDA stream."""

    name: str
    cubin: bytes
    signature: list[str]
    arch: str
    log: str = ""
    _functions: dict[int, Any] = field(default_factory=dict, repr=False)

    def _function(self) -> Any:
        import torch
        from cuda.bindings import driver

        dev = torch.cuda.current_device()
        fn = self._functions.get(dev)
        if fn is not None:
            return fn
        torch.cuda.init()
        ctx = _check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if ctx is None or int(ctx) == 0:
            ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        module = _check(driver.cuModuleLoadData(self.cubin), f"loading {self.name}'s cubin")
        fn = _check(driver.cuModuleGetFunction(module, self.name.encode()),
                    f"finding {self.name}")
        self._functions[dev] = fn
        return fn

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        """Raise the kernel's dynamic shared-memory limit (needed above 48 KB)."""
        from cuda.bindings import driver

        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(driver.cuFuncSetAttribute(self._function(), attr, int(nbytes)),
               "cuFuncSetAttribute")

    def __call__(self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
                 shared_mem: int = 0, stream: Any = None) -> None:
        import torch
        from cuda.bindings import driver

        if len(args) != len(self.signature):
            raise TypeError(f"{self.name} takes {len(self.signature)} arguments "
                            f"({','.join(self.signature)}), got {len(args)}")
        values, types = [], []
        for a, kind in zip(args, self.signature):
            if kind == "ptr":
                values.append(a.data_ptr() if isinstance(a, torch.Tensor) else int(a or 0))
            elif kind in ("f32", "f64"):
                values.append(float(a))
            elif kind == "bool":
                values.append(bool(a))
            else:
                values.append(int(a))
            types.append(_CTYPES[kind])
        g = tuple(grid) + (1,) * (3 - len(grid))
        b = tuple(block) + (1,) * (3 - len(block))
        if stream is None:
            stream = torch.cuda.current_stream().cuda_stream
        elif hasattr(stream, "cuda_stream"):
            stream = stream.cuda_stream
        _check(driver.cuLaunchKernel(self._function(), *g, *b, int(shared_mem),
                                     driver.CUstream(int(stream)),
                                     (tuple(values), tuple(types)), 0),
               f"launching {self.name}")


def compile(source: str, name: str, options: Sequence[str] = ("-O3", "--use_fast_math"),
            arch: str | None = None, signature: str | Sequence[str] | None = None) -> Kernel:
    """Compile ``name`` from ``source`` with NVRTC (cached); see the module docstring."""
    arch = target_arch(arch)
    if "-O3" in options:
        options = [o for o in options if o != "-O3"]  # NVRTC optimises by default
    if signature is None:
        kinds = parse_signature(source, name)
    else:
        kinds = signature.split(",") if isinstance(signature, str) else list(signature)
        kinds = [k.strip() for k in kinds]
        for k in kinds:
            if k not in _CTYPES:
                raise ValueError(f"unknown argument kind {k!r}; use {sorted(_CTYPES)}")
    cubin, log = compile_cubin(source, name, options, arch)
    return Kernel(name=name, cubin=cubin, signature=kinds, arch=arch, log=log)
