"""From a model and back, end to end on a CPU: a tiny Llama trained here on generated text
(never a download), its problems extracted, one optimised by the search agent through
`solforge optimize`, the kept solution applied to the live model and validated against the
original: drift, perplexity, greedy agreement, latency, refusals of unverified shapes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import solforge  # noqa: E402
from solforge.cli.main import app  # noqa: E402
from solforge.models.source import build_model  # noqa: E402
from solforge.orchestrate.run import Run  # noqa: E402
from solforge.problems import load_problem  # noqa: E402

SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=256)
SEQ = 16
runner = CliRunner()


def sf(*args: str):
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result


def generated_text(sentences: int, seed: int) -> str:
    r = random.Random(seed)
    return " ".join(r.choice(["the cat sat on the mat.", "a dog ran to the box."])
                    for _ in range(sentences))


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> tuple[Path, Path]:
    """A byte-level tiny Llama trained for 40 steps (seconds), saved; and held-out text."""
    from transformers import AutoConfig, AutoModelForCausalLM

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains faster on one thread
    try:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **SIZES))
        ids = torch.tensor(list(generated_text(400, seed=0).encode()))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(40):
            starts = torch.randint(0, ids.numel() - 33, (8,))
            x = torch.stack([ids[s:s + 33] for s in starts])
            logits = model(input_ids=x[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256),
                                                     x[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    d = tmp_path_factory.mktemp("tiny_lm")
    model.save_pretrained(d / "model")
    (d / "heldout.txt").write_text(generated_text(60, seed=1))
    return d / "model", d / "heldout.txt"


@pytest.fixture(scope="module")
def flow(lm, tmp_path_factory) -> dict:
    """extract (prefill and decode) -> optimize the LM head's problem with the search agent."""
    folder, _ = lm
    d = tmp_path_factory.mktemp("flow")
    r = sf("extract", str(folder), "--out", str(d / "problems"), "--prefill", "--decode",
           "--seq", str(SEQ), "--name", "tiny")
    assert r.exit_code == 0, r.output
    manifest = json.loads((d / "problems" / "extract.json").read_text())
    head = next(p for p in manifest["problems"] if p["paths"] == ["lm_head"])
    env = dict(os.environ, COLUMNS="200")
    opt = subprocess.run(
        [sys.executable, "-m", "solforge.cli.main", "optimize",
         str(d / "problems" / head["file"]), "--run-dir", str(d / "run"),
         "--baselines", "eager", "--families", "reference", "--max-candidates", "1",
         "--max-units", "1", "--explore-max-calls", "10", "--budget-ms", "20"],
        capture_output=True, text=True, timeout=600, env=env)
    assert opt.returncode == 0, opt.stdout + opt.stderr
    return {"dir": d, "manifest": manifest, "head": head, "run": d / "run", "folder": folder}


def test_extract_dedupes_layers_ranks_by_share_and_writes_loadable_problems(flow):
    m = flow["manifest"]
    by_paths = {tuple(p["paths"]): p for p in m["problems"]}
    # q_proj and o_proj are both 64 -> 64 Linear layers: one problem for the four of them
    q = by_paths[("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj",
                  "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.o_proj")]
    assert q["workloads"]["prefill_b1_s16"]["calls"] == 4
    assert q["workloads"]["decode_b1_s16"]["calls"] == 4
    assert ("model.layers.0.mlp", "model.layers.1.mlp") in by_paths  # a fused region
    shares = [p["share"] for p in m["problems"]]
    assert shares == sorted(shares, reverse=True) and 0 < m["covered_share"] <= 1
    assert "position_embeddings" in m["skipped"]["model.layers.0.self_attn"]
    for p in m["problems"]:
        problem = load_problem(flow["dir"] / "problems" / p["file"])
        assert problem.model_share == pytest.approx(p["share"])
        assert {w.name for w in problem.workloads} == {"prefill_b1_s16", "decode_b1_s16"}
    # the planner weighs the problem by its share of the model's time
    (row,) = Run.open(flow["run"]).ledger.problems()
    assert row["weight"] == pytest.approx(flow["head"]["share"])


