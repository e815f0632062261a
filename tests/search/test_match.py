"""Graph matching: every pattern is found where the corpus spells it, nowhere else, and
never when a detail (a cast, a dim, a mask, a dtype) makes the substitution inexact."""

from __future__ import annotations

import textwrap

import pytest

from solforge.problems import builtin_problems, load_problem
from solforge.problems.loader import import_file
from solforge.search.align import trace_reference
from solforge.search.fxsource import forward_source
from solforge.search.match import LibraryFunction, find_matches, substitute
from solforge.search.trace import TraceError

EXPECTED = {
    "rmsnorm_llama3": ["rms_norm"],
    "rmsnorm_gemma2": ["rms_norm"],
    "add_rmsnorm_llama_qwen": ["add_rms_norm"],
    "layernorm_vit": ["layer_norm"],
    "layernorm_whisper": ["layer_norm"],
    "vit_patch_embed_layernorm_clip": ["layer_norm"],
    "layernorm_linear_gelu_vit": ["layer_norm", "bias_act"],
    "softmax_attn_scores_llama3": ["softmax"],
    "softmax_logits_fp32": ["softmax"],
    "moe_router_mixtral": ["softmax_topk"],  # softmax, top-k, renormalised, cast
    "mla_decode_deepseek_v3": ["softmax"],  # two score terms: not plain attention
    "swiglu_mlp_llama3": ["swiglu"],
    "geglu_mlp_gemma": ["geglu"],
    "bias_gelu_whisper": ["bias_act"],
    "gelu_tanh_gemma2": ["bias_act"],
    "silu_llama3": ["bias_act"],
    "causal_conv1d_silu_mamba": ["depthwise_conv", "bias_act"],
    "conv_groupnorm_silu_sd_unet": ["group_norm", "bias_act"],
    "whisper_conv_frontend": ["bias_act", "bias_act"],
    "rope_llama3": ["rope"],
    "qkv_bias_rope_qwen25": ["rope"],
    "causal_mha_eager_llama2": ["sdpa"],
    "vit_attention_siglip": ["sdpa"],
    "gqa_prefill_llama3": ["gqa"],
    "gqa_decode_llama3": ["gqa"],  # a padding mask, kept as it is
    "sliding_window_mistral_gemma3": ["gqa"],  # a sliding-window mask, kept as it is
    "attention_block_llama3": ["gqa", "rope"],  # n_rep from two attributes: an expression
    "fp8_quant_group_deepseek_v3": ["fp8_quant_per_group"],
    "fp8_quant_per_tensor_llama3": ["fp8_quant_per_tensor"],
    "fp8_gemm_per_tensor_llama3": ["lowp_gemm"],  # per-tensor scales on both operands
    "int8_gemm_w8a8_smoothquant": ["lowp_gemm"],  # scales applied after the mm already
    "argmax_greedy_llama3": ["argmax"],
    "cross_entropy_llama3": ["cross_entropy"],  # the logits' fp32 upcast read as bf16
    "router_logits_deepseek_v3": ["lowp_gemm"],  # linear(h.float(), W.float()), bf16 h, W
    "moe_sum_deepseek_v3": ["sum_dim"],  # [tokens, top_k, hidden].sum(1)
    "mean_pool_vit": ["sum_dim"],  # x[:, 1:].mean(dim=1): a strided view, no copy
}
# the forward corpus of issue 28 (the patterns its references spell)
EXPECTED |= {
    "attention_sinks_gpt_oss": ["softmax"],
    "codebook_embed_sum_musicgen": ["sum_dim"],
    "dt_bc_norm_jamba": ["rms_norm", "rms_norm", "rms_norm"],
    "softcap_attention_gemma2": ["softmax"],
    "top_p_filter_llama3": ["softmax", "softmax", "cumulative"],  # the sorted probs' cumsum
    # A's cumsum along the chunk, then segsum's cumsum (dim -2) twice
    "ssd_chunk_scan_mamba2": ["cumulative", "cumulative", "cumulative"],
    "adaln_modulate_dit": ["layer_norm", "bias_act"],
    "alibi_attention_bloom": ["sdpa_bias"],  # ALiBi bias + causal mask, fp32 chain
    "bottleneck_resnet50": ["batch_norm", "batch_norm", "batch_norm"],
    "conv_module_conformer": ["layer_norm", "batch_norm", "depthwise_conv", "bias_act"],
    "convnext_block": ["layer_norm", "depthwise_conv", "bias_act"],
    "decomposed_relpos_attention_sam": ["softmax"],
    "embeddings_layernorm_bert": ["layer_norm"],
    "feature_conv_wav2vec2": ["group_norm", "bias_act"],
    "fused_gate_up_mlp_phi3": ["swiglu"],
    "gated_rmsnorm_mamba2": ["swiglu"],
    "geglu_ff_sd_unet": ["bias_act"],
    "geglu_mlp_modernbert": ["bias_act"],
    "gelu_mlp_starcoder2": ["bias_act"],
    "gelu_new_mlp_gpt2": ["bias_act"],
    "joint_attention_sd3": ["rms_norm", "rms_norm", "rms_norm", "rms_norm"],
    "layernorm1p_nemotron": ["layer_norm"],
    "layerscale_mlp_dinov2": ["layer_norm", "bias_act"],
    "hardswish_se_mobilenetv3": ["batch_norm", "batch_norm", "batch_norm", "depthwise_conv"],
    "mbconv_se_efficientnet": ["batch_norm", "batch_norm", "batch_norm", "depthwise_conv",
                               "bias_act", "bias_act", "bias_act"],
    "mix_ffn_segformer": ["bias_act"],
    "mm_projector_llava": ["bias_act"],
    "moe_router_group_limited_deepseek_v2": ["softmax"],
    "moe_router_qwen3_moe": ["softmax_topk"],
    "moe_router_shared_llama4": ["swiglu"],
    "moe_router_topk_dbrx": ["softmax_topk"],
    "patch_merging_swin": ["layer_norm"],
    "pos_conv_embed_wav2vec2": ["bias_act"],
    "qk_norm_rope_flux": ["rms_norm", "rms_norm"],
    "qk_norm_rope_gemma3": ["rms_norm", "rms_norm"],
    "qk_norm_rope_qwen3": ["rms_norm", "rms_norm"],
    "qk_proj_norm_olmo2": ["rms_norm", "rms_norm"],
    "rel_bias_softmax_t5": ["softmax"],
    "relu_ffn_opt": ["layer_norm"],
    "scaled_residual_rmsnorm_granite": ["add_rms_norm"],
    "softcap_decode_grok1": ["softmax"],
    "sppf_yolov8": ["bias_act", "bias_act"],
    "timestep_embedder_dit": ["bias_act"],
    "window_attention_swin": ["sdpa_bias"],  # relative position bias table
    "contrastive_logits_clip": ["row_norm", "row_norm"],  # embeddings / their L2 norm
    "sigmoid_loss_siglip": ["row_norm", "row_norm"],
    "vae_mid_attention_sd": ["group_norm"],  # (its fp32 output feeds linear maps, no conv)
}
# backward problems: the weight and bias gradients are sums over the tokens (dim 0)
EXPECTED |= {
    "add_rmsnorm_bwd_mistral": ["sum_dim"],
    "bias_gelu_bwd_bert": ["sum_dim"],
    "layernorm_bwd_bert": ["sum_dim", "sum_dim"],
    "layernorm_bwd_gpt2": ["sum_dim", "sum_dim"],
    "layernorm_bwd_vit": ["sum_dim", "sum_dim"],
    "layerscale_bwd_dinov2": ["sum_dim"],
    "mlp_bwd_whisper": ["sum_dim", "sum_dim"],
    "rmsnorm_bwd_gemma2": ["sum_dim"],
    "rmsnorm_bwd_llama3": ["sum_dim"],
    "rmsnorm_bwd_qwen2_5": ["sum_dim"],
    "rmsnorm_bwd_t5": ["sum_dim"],
}


