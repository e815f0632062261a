"""Every kernel of solforge.kernels.triton compiles for sm_90, on a machine without a GPU.

The interpreter accepts code the compiler rejects (shape and type errors, unsupported
casts), so the CPU tests alone do not show that the GPU path builds. Triton compiles to
PTX and, with the ptxas it ships, to a cubin without a driver. The compile runs in a
subprocess: the interpreter tests set TRITON_INTERPRET=1 for this whole process, and the
kernels read it at import.

Run directly (``python tests/kernels/test_triton_compile.py``) to see each kernel.
"""

import os
import subprocess
import sys

import pytest

BF16, FP32, FP16, FP8, I8, I32, I64 = (
    "*bf16", "*fp32", "*fp16", "*fp8e4nv", "*i8", "*i32", "*i64")


def _compile(kernel, ptrs, consts, floats=("eps",), num_warps=4, maxnreg=None, options=None):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    # the autotuner's kernel, or the kernel itself when it does not autotune
    fn = kernel if isinstance(kernel, triton.runtime.JITFunction) else kernel.fn
    sig = {name: "constexpr" if name in consts else ptrs.get(name)
           or ("fp32" if name in floats else "i32") for name in fn.arg_names}
    constexprs = {(fn.arg_names.index(k),): v for k, v in consts.items()}
    compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs),
                              target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": num_warps, "maxnreg": maxnreg,
                                       **(options or {})})
    assert compiled.asm["cubin"]
    print(f"sm_90 ok: {fn.__name__} {consts}", flush=True)
    return compiled