def test_validate_trained_lm_drift_perplexity_generation_latency(flow, lm, tmp_path):
    out = tmp_path / "report.json"
    r = sf("validate", str(flow["folder"]), str(flow["run"]), "--prefill", "--decode",
           "--seq", str(SEQ), "--tokens", str(lm[1]), "--gen-steps", "6", "--rounds", "1",
           "--max-kl", "1e-6", "--min-top1", "0.999", "--max-ppl-ratio", "1.001",
           "--min-speedup", "0", "--json", str(out))
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    assert report["calls"]["lm_head"]["patched"] >= 2 and not report["failed"]
    for mode in ("prefill", "decode"):
        assert report["drift"][mode]["top1_agreement"] == 1.0
        assert report["drift"][mode]["kl_mean"] < 1e-6
        assert report["latency"][mode]["original_ms"] > 0
        assert report["latency"][mode]["patched_ms"] > 0
    ppl = report["perplexity"]
    assert ppl["original"] < 8  # it learned the text (a byte vocabulary: 256 untrained)
    assert ppl["ratio"] == pytest.approx(1.0, abs=1e-3)
    assert report["generation"]["token_agreement"] == 1.0
    assert report["share_patched"]["prefill_b1_s16"] == pytest.approx(
        flow["head"]["workloads"]["prefill_b1_s16"]["ms"]
        / flow["manifest"]["steps"]["prefill_b1_s16"]["ms"], rel=1e-3)
    assert "KL mean" in r.output and "each problem patched alone" in r.output
    # each patched module's own cost, original against patched, per verified signature
    (costs,) = report["module_costs"].values()
    assert costs["path"] == "lm_head"
    shapes = sorted(tuple(row["signature"][0][1]) for row in costs["signatures"])
    assert shapes == [(1, 1, 64), (1, SEQ, 64)]
    for row in costs["signatures"]:
        for side in ("original", "patched"):
            assert row[side]["host_us"] > 0 and row[side]["device_us"] > 0
    assert "each patched module alone" in r.output
    assert "graphed" not in report["latency"]["prefill"]  # CUDA graphs: on a GPU only


def test_apply_refuses_unverified_shapes_works_compiled_and_undoes(flow):
    built = build_model(str(flow["folder"]))
    model = built.model
    odd = torch.randint(0, 256, (1, 9))
    seen = torch.randint(0, 256, (1, SEQ))
    with torch.no_grad():
        ref_odd, ref_seen = model(odd).logits, model(seen).logits
    # the flow kept the reference itself (about 1.0x of eager): every verified shape here
    patch = solforge.apply(model, flow["run"], min_speedup=0)
    assert list(patch.modules) == ["lm_head"] and not patch.refused
    assert patch.modules["lm_head"].new.weight is model.lm_head.weight  # shared, not copied
    with torch.no_grad():
        assert torch.equal(model(odd).logits, ref_odd)  # never verified at 9 tokens
        stats = patch.stats()["lm_head"]
        assert (stats["patched"], stats["fallback"]) == (0, 1)
        assert "input: [1, 9, 64] float32 cpu" in stats["fallback_signatures"]
        torch.testing.assert_close(model(seen).logits, ref_seen)
        assert patch.stats()["lm_head"]["patched"] == 1
        # by keyword (the dispatcher's general path) as by position (its fast one)
        h = torch.randn(1, SEQ, 64)
        torch.testing.assert_close(model.lm_head(input=h), h @ model.lm_head.weight.T)
        assert patch.stats()["lm_head"]["patched"] == 2
        model.lm_head(h[:, :5])  # a shape never verified, by position
        assert patch.stats()["lm_head"]["fallback"] == 2
        compiled = torch.compile(model, backend="eager")
        torch.testing.assert_close(compiled(seen).logits, ref_seen)
        assert patch.stats()["lm_head"]["patched"] >= 3
    patch.undo()
    assert "forward" not in vars(model.lm_head) and not patch.modules
    assert set(model.state_dict()) == set(build_model(str(flow["folder"])).model.state_dict())


