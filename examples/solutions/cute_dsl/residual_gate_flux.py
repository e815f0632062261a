"""residual_gate_flux in CuTe DSL (NVIDIA CUTLASS Python DSL): out = x + gate[:, None] * y.

One fused pass over bf16 data (the reference launches a broadcast multiply and an add, and
writes the product in between). Each thread handles one element; the gate is indexed
from the flat position, products are rounded to bf16 before the add as the reference
rounds them. Layouts are marked dynamic, so one compilation serves every shape.

Not covered: vectorised 16-byte accesses (a CuTe TV layout would add them), dtypes other
than the problem's bf16, non-contiguous inputs (made contiguous first).
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack

THREADS = 256


@cute.kernel
def _gated_residual(x: cute.Tensor, y: cute.Tensor, g: cute.Tensor, out: cute.Tensor,
                    n: cutlass.Int32, per_sample: cutlass.Int32, dim: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * THREADS + tidx
    if i < n:
        gi = (i // per_sample) * dim + i % dim
        prod = (g[gi].to(cutlass.Float32) * y[i].to(cutlass.Float32)).to(cutlass.BFloat16)
        out[i] = (x[i].to(cutlass.Float32) + prod.to(cutlass.Float32)).to(cutlass.BFloat16)


@cute.jit
def _launch(x: cute.Tensor, y: cute.Tensor, g: cute.Tensor, out: cute.Tensor,
            n: cutlass.Int32, per_sample: cutlass.Int32, dim: cutlass.Int32,
            stream: cuda.CUstream):
    _gated_residual(x, y, g, out, n, per_sample, dim).launch(
        grid=((n + THREADS - 1) // THREADS, 1, 1), block=(THREADS, 1, 1), stream=stream)


_compiled = {}


def _flat(t: torch.Tensor):
    return from_dlpack(t.reshape(-1), assumed_align=2).mark_layout_dynamic()


def gated_residual(x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    x, y, gate = x.contiguous(), y.contiguous(), gate.contiguous()
    out = torch.empty_like(x)
    b, t, d = x.shape
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    args = (_flat(x), _flat(y), _flat(gate), _flat(out), cutlass.Int32(x.numel()),
            cutlass.Int32(t * d), cutlass.Int32(d), stream)
    fn = _compiled.get(x.dtype)
    if fn is None:
        fn = _compiled[x.dtype] = cute.compile(_launch, *args)
    fn(*args)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, hidden_states, attn_output, gate):
        return gated_residual(hidden_states, attn_output, gate)
