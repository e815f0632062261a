"""rmsnorm_llama3 in CUDA C++ with inline PTX, compiled by NVRTC (solforge.kernels.cuda).

One block per row. Pass 1 reads the row with 16-byte non-coherent loads
(``ld.global.nc.v4.u32``: eight bf16 values per instruction) and sums squares in fp32;
a warp-shuffle + shared-memory reduction gives the block's sum. Pass 2 re-reads the row
(it is still in L2: 8-16 KB) and writes ``w * bf16(x * rsqrt(mean + eps))``, rounding
with ``cvt.rn.bf16.f32`` exactly where the reference rounds (HF LlamaRMSNorm rounds
``h`` to the input dtype before the weight multiply).

Rows whose length is not a multiple of 8, or that are not 16-byte aligned, take a scalar
path. Not covered: dtypes other than bf16; hidden sizes above 2**31.
"""

import torch
import torch.nn as nn

from solforge.kernels import cuda

SRC = r"""
typedef unsigned short bf16_t;

__device__ __forceinline__ float bf16_to_f32(bf16_t b) {
    return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    bf16_t r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}
__device__ __forceinline__ uint4 ld_nc_v4(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ float lo(unsigned int v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi(unsigned int v) { return __uint_as_float(v & 0xffff0000u); }

__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) part[warp] = v;
    __syncthreads();
    int nwarps = (blockDim.x + 31) >> 5;
    v = (threadIdx.x < nwarps) ? part[threadIdx.x] : 0.0f;
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) part[0] = v;
    __syncthreads();
    return part[0];
}

__device__ __forceinline__ unsigned int pack(float a, float b, float wa, float wb) {
    // round x*inv to bf16 first, then multiply by the weight and round again
    float ya = wa * bf16_to_f32(f32_to_bf16(a));
    float yb = wb * bf16_to_f32(f32_to_bf16(b));
    return (unsigned int)f32_to_bf16(ya) | ((unsigned int)f32_to_bf16(yb) << 16);
}

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_bf16(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w,
             bf16_t* __restrict__ y, int hidden, float eps, int vectorized) {
    const bf16_t* xr = x + (size_t)blockIdx.x * hidden;
    bf16_t* yr = y + (size_t)blockIdx.x * hidden;
    float ss = 0.0f;
    if (vectorized) {
        for (int i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) {
            uint4 v = ld_nc_v4(xr + i);
            unsigned int u[4] = {v.x, v.y, v.z, v.w};
            #pragma unroll
            for (int k = 0; k < 4; ++k) ss += lo(u[k]) * lo(u[k]) + hi(u[k]) * hi(u[k]);
        }
    } else {
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
            float f = bf16_to_f32(xr[i]);
            ss += f * f;
        }
    }
    float inv = rsqrtf(block_sum(ss) / (float)hidden + eps);
    if (vectorized) {
        for (int i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) {
            uint4 v = ld_nc_v4(xr + i), g = ld_nc_v4(w + i), o;
            o.x = pack(lo(v.x) * inv, hi(v.x) * inv, lo(g.x), hi(g.x));
            o.y = pack(lo(v.y) * inv, hi(v.y) * inv, lo(g.y), hi(g.y));
            o.z = pack(lo(v.z) * inv, hi(v.z) * inv, lo(g.z), hi(g.z));
            o.w = pack(lo(v.w) * inv, hi(v.w) * inv, lo(g.w), hi(g.w));
            *reinterpret_cast<uint4*>(yr + i) = o;
        }
    } else {
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
            float h = bf16_to_f32(f32_to_bf16(bf16_to_f32(xr[i]) * inv));
            yr[i] = f32_to_bf16(bf16_to_f32(w[i]) * h);
        }
    }
}
"""
KERNEL = cuda.compile(SRC, "rmsnorm_bf16")


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-5, dtype=torch.bfloat16):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        hidden = x.shape[-1]
        rows = x.numel() // hidden
        y = torch.empty_like(x)
        w = self.weight.contiguous()
        vec = int(hidden % 8 == 0 and x.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0
                  and y.data_ptr() % 16 == 0)
        if rows:
            KERNEL(grid=(rows,), block=(256,), args=(x, w, y, hidden, self.eps, vec))
        return y