def test_reduced_precision_named_per_module_and_thresholds_fail(flow, tmp_path):
    export = tmp_path / "export"
    Run.open(flow["run"]).export(export)
    name = flow["head"]["name"]
    # a kept kernel that computes in bf16: validate must show the drift it causes
    (export / "solutions" / f"{name}.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\n"
        "class ModelNew(nn.Linear):\n"
        "    def __init__(self, dtype=torch.float32):\n"
        "        super().__init__(64, 256, bias=False)\n\n"
        "    def forward(self, x):\n"
        "        return (x.to(torch.bfloat16) @ self.weight.to(torch.bfloat16).t()).float()\n")
    out = tmp_path / "report.json"
    r = sf("validate", str(flow["folder"]), str(export), "--prefill", "--seq", str(SEQ),
           "--gen-steps", "0", "--rounds", "1", "--max-kl", "1e-12", "--min-speedup", "0",
           "--json", str(out))
    assert r.exit_code == 1, r.output
    report = json.loads(out.read_text())
    assert report["per_module"][name]["lowered_precision"] == ["bf16"]
    assert report["per_module"][name]["drift"]["prefill"]["kl_mean"] > 1e-12
    assert report["failed"] and "--max-kl" in report["failed"][0] and "FAIL" in r.output


def test_apply_swaps_in_only_the_shapes_its_record_measured_faster(flow, tmp_path):
    """A kept solution no faster than the original (the reference itself, a win within the
    timing's noise) would only add the dispatch's cost to every call: by default a shape is
    swapped in only where the record's eager time over the solution's reaches MIN_SPEEDUP."""
    from solforge.models import MIN_SPEEDUP

    export = tmp_path / "export"
    Run.open(flow["run"]).export(export)
    name = flow["head"]["name"]
    rec_path = export / "records" / f"{name}.json"
    rec = json.loads(rec_path.read_text())

    def timed(gains):  # seq length -> (eager ms, solution ms); None: untimed
        for w in rec["workloads"]:
            t = gains[w["params"]["inputs"][0]["shape"][1]]
            w["eager_ms"], w["time_ms"] = t if t else (None, None)
        rec_path.write_text(json.dumps(rec))

    model = build_model(str(flow["folder"])).model
    timed({SEQ: (2.0, 1.0), 1: (1.01, 1.0)})  # prefill 2x, decode 1.01x
    patch = solforge.apply(model, export)
    assert list(patch.modules) == ["lm_head"] and MIN_SPEEDUP > 1.01
    with torch.no_grad():
        model(torch.randint(0, 256, (1, SEQ)))
        model(torch.randint(0, 256, (1, 1)))
    stats = patch.stats()["lm_head"]
    assert (stats["patched"], stats["fallback"]) == (1, 1)
    assert list(stats["fallback_signatures"]) == ["input: [1, 1, 64] float32 cpu"]
    patch.undo()
    timed({SEQ: (1.0, 1.0), 1: None})  # the reference at 1.0x; a shape never timed
    patch = solforge.apply(model, export)
    assert not patch.modules
    why = patch.refused[name]
    assert "not faster than the original" in why and "1x" in why and "untimed" in why
    assert solforge.apply(model, export, min_speedup=0.9).modules  # 1.0x passes 0.9
    r = sf("validate", str(flow["folder"]), str(export), "--prefill", "--seq", str(SEQ))
    assert r.exit_code == 2 and "--min-speedup" in r.output