def _kinds_by_problem() -> dict[str, list[str] | None]:
    out: dict[str, list[str] | None] = {}
    for p in builtin_problems():
        try:
            tr = trace_reference(p, import_file(p.path))
        except TraceError:
            out[p.name] = None
            continue
        out[p.name] = [m.kind for m in find_matches(tr)]
    return out


def test_corpus_matches_exactly_the_expected_patterns():
    found = _kinds_by_problem()
    for name, kinds in EXPECTED.items():
        assert found[name] == kinds, (name, found[name])
    # everything else traced finds nothing: GEMMs, embeddings, reductions, fp8/int8
    # GEMMs, int8 quantization
    others = {k: v for k, v in found.items() if k not in EXPECTED and v is not None}
    assert len(others) >= 13
    assert all(v == [] for v in others.values()), others


def _problem(tmp_path, name: str, forward: str, inputs: str, init: str = "",
             precision: str = "bf16", params: str = "x"):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent('''
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        SOLFORGE = {"precision": "%s", "workloads": [{"name": "small", "params": {}, "cpu": True}]}


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                %s

            def forward(self, %s):
                %s


        def get_inputs():
            return %s


        def get_init_inputs():
            return []
    ''') % (precision, init or "pass", params, forward, inputs))
    p = load_problem(path)
    return trace_reference(p, import_file(p.path))