def compile_all():
    from solforge.kernels.triton import (
        activation,
        arg_reduce_dim,
        depthwise,
        dim_norm,
        fp8,
        gemm_f32x3,
        glu,
        int8,
        layernorm,
        layernorm_split,
        rmsnorm,
        reduce_dim,
        rope,
        router,
        row_argmax,
        row_cross_entropy,
        row_norm,
        row_softmax,
        scan,
    )

    for res, off in ((False, False), (True, True)):
        _compile(rmsnorm._rmsnorm_kernel,
                 dict(x_ptr=BF16, res_ptr=BF16, res_out_ptr=BF16, w_ptr=BF16, y_ptr=BF16),
                 dict(HAS_RESIDUAL=res, OFFSET_WEIGHT=off, BLOCK_N=4096), num_warps=8)
    _compile(layernorm._layernorm_kernel, dict(x_ptr=FP16, w_ptr=FP16, b_ptr=FP16, y_ptr=FP16),
             dict(HAS_WEIGHT=True, HAS_BIAS=True, BLOCK_N=2048))
    for one_tile in (True, False):
        _compile(row_softmax._softmax_kernel, dict(x_ptr=BF16, y_ptr=BF16),
                 dict(BLOCK_N=8192, ONE_TILE=one_tile), num_warps=8)
    _compile(row_softmax._softmax_pieces_kernel, dict(x_ptr=FP32, m_ptr=FP32, l_ptr=FP32),
             dict(BLOCK_N=2048), num_warps=8)
    _compile(row_softmax._softmax_pieces_write_kernel,
             dict(x_ptr=FP32, y_ptr=FP32, m_ptr=FP32, l_ptr=FP32),
             dict(BLOCK_N=2048, BLOCK_S=64), num_warps=8)
    coop = dict(x_ptr=FP32, y_ptr=FP32, m_ptr=FP32, l_ptr=FP32, cnt_ptr=I32)
    for log, phase, prefetch, warps in ((False, 0, False, 8), (True, 0, False, 8),
                                        (False, 0, True, 16), (False, 1, False, 8),
                                        (True, 2, False, 8)):
        _compile(row_softmax._softmax_coop_kernel, coop,
                 dict(CHUNK=16384, BLOCK_S=32, FALLBACK_TILE=1024, LOG=log, PHASE=phase,
                      PREFETCH=prefetch), num_warps=warps)
    _compile(row_softmax._softmax_coop_kernel, dict(coop, x_ptr=BF16, y_ptr=BF16),
             dict(CHUNK=16384, BLOCK_S=32, FALLBACK_TILE=1024, LOG=False, PHASE=0),
             num_warps=8)
    # the normalisations by row statistics: LayerNorm's per-column weight, GroupNorm's per
    # channel (per piece and per element), the two divisions; one launch and two; capped at
    # the registers two programs a SM allow, as norm_rows launches them
    norm = dict(x_ptr=FP32, y_ptr=FP32, w_ptr=FP32, b_ptr=FP32, s1_ptr=FP32, s2_ptr=FP32,
                cnt_ptr=I32)
    for stat, affine, piece_channel, phase in ((0, 1, False, 0), (0, 2, True, 0),
                                               (0, 2, False, 0), (1, 0, False, 0),
                                               (2, 0, False, 0), (0, 1, False, 1),
                                               (0, 1, False, 2)):
        _compile(row_norm._norm_kernel, norm,
                 dict(CHUNK=16384, BLOCK_S=256, FALLBACK_TILE=1024, STAT=stat, AFFINE=affine,
                      HAS_WEIGHT=affine > 0, HAS_BIAS=affine > 0,
                      PIECE_CHANNEL=piece_channel, STREAM="evict_first", KEEP="evict_last",
                      PHASE=phase),
                 num_warps=8, maxnreg=row_norm._COOP_MAXNREG)
    _compile(row_norm._norm_kernel, dict(norm, x_ptr=BF16, y_ptr=BF16, w_ptr=BF16, b_ptr=BF16),
             dict(CHUNK=4096, BLOCK_S=1, FALLBACK_TILE=1024, STAT=2, AFFINE=0,
                  HAS_WEIGHT=False, HAS_BIAS=False, PIECE_CHANNEL=True, STREAM="", KEEP="",
                  PHASE=3), num_warps=4)
    _compile(layernorm_split._stats_kernel.fn, dict(x_ptr=FP32, mean_ptr=FP32, m2_ptr=FP32),
             dict(BLOCK_N=4096), num_warps=8)
    for affine in (True, False):
        _compile(layernorm_split._apply_kernel.fn,
                 dict(x_ptr=FP32, w_ptr=FP32, b_ptr=FP32, y_ptr=FP32, mean_ptr=FP32,
                      m2_ptr=FP32),
                 dict(HAS_WEIGHT=affine, HAS_BIAS=affine, BLOCK_S=32, BLOCK_N=4096),
                 num_warps=8)
    for final, minimum in ((True, False), (False, True)):
        _compile(row_argmax._argmax_pieces_kernel,
                 dict(x_ptr=FP32, val_ptr=FP32, idx_ptr=I64, out_ptr=I64),
                 dict(BLOCK_N=2048, FINAL=final, MIN=minimum), num_warps=8)
        # KernelBench's [128, 4096, 4095] tile, and a narrow B's tall one
        _compile(arg_reduce_dim._arg_dim_kernel.fn,
                 dict(x_ptr=FP32, val_ptr=FP32, idx_ptr=I64, out_ptr=I64),
                 dict(FINAL=final, MIN=minimum, BLOCK_K=4, BLOCK_B=1024), num_warps=8)
    _compile(arg_reduce_dim._arg_dim_kernel.fn,
             dict(x_ptr=BF16, val_ptr=FP32, idx_ptr=I64, out_ptr=I64),
             dict(FINAL=True, MIN=False, BLOCK_K=512, BLOCK_B=16), num_warps=8)
    _compile(arg_reduce_dim._arg_dim_combine_kernel,
             dict(val_ptr=FP32, idx_ptr=I64, out_ptr=I64), dict(BLOCK_B=1024))
    for one_tile, rows in ((True, 2), (False, 1)):
        _compile(row_cross_entropy._ce_rows_kernel.fn,
                 dict(x_ptr=FP32, t_ptr=I64, loss_ptr=FP32),
                 dict(BLOCK_C=4096, ONE_TILE=one_tile, BLOCK_R=rows), num_warps=8)
    _compile(row_cross_entropy._ce_rows_kernel.fn, dict(x_ptr=BF16, t_ptr=I64, loss_ptr=BF16),
             dict(BLOCK_C=16, ONE_TILE=True, BLOCK_R=64))
    for mean in (True, False):
        _compile(row_cross_entropy._ce_reduce_kernel,
                 dict(loss_ptr=FP32, t_ptr=I64, out_ptr=FP32), dict(MEAN=mean, BLOCK=4096),
                 num_warps=8)
    _compile(row_argmax._argmax_combine_kernel, dict(val_ptr=FP32, idx_ptr=I64, out_ptr=I64),
             dict(BLOCK_S=64))
    # sum, mean, max and min; one row a step and several
    for op, mean, rows, ptr, block, warps in (
            (0, True, 1, BF16, 1024, 4), (0, False, 4, BF16, 1024, 4),
            (1, False, 8, FP32, 1024, 4), (2, False, 4, FP16, 1024, 4),
            (0, False, 16, FP32, 256, 2), (1, False, 16, FP32, 512, 4)):
        _compile(reduce_dim._reduce_dim_kernel.fn, dict(x_ptr=ptr, y_ptr=ptr),
                 dict(OP=op, MEAN=mean, BLOCK_B=block, ROWS=rows), floats=("inv_k",),
                 num_warps=warps)
    # rms, l2 and mean |x| over a middle dim: one register tile, and K walked twice
    for norm, ptr, block_k, one in ((0, BF16, 64, True), (1, FP32, 16, False),
                                    (2, FP16, 128, True)):
        _compile(dim_norm._dim_norm_kernel.fn, dict(x_ptr=ptr, y_ptr=ptr),
                 dict(NORM=norm, BLOCK_K=block_k, ONE_TILE=one, BLOCK_B=8192 // block_k),
                 floats=("inv_k", "eps"), num_warps=8)
    # depthwise convolutions: fp32 3x3 with a bias, a bf16 row of 4 taps; ATen's
    # ``value += w * x`` is a fused multiply-add, so the sums must be too
    for ptr, kh, kw, bias, bh, bw in ((FP32, 3, 3, True, 16, 64), (BF16, 1, 4, False, 1, 1024)):
        dw = _compile(depthwise._depthwise_body,
                      dict(x_ptr=ptr, w_ptr=ptr, b_ptr=ptr, y_ptr=ptr),
                      dict(KH=kh, KW=kw, HAS_BIAS=bias, BLOCK_H=bh, BLOCK_W=bw))
        assert "fma.rn.f32" in dw.asm["ptx"]
    dw = _compile(depthwise._depthwise_planes,
                  dict(x_ptr=FP32, w_ptr=FP32, b_ptr=FP32, y_ptr=FP32),
                  dict(KH=3, KW=3, HAS_BIAS=True, BLOCK_P=16, BLOCK_S=64), num_warps=4)
    assert "fma.rn.f32" in dw.asm["ptx"]
    # scans: ATen's order needs its roundings, so a product before the scan's sums must
    # not fuse into them (``enable_fp_fusion=False``); rows take gathers, columns a walk
    flags = dict(REVERSE=False, EXCLUSIVE=0, F64=False)
    for ptr, prod, mul, round_, rev, ex in ((FP32, False, True, False, True, 0),
                                            (BF16, True, False, True, False, 1)):
        sc = _compile(scan._scan_rows_body, dict(x_ptr=ptr, m_ptr=ptr, y_ptr=ptr),
                      dict(PROD=prod, HAS_MUL=mul, ROUND=round_, LOG_C=5, BLOCK_R=32,
                           **{**flags, "REVERSE": rev, "EXCLUSIVE": ex}),
                      options={"enable_fp_fusion": False})
        assert "fma" not in sc.asm["ptx"]
    # a program a row, chunks of 1,024 (few long rows: a top-p filter's vocabulary)
    _compile(scan._scan_rows_body, dict(x_ptr=FP32, m_ptr=FP32, y_ptr=FP32),
             dict(PROD=False, HAS_MUL=False, ROUND=False, LOG_C=10, BLOCK_R=1, **flags),
             options={"enable_fp_fusion": False})
    sc = _compile(scan._scan_cols_body, dict(x_ptr=FP32, m_ptr=FP32, y_ptr=FP32),
                  dict(PROD=False, HAS_MUL=True, ROUND=False, BLOCK_I=256,
                       **{**flags, "EXCLUSIVE": 1}), options={"enable_fp_fusion": False})
    assert "fma" not in sc.asm["ptx"]
    for renorm in (True, False):
        _compile(router._softmax_topk_kernel, dict(x_ptr=FP32, w_ptr=BF16, id_ptr=I64),
                 dict(K=2, RENORM=renorm, BLOCK_R=64, BLOCK_E=8))
    for act in (1, 2, 3):
        _compile(activation._bias_act_kernel, dict(x_ptr=BF16, b_ptr=BF16, y_ptr=BF16),
                 dict(HAS_BIAS=True, ACT=act, BLOCK_N=2048))
    _compile(glu._glu_kernel, dict(gate_ptr=BF16, up_ptr=BF16, y_ptr=BF16),
             dict(ACT=2, BLOCK_N=2048))
    for pos, bias in ((False, False), (True, True)):
        _compile(rope._rope_kernel,
                 dict(q_ptr=BF16, k_ptr=BF16, qo_ptr=BF16, ko_ptr=BF16, qb_ptr=BF16,
                      kb_ptr=BF16, cos_ptr=BF16, sin_ptr=BF16, pos_ptr=I64),
                 dict(HAS_POS=pos, HAS_QBIAS=bias, HAS_KBIAS=bias, BLOCK_H=4, BLOCK_HALF=64))
    _compile(rope._cos_sin_kernel,
             dict(pos_ptr=I64, inv_freq_ptr=FP32, cos_ptr=BF16, sin_ptr=BF16),
             dict(BLOCK_T=16, BLOCK_HALF=64))
    _compile(fp8._absmax_kernel, dict(x_ptr=BF16, amax_ptr=FP32), dict(BLOCK=4096), num_warps=8)
    for dynamic in (True, False):
        _compile(fp8._quant_tensor_kernel,
                 dict(x_ptr=BF16, q_ptr=FP8, amax_ptr=FP32, scale_ptr=FP32),
                 dict(DYNAMIC=dynamic, BLOCK=4096), num_warps=8)
    _compile(fp8._quant_group_kernel, dict(x_ptr=BF16, q_ptr=FP8, s_ptr=FP32),
             dict(GROUP=128, ROWS=8))
    _compile(fp8._quant_block_kernel, dict(x_ptr=BF16, q_ptr=FP8, s_ptr=FP32),
             dict(BLOCK=128), num_warps=8)
    _compile(fp8._dequant_kernel, dict(q_ptr=FP8, s_ptr=FP32, y_ptr=BF16),
             dict(TILE_M=32, TILE_N=256), num_warps=8)
    gemm = dict(a_ptr=FP32, b_ptr=FP32, bias_ptr=FP32, r_ptr=FP32, c_ptr=FP32)
    tile = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=16, GROUP_M=8)
    steps = gemm_f32x3.STEPS
    for ops in ((steps["gelu"], steps["mul"], steps["leaky_relu"], steps["residual"]),
                (steps["relu"], steps["rsub"], steps["tanh"], steps["clamp_max"])):
        ptx = _compile(gemm_f32x3._mm_kernel, gemm,
                       dict(tile, HAS_BIAS=True, OP1=ops[0], OP2=ops[1], OP3=ops[2],
                            OP4=ops[3], PRECISION="tf32x3"),
                       floats=("c1", "c2", "c3", "c4"), num_warps=8).asm["ptx"]
        assert "wgmma.mma_async" in ptx  # the three TF32 products run on the tensor cores
    ptx = _compile(gemm_f32x3._mm_kernel, gemm,
                   dict(tile, HAS_BIAS=False, OP1=0, OP2=0, OP3=0, OP4=0, PRECISION="ieee"),
                   floats=("c1", "c2", "c3", "c4"), num_warps=8).asm["ptx"]
    assert "wgmma" not in ptx and "mma.sync" not in ptx  # ieee: the SIMT units
    ptx = _compile(int8._int8_token_kernel, dict(x_ptr=BF16, q_ptr=I8, s_ptr=FP32),
                   dict(BLOCK_N=4096), num_warps=8).asm["ptx"]
    # an FMA would round the exact product where the reference rounds the fp32 one
    assert "fma" not in ptx


def test_kernels_compile_for_sm90(tmp_path):
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # a real compile, and nothing left in ~/.triton
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when unset
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


if __name__ == "__main__":
    assert os.environ.get("TRITON_INTERPRET") != "1", "unset TRITON_INTERPRET to compile"
    compile_all()