def test_apply_wraps_a_model_script(flow, tmp_path):
    script = tmp_path / "serve.py"
    script.write_text(
        "import sys, torch\n"
        "from transformers import AutoModelForCausalLM\n"
        "m = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()\n"
        "with torch.no_grad():\n"
        f"    for n in ({SEQ}, {SEQ}, 5):\n"
        "        m(torch.randint(0, 256, (1, n)))\n")
    rep = tmp_path / "calls.json"
    r = sf("apply", "--min-speedup", "0", str(flow["run"]), str(script), str(flow["folder"]),
           "--report", str(rep))
    assert r.exit_code == 0, r.output
    (entry,) = json.loads(rep.read_text())
    assert entry["modules"]["lm_head"]["patched"] == 2
    assert entry["modules"]["lm_head"]["fallback"] == 1


def test_errors_say_what_to_fix(tmp_path):
    r = sf("extract", "no_such_model_type", "--out", str(tmp_path))
    assert r.exit_code == 2 and "not a transformers model type" in r.output
    r = sf("extract", "llama", "--out", str(tmp_path), "--backward", "--decode")
    assert r.exit_code == 2 and "needs a prefill step" in r.output
    r = sf("validate", "llama", str(tmp_path), "--set", "hidden_size=64", "--layers", "1")
    assert r.exit_code == 2 and "neither a run directory" in r.output
    # a config key that is a derived property: the config's refusal, in one line
    r = sf("extract", "falcon", "--out", str(tmp_path), "--set", "head_dim=16")
    assert r.exit_code == 2 and "its config refused" in r.output and "head_dim" in r.output
    assert "Traceback" not in r.output
    # overrides that disagree (DeepSeek-V3's rotary dim against its heads): the model's
    # own error, where it raised, and what to check, not a traceback
    r = sf("extract", "deepseek_v3", "--out", str(tmp_path / "ds"), "--layers", "1",
           *(f"--set={kv}" for kv in (
               "hidden_size=64", "intermediate_size=64", "num_attention_heads=2",
               "num_key_value_heads=2", "vocab_size=64", "head_dim=16", "kv_lora_rank=16",
               "q_lora_rank=16", "qk_nope_head_dim=8", "v_head_dim=8",
               "first_k_dense_replace=1")), "--seq", "4")
    assert r.exit_code == 2, r.output
    assert "extract: running deepseek_v3 failed" in r.output and "modeling_deepseek_v3.py" \
        in r.output and "agree with each other" in r.output


def test_encoder_decoder_model_extracts_with_decoder_tokens(tmp_path):
    """T5 (an encoder-decoder whose main input is input_ids) gets decoder tokens too."""
    r = sf("extract", "t5", "--out", str(tmp_path), "--layers", "1", "--seq", "8",
           *(f"--set={kv}" for kv in ("d_model=32", "d_ff=64", "num_heads=2", "d_kv=16",
                                     "vocab_size=64", "num_decoder_layers=1")))
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "extract.json").read_text())
    paths = {p for prob in m["problems"] for p in prob["paths"]}
    assert any(p.startswith("decoder.") for p in paths) and any(
        p.startswith("encoder.") for p in paths)


