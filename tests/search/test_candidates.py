"""Which candidates each problem gets, on a CPU and on a GPU, and what their files say.
Generation only: nothing here evaluates (``test_families.py`` does)."""

from __future__ import annotations

import ast

import pytest
import torch

from solforge.problems import builtin_problems, find_builtin
from solforge.search import candidates as candidates_module
from solforge.search.candidates import (
    LEVERS,
    Candidate,
    generate_candidates,
    register_generator,
    search_context,
)

GPU_ONLY = {"cuda_graphs", "compile+cuda_graphs", "compile_max_autotune", "cudnn_benchmark"}


def names(problem: str, device: str = "cpu") -> list[str]:
    ctx = search_context(find_builtin(problem), device)
    cands, errors = generate_candidates(ctx)
    assert not errors
    return [c.name for c in cands]


@pytest.fixture(scope="module")
def corpus():
    """Every corpus problem's candidates on a CPU and on a GPU."""
    out = {}
    for p in builtin_problems():
        for device in ("cpu", "cuda"):
            cands, errors = generate_candidates(search_context(p, device))
            assert not errors, (p.name, errors)
            out[p.name, device] = cands
    return out


def test_every_candidate_is_a_well_formed_solution(corpus):
    for (problem, device), cands in corpus.items():
        assert cands[0].name == "reference" and cands[0].levers == []
        seen = set()
        for c in cands:
            tree = ast.parse(c.source)  # a whole, syntactically valid file
            classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
            assert "ModelNew" in classes, (problem, c.name)
            assert set(c.levers) <= set(LEVERS)
            assert c.parent is None or c.parent in seen, (problem, c.name)  # parents first
            seen.add(c.name)
            assert c.reasoning and c.cost > 0
            # rewrites stand alone; wrappers of the reference say they run it
            assert c.calls_reference == ("import_file(" in c.source), (problem, c.name)
            if c.family == "library":
                assert not c.calls_reference
            if device == "cpu":
                assert c.name not in GPU_ONLY and "cuda_graphs" not in c.levers


def test_gpu_families_only_on_a_gpu():
    cpu, gpu = names("rmsnorm_llama3"), names("rmsnorm_llama3", "cuda")
    assert cpu == ["reference", "library", "compile"]
    assert {"cuda_graphs", "library+cuda_graphs", "compile+cuda_graphs",
            "compile_max_autotune"} <= set(gpu)


def test_tf32_only_for_tf32_class_problems_with_a_matmul(corpus):
    with_tf32 = {p for (p, d), cands in corpus.items() if any(c.family == "tf32" for c in cands)}
    assert with_tf32 == {"linear_fp32_vit_mlp",
                         # issue 28's tf32-class problems with a matmul or a convolution
                         "feature_conv_wav2vec2", "ssd_chunk_scan_mamba2",
                         "timestep_embedder_dit", "upsample_conv_sd_vae", "vae_mid_attention_sd"}
    assert all(find_builtin(p).precision.allow_tf32 for p in with_tf32)


def test_conv_candidates_only_for_convolutions(corpus):
    conv = {(p, d): [c.name for c in cands if c.family == "conv"]
            for (p, d), cands in corpus.items()}
    convolutions = {"conv_groupnorm_silu_sd_unet", "vit_patch_embed_layernorm_clip",
                    "whisper_conv_frontend", "causal_conv1d_silu_mamba",
                    # issue 28's convolutions
                    "bottleneck_resnet50", "conv_module_conformer", "convnext_block",
                    "distill_tokens_embed_deit", "feature_conv_wav2vec2",
                    "hardswish_se_mobilenetv3", "mbconv_se_efficientnet", "mix_ffn_segformer",
                    "pixel_shuffle_upsample_esrgan", "pos_conv_embed_wav2vec2", "sppf_yolov8",
                    "upsample_conv_sd_vae"}
    for (p, d), got in conv.items():
        if p not in convolutions:
            assert got == [], p
    # channels-last is for 2-D (and 3-D) convolutions; cuDNN autotuning only where cuDNN
    # runs, alone and under compile
    assert conv["conv_groupnorm_silu_sd_unet", "cpu"] == ["channels_last",
                                                           "channels_last+compile"]
    assert conv["conv_groupnorm_silu_sd_unet", "cuda"] == [
        "cudnn_benchmark", "channels_last", "cudnn_benchmark+compile", "channels_last+compile"]
    assert conv["whisper_conv_frontend", "cpu"] == []
    assert conv["whisper_conv_frontend", "cuda"] == ["cudnn_benchmark", "cudnn_benchmark+compile"]