BF16_X = "[torch.randn(4, 64, dtype=torch.bfloat16)]"
W = "self.weight = nn.Parameter(torch.ones(64, dtype=torch.bfloat16))"


RMS = "h = x.float(); h = h * torch.rsqrt(h.pow(2).mean({dim}, keepdim=True) + 1e-6); "
VARIANTS = [
    # RMSNorm whose weight multiplies before the rounding (neither Llama's nor Gemma's)
    ("x", RMS.format(dim=-1) + "return (h * self.weight.float()).to(x.dtype)", BF16_X, W,
     "rms_norm"),
    # the mean over the wrong dim
    ("x", RMS.format(dim=0) + "return self.weight * h.to(x.dtype)", BF16_X, W, "rms_norm"),
    # softmax over dim 0 of a 2-D tensor
    ("x", "return F.softmax(x, dim=0)", BF16_X, "", "softmax"),
    # attention with an additive mask that is not causal: not ``sdpa``'s (``sdpa_bias``
    # takes it: test_attention_bias.py)
    ("q, k, v, m", ("s = torch.matmul(q, k.transpose(-2, -1)) * 0.125 + m; "
                    "return torch.matmul(F.softmax(s, dim=-1), v)"),
     "[torch.randn(1, 2, 8, 16) for _ in range(3)] + [torch.randn(8, 8)]", "", "sdpa"),
    # keys repeated along another dim than the heads': not a grouped-query pairing
    ("q, k, v", ("k = k[:, :, :, None].expand(1, 2, 8, 2, 16).reshape(1, 2, 16, 16); "
                 "v = v[:, :, :, None].expand(1, 2, 8, 2, 16).reshape(1, 2, 16, 16); "
                 "return F.scaled_dot_product_attention(q, k, v)"),
     "[torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)]", "",
     "gqa"),
    # an FP8 operand scaled per element (as block scales expand to): does not commute
    ("a, b, s", "return torch.matmul(a.float() * s, b.float().t())",
     ("[torch.randn(4, 16).to(torch.float8_e4m3fn), torch.randn(8, 16).to(torch.float8_e4m3fn),"
      " torch.rand(4, 16)]"), "", "lowp_gemm"),
    # fp32 operands (not upcast from a narrower type): TF32 would round them
    ("a, b", "return torch.mm(a.float(), b.float().t())",
     "[torch.randn(4, 16), torch.randn(8, 16)]", "", "lowp_gemm"),
    # a linear with a bias: not this pattern's (the bias is added in fp32 after)
    ("a, b, c", "return F.linear(a.float(), b.float(), c)",
     "[torch.randn(4, 16, dtype=torch.bfloat16), torch.randn(8, 16, dtype=torch.bfloat16), "
     "torch.randn(8)]", "", "lowp_gemm"),
    # the repeated keys used again after the attention: the copy is needed anyway
    ("q, k, v", ("k = k[:, :, None].expand(1, 2, 2, 8, 16).reshape(1, 4, 8, 16); "
                 "v = v[:, :, None].expand(1, 2, 2, 8, 16).reshape(1, 4, 8, 16); "
                 "return F.scaled_dot_product_attention(q, k, v) + k"),
     "[torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)]", "",
     "gqa"),
    # top-k of a softmax that is used elsewhere too, or unsorted: not the router kernel
    ("x", "p = x.softmax(-1, dtype=torch.float32); w, i = torch.topk(p, 2, dim=-1); "
          "return w, i, p", "[torch.randn(4, 8)]", "", "softmax_topk"),
    ("x", "p = x.softmax(-1, dtype=torch.float32); w, i = torch.topk(p, 2, sorted=False); "
          "return w, i", "[torch.randn(4, 8)]", "", "softmax_topk"),
    # argmax of the flattened tensor, or of integers: not the kernels'
    ("x", "return torch.argmax(x)", "[torch.randn(4, 64)]", "", "argmax"),
    ("x", "return torch.argmax(x, dim=0)", "[torch.randint(0, 9, (4, 64))]", "", "argmax"),
    ("x", "return x.argmin(1, keepdim=True)", "[torch.randint(0, 9, (4, 64))]", "", "argmin"),
    # sums over the last dim, several dims, or into another dtype
    ("x", "return x.sum(-1)", "[torch.randn(4, 8, 64)]", "", "sum_dim"),
    ("x", "return x.sum((0, 1))", "[torch.randn(4, 8, 64)]", "", "sum_dim"),
    ("x", "return x.sum(1, dtype=torch.float32)",
     "[torch.randn(4, 8, 64, dtype=torch.bfloat16)]", "", "sum_dim"),
    # exact-erf GELU gate: no library GeGLU (the activation alone is still a bias_act)
    ("g, u", "return F.gelu(g) * u", "[torch.randn(4, 64), torch.randn(4, 64)]", "", "geglu"),
    # rotate-half with a cos table in fp32 and q in bf16: the products round differently
    ("q, c, s", ("h = q.shape[-1] // 2; r = torch.cat((-q[..., h:], q[..., :h]), dim=-1); "
                 "return q * c + r * s"),
     ("[torch.randn(1, 2, 3, 8, dtype=torch.bfloat16), torch.randn(1, 1, 3, 8), "
      "torch.randn(1, 1, 3, 8)]"), "", "rope"),
]