def test_extract_backward_writes_gradient_problems_autograd_agrees_with(tmp_path):
    """--backward: prefill steps are training steps; a module with something to
    differentiate gets a backward problem whose outputs are its gradients."""
    from solforge.problems.loader import import_file
    from solforge.problems.spec import call_with_params

    out = tmp_path / "x"
    r = sf("extract", "llama", "--set", "hidden_size=32", "--set", "intermediate_size=64",
           "--set", "num_attention_heads=2", "--set", "num_key_value_heads=1",
           "--set", "vocab_size=96", "--layers", "2", "--seq", "8", "--prefill",
           "--backward", "--out", str(out))
    assert r.exit_code == 0, r.output
    m = json.loads((out / "extract.json").read_text())
    by_name = {p["name"]: p for p in m["problems"]}
    head = by_name["llama_lm_head_bwd"]
    assert head["direction"] == "backward" and list(head["workloads"]) == ["train_b1_s8"]
    assert by_name["llama_layers_mlp_bwd"]["share"] > 0
    # a rotary table depends on nothing differentiable: said, not written
    assert "all zero" in m["skipped"]["model.rotary_emb (backward)"]
    assert not (out / "llama_rotary_emb_bwd.py").exists()
    problem = load_problem(out / head["file"])
    assert problem.direction == "backward" and problem.family == "llama"
    assert problem.precision.name == "fp32_grad"  # judged at the gradients' own scale
    # the reference's gradients are the Linear's: dx = g W, dW = g^T x
    mod = import_file(out / head["file"], prefix="t_bwd")
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    x, g = call_with_params(mod.get_inputs, dict(problem.workloads[0].params))
    with torch.no_grad():
        dx, dw = model(x, g)
    w = model.weight.detach()
    torch.testing.assert_close(dx, g @ w)
    torch.testing.assert_close(dw, g.reshape(-1, g.shape[-1]).T @ x.reshape(-1, x.shape[-1]))


def test_validate_skip_names_what_the_run_keeps(flow):
    head = flow["head"]["name"]
    r = sf("validate", str(flow["folder"]), str(flow["run"]), "--prefill", "--seq", str(SEQ),
           "--skip", "no_such_problem", "--min-speedup", "0")
    assert r.exit_code == 2 and "--skip no_such_problem" in r.output
    assert head in r.output  # what it keeps, to pick from
    r = sf("validate", str(flow["folder"]), str(flow["run"]), "--prefill", "--seq", str(SEQ),
           "--skip", head, "--min-speedup", "0")
    assert r.exit_code == 2 and "leaves no kept solution" in r.output


def test_a_smaller_vocab_moves_the_default_token_ids_into_it():
    """Phi-3's pad id (32000) is past a 256-token vocabulary: moved to 255 and recorded,
    not "Padding_idx must be within num_embeddings"; an id the user set is kept as set."""
    sizes = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2,
                 num_key_value_heads=2, num_hidden_layers=1, vocab_size=256)
    built = build_model("phi3", sizes)
    assert built.model.config.pad_token_id == 255 and built.overrides["pad_token_id"] == 255
    assert built.model.get_input_embeddings().padding_idx == 255
    built = build_model("phi3", {**sizes, "pad_token_id": 3})
    assert built.model.config.pad_token_id == 3


def test_extracted_moe_block_runs_the_experts_kernel_the_model_ran(tmp_path):
    """transformers keeps its kernel choices (``_experts_implementation`` "grouped_mm",
    ``_attn_implementation``) outside the config's dict: the problem file sets them again,
    so the reference is the model's computation, not an eager loop over the experts."""
    from solforge.problems.loader import import_file

    r = sf("extract", "mixtral", "--out", str(tmp_path), "--layers", "2", "--seq", "8",
           "--prefill", *(f"--set={kv}" for kv in (
               "hidden_size=32", "intermediate_size=64", "num_attention_heads=2",
               "num_key_value_heads=1", "vocab_size=64", "num_local_experts=4")))
    assert r.exit_code == 0, r.output
    built = build_model("mixtral", {"hidden_size": 32, "intermediate_size": 64,
                                    "num_attention_heads": 2, "num_key_value_heads": 1,
                                    "vocab_size": 64, "num_local_experts": 4,
                                    "num_hidden_layers": 2})
    live = built.model.model.layers[0].mlp.experts.config
    mod = import_file(tmp_path / "mixtral_layers_mlp_experts.py", prefix="t_moe")
    assert mod.IMPLEMENTATIONS["_experts_implementation"] == live._experts_implementation
    assert live._experts_implementation not in (None, "eager")
    rebuilt = mod.Model(*mod.get_init_inputs())
    assert rebuilt.config._experts_implementation == live._experts_implementation
    assert rebuilt.config._attn_implementation == live._attn_implementation