def test_library_candidates_per_pattern_kind(corpus):
    cpu = [c.name for c in corpus["layernorm_linear_gelu_vit", "cpu"] if c.family == "library"]
    assert cpu == ["library"]  # on a CPU (the interpreter) no attribution variants
    by_name = {c.name: c for c in corpus["layernorm_linear_gelu_vit", "cuda"]}
    assert {"library", "library:layer_norm", "library:bias_act"} <= set(by_name)
    assert by_name["library:layer_norm"].parent == "library"
    lib = by_name["library"]
    assert lib.language == "triton" and lib.levers == ["library_kernel", "fusion", "autotune"]
    assert "from solforge.kernels.triton import bias_act, layer_norm" in lib.source
    # the constructor is the reference's own, so its parameter names are too
    assert "self.norm2 = nn.LayerNorm(" in lib.source and "self.fc1 = nn.Linear(" in lib.source
    attention = {c.name: c for c in corpus["causal_mha_eager_llama2", "cuda"]}
    assert attention["sdpa"].levers == ["fusion", "sdpa"]
    assert attention["sdpa+compile"].parent == "sdpa"
    assert "@torch.compile(mode='default')" in attention["sdpa+compile"].source
    assert "@cuda_graphed" in attention["sdpa+cuda_graphs"].source
    assert "autotune" in {lv for c in corpus["rmsnorm_llama3", "cuda"] if c.name == "library"
                          for lv in c.levers}


def test_untraceable_problems_still_get_the_generic_families(corpus):
    got = [c.name for c in corpus["paged_decode_vllm", "cpu"]]
    assert got == ["reference", "compile"]


def test_plug_in_generators_use_the_same_door(monkeypatch):
    monkeypatch.setattr(candidates_module, "_GENERATORS", dict(candidates_module._GENERATORS))
    ctx = search_context(find_builtin("silu_llama3"), "cpu")
    ref = next(c for c in generate_candidates(ctx)[0] if c.name == "reference")

    def mine(ctx):
        yield Candidate(name="mine", family="mine", levers=["fusion"], cost=0.5,
                        source=ref.source, reasoning="a plug-in's idea")

    def broken(ctx):
        raise RuntimeError("boom")

    register_generator("mine", mine)
    register_generator("broken", broken)
    cands, errors = generate_candidates(ctx)
    assert cands[0].name == "mine"  # cheapest first
    assert errors == {"broken": "RuntimeError: boom"}
    only, _ = generate_candidates(ctx, families=["mine", "reference"])
    assert [c.name for c in only] == ["mine", "reference"]
    with pytest.raises(ValueError, match="unknown levers"):
        Candidate(name="x", family="x", levers=["magic"], cost=1, source="", reasoning="")


def test_a_forward_that_reads_values_on_the_host_gets_no_graph_candidate(corpus):
    """Capture refuses paged decode's ``seq_lens.tolist()`` (and a graph would bake in the
    lengths seen at capture): no evaluation is spent learning it."""
    from solforge.search.reference_facts import reads_values_on_host

    paged = [c.name for c in corpus["paged_decode_vllm", "cuda"]]
    assert not any("cuda_graphs" in n for n in paged), paged
    assert "compile" in paged
    assert reads_values_on_host(search_context(find_builtin("paged_decode_vllm"), "cuda"))
    assert not reads_values_on_host(search_context(find_builtin("rmsnorm_llama3"), "cuda"))
    assert "cuda_graphs" in [c.name for c in corpus["rmsnorm_llama3", "cuda"]]


def test_cuda_graphed_forward_runs_eagerly_on_cpu_inputs():
    # a problem's CPU workload reaches the graphs candidate too: capture needs device
    # tensors (on the H200 it failed with "Cannot copy between CPU and CUDA tensors")
    from solforge.search.runtime import CudaGraphed, cuda_graphed

    class M(torch.nn.Module):
        @cuda_graphed
        def forward(self, x, scale):
            return x * scale + 1

    x = torch.randn(4, 8)
    assert torch.equal(M()(x, 2.0), x * 2.0 + 1)
    graphed = CudaGraphed(lambda x: x.sum())
    assert graphed(x) == x.sum() and graphed.graphs == {}


def test_files_that_import_solforge_name_the_library_they_were_built_on(tmp_path):
    """A change to the kernels makes a library candidate a new file, so a resumed run
    judges it anew instead of reusing the old code's verdict."""
    from solforge.search.emit import digest_of, library_digest

    cands, _ = generate_candidates(search_context(find_builtin("rmsnorm_llama3"), "cuda"))
    by_name = {c.name: c for c in cands}
    line = f"Built on solforge's kernels and runtime as of {library_digest()}."
    assert line in by_name["library"].source  # imports solforge.kernels.triton
    assert line not in by_name["compile"].source  # plain PyTorch
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "a.py").write_text("x = 1\n")
    (tmp_path / "runtime.py").write_text("y = 1\n")
    first = digest_of(tmp_path, ("kernels", "runtime.py"))
    assert first == digest_of(tmp_path, ("kernels", "runtime.py"))
    (tmp_path / "kernels" / "a.py").write_text("x = 2\n")
    assert digest_of(tmp_path, ("kernels", "runtime.py")) != first


def test_generators_by_import_path_and_a_broken_one_named(monkeypatch):
    monkeypatch.setattr(candidates_module, "_GENERATORS", {
        "again": "solforge.search.families.generic:reference_family",
        "gone": "solforge_no_such_module:family",
    })
    ctx = search_context(find_builtin("silu_llama3"), "cpu")
    cands, errors = generate_candidates(ctx)
    assert [c.name for c in cands] == ["reference"]
    assert errors["gone"].startswith("RegistryError: search generator 'gone': "
                                     "solforge_no_such_module:family could not be loaded: "
                                     "importing solforge_no_such_module failed")