@pytest.mark.parametrize("params,forward,inputs,init,absent", VARIANTS)
def test_inexact_variants_are_not_substituted(tmp_path, params, forward, inputs, init, absent):
    tr = _problem(tmp_path, "variant", forward, inputs, init, params=params)
    kinds = [m.kind for m in find_matches(tr)]
    assert absent not in kinds, kinds


def test_substitution_keeps_parameter_names_and_drops_the_replaced_ops(tmp_path):
    tr = _problem(tmp_path, "rms", "h = x.to(torch.float32);"
                  " h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6);"
                  " return self.weight * h.to(x.dtype)", BF16_X, W)
    (m,) = find_matches(tr)
    assert m.kind == "rms_norm" and m.levers == ("library_kernel", "fusion")
    fn = next(c for c in m.calls if isinstance(c, LibraryFunction))
    src = forward_source(substitute(tr, [m]), {fn: fn.name})
    assert "normed = rms_norm(x, self.weight, 1e-06)" in src
    assert "rsqrt" not in src and "pow" not in src and "mean" not in src


def test_causal_attention_becomes_one_sdpa_call(tmp_path):
    tr = _problem(tmp_path, "attn",
                  "n = q.shape[2];"
                  " s = torch.matmul(q.float(), k.float().transpose(2, 3)) * 0.25;"
                  " s = s + torch.full((n, n), float('-inf'), device=q.device).triu(1);"
                  " return torch.matmul(F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype), v)",
                  "[torch.randn(1, 2, 9, 16, dtype=torch.float16) for _ in range(3)]", "",
                  precision="fp16", params="q, k, v")
    (m,) = find_matches(tr)
    assert m.kind == "sdpa" and m.language == "pytorch"
    src = forward_source(substitute(tr, [m]), {})
    assert "F.scaled_dot_product_attention(" in src and "is_causal=True" in src
    assert "scale=0.25" in src and "F.softmax" not in src and "triu" not in src


