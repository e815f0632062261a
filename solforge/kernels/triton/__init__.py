"""Hand-written Triton kernels for the patterns real models repeat, as plain functions.

Each function takes torch tensors, allocates its output, picks the grid and launches an
autotuned kernel; each module's docstring says what it does not cover. Arithmetic is
fp32 whatever the storage dtype, and outputs are rounded the way the eager reference
(HF transformers, vLLM, DeepSeek) rounds them.

On a machine without a GPU the kernels run under Triton's interpreter: set
``TRITON_INTERPRET=1`` before importing this package (``solforge bench`` does, on a CPU).
"""

from solforge.kernels.triton.activation import bias_act
from solforge.kernels.triton.arg_reduce_dim import argmax_dim, argmin_dim
from solforge.kernels.triton.batchnorm import batch_norm_act
from solforge.kernels.triton.depthwise import depthwise_conv, depthwise_conv_raw
from solforge.kernels.triton.dim_norm import div_by_dim_norm
from solforge.kernels.triton.row_cross_entropy import cross_entropy
from solforge.kernels.triton.fp8 import (
    fp8_dequant,
    fp8_quant_per_block,
    fp8_quant_per_group,
    fp8_quant_per_tensor,
)
from solforge.kernels.triton.gemm_f32x3 import linear_f32x3, matmul_f32x3
from solforge.kernels.triton.glu import geglu, swiglu
from solforge.kernels.triton.groupnorm import group_norm, instance_norm
from solforge.kernels.triton.int8 import int8_quant_per_token
from solforge.kernels.triton.layernorm import layer_norm
from solforge.kernels.triton.reduce_dim import max_dim, min_dim, sum_dim
from solforge.kernels.triton.rmsnorm import add_rms_norm, rms_norm
from solforge.kernels.triton.row_norm import div_by_row_norm
from solforge.kernels.triton.rope import rope_cos_sin, rotary_embedding
from solforge.kernels.triton.router import softmax_topk
from solforge.kernels.triton.row_argmax import argmax, argmin
from solforge.kernels.triton.row_softmax import log_softmax, softmax
from solforge.kernels.triton.scan import cumprod, cumsum, cumulative

__all__ = [
    "add_rms_norm",
    "argmax",
    "argmax_dim",
    "argmin",
    "argmin_dim",
    "batch_norm_act",
    "bias_act",
    "cross_entropy",
    "cumprod",
    "cumsum",
    "cumulative",
    "depthwise_conv",
    "depthwise_conv_raw",
    "div_by_dim_norm",
    "div_by_row_norm",
    "fp8_dequant",
    "fp8_quant_per_block",
    "fp8_quant_per_group",
    "fp8_quant_per_tensor",
    "geglu",
    "group_norm",
    "instance_norm",
    "int8_quant_per_token",
    "layer_norm",
    "linear_f32x3",
    "matmul_f32x3",
    "max_dim",
    "min_dim",
    "rms_norm",
    "rope_cos_sin",
    "rotary_embedding",
    "softmax",
    "log_softmax",
    "softmax_topk",
    "sum_dim",
    "swiglu",
]