def test_repeated_keys_and_values_become_grouped_query_sdpa(tmp_path):
    """Llama's repeat_kv copies every key/value head per query head of its group before
    SDPA: the rewrite passes the shared heads with enable_gqa=True, the mask, scale and
    causal flag as written, and the output is the reference's."""
    import torch

    forward = ("k = k[:, :, None, :, :].expand(1, 2, 3, 5, 8).reshape(1, 6, 5, 8); "
               "v = v.unsqueeze(2).expand(1, 2, 3, 5, 8).reshape(1, 6, 5, 8); "
               "return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3)")
    tr = _problem(tmp_path, "gqa", forward,
                  "[torch.randn(1, 6, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8),"
                  " torch.rand(5, 5) > 0.3]", "", precision="fp32", params="q, k, v, m")
    (m,) = find_matches(tr)
    assert m.kind == "gqa" and m.language == "pytorch"
    src = forward_source(substitute(tr, [m]), {})
    assert "enable_gqa=True" in src and "expand" not in src and "reshape" not in src
    assert "attn_mask=m" in src and "scale=0.3" in src
    ns: dict = {}
    exec("import torch\nimport torch.nn.functional as F\n" + src, ns)
    q, k, v = torch.randn(1, 6, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    mask = torch.rand(5, 5) > 0.3
    mask[:, 0] = True  # no fully masked row
    want = _sdpa(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), mask, 0.3)
    got = ns["forward"](None, q, k, v, mask)
    assert torch.allclose(got, want, atol=1e-5)


def _sdpa(q, k, v, mask, scale):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def test_patterns_through_one_table_by_object_or_import_path(monkeypatch):
    import solforge.search.match as match_module
    from solforge.problems import find_builtin
    from solforge.search.match import Pattern, register_pattern

    monkeypatch.setattr(match_module, "_PATTERNS", dict(match_module._PATTERNS))
    order: list[str] = []
    register_pattern(Pattern("first", lambda tr: order.append("first") or [], "a plug-in"),
                     before="sdpa")
    register_pattern("solforge_no_such_module:PATTERN", name="gone")
    with pytest.raises(ValueError, match="needs name="):
        register_pattern("solforge.search.patterns.pointwise:GLU_PATTERN")
    assert list(match_module._PATTERNS)[:2] == ["first", "sdpa"]
    p = find_builtin("silu_llama3")
    errors: list[str] = []
    found = find_matches(trace_reference(p, import_file(p.path)), errors=errors)
    assert order == ["first"] and [m.kind for m in found] == ["bias_act"]
    assert len(errors) == 1 and errors[0].startswith(
        "pattern gone: RegistryError: search pattern 'gone': solforge_no_such_module:PATTERN "
        "could not be loaded: importing solforge_no_such_module failed")
