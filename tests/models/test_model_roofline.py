"""The extraction's roofline estimate and what the planner does with it: a tiny Llama built
from its config on the CPU, extracted with a CPU device profile stored in a private cache
(the datasheet has no CPU row), each problem's fraction of its speed of light written into its
file, and the planner ranking untried problems by share times headroom."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from solforge.cli.main import app  # noqa: E402
from solforge.orchestrate.planner import UNTRIED_FLOOR, Planner, PlannerConfig  # noqa: E402
from solforge.orchestrate.run import Run, RunSpec  # noqa: E402
from solforge.problems import load_problem  # noqa: E402
from solforge.records.options import EvalOptions  # noqa: E402
from solforge.sol.profile import DeviceProfile, save_profile  # noqa: E402

SETS = ["hidden_size=64", "intermediate_size=128", "num_attention_heads=4",
        "num_key_value_heads=2", "vocab_size=256", "max_position_embeddings=64"]
# slow enough that every module's bound is a visible fraction of its measured time
CPU = DeviceProfile(name="cpu", source="calibrated", peaks_tflops={"fp32": 0.002},
                    bandwidth_gbs=20.0, empty_kernel_ms=0.001)


def extract(tmp_path, monkeypatch, profile: DeviceProfile | None) -> dict:
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path / "cache"))
    if profile is not None:
        save_profile(profile)
    out = tmp_path / "problems"
    r = CliRunner().invoke(app, ["extract", "llama", "--out", str(out), "--layers", "1",
                                 "--seq", "16", "--prefill", "--decode", "--name", "t",
                                 *(f"--set={kv}" for kv in SETS)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads((out / "extract.json").read_text())


def test_extract_writes_each_problems_fraction_of_its_speed_of_light(tmp_path, monkeypatch):
    m = extract(tmp_path, monkeypatch, CPU)
    estimated = [p for p in m["problems"] if (p["roofline"] or {}).get("fraction")]
    # every module here is counted: linears, norms, the MLP region, the embedding
    assert len(estimated) == len(m["problems"]) >= 4
    for p in estimated:
        roof = p["roofline"]
        assert 0 < roof["fraction"] <= 1 and roof["device"] == "cpu"
        measured = sum(w["ms"] for w in p["workloads"].values())
        assert roof["measured_ms"] == pytest.approx(measured, rel=1e-3)
        bound = sum(w["sol_ms"] * w["calls"] for w in roof["workloads"].values())
        assert roof["fraction"] == pytest.approx(min(1.0, bound / measured), rel=1e-3)
        problem = load_problem(tmp_path / "problems" / p["file"])
        assert problem.model_roofline == pytest.approx(roof["fraction"])
    # the bound follows the work: the LM head (2*17*64*256 FLOPs a prefill call) is bound
    # far above an RMSNorm (a few FLOPs an element) on this slow profile; the measured
    # times, on a shared CPU, are too noisy to compare the fractions themselves here
    by = {p["paths"][0]: p["roofline"]["workloads"]["prefill_b1_s16"] for p in estimated}
    head, norm = by["lm_head"], by["model.layers.0.input_layernorm"]
    assert head["bound"] == "compute" and head["sol_ms"] > 10 * norm["sol_ms"]


def test_without_ceilings_there_is_no_estimate_and_the_problem_still_loads(tmp_path,
                                                                            monkeypatch):
    m = extract(tmp_path, monkeypatch, None)
    for p in m["problems"]:
        assert p["roofline"] is None
        assert load_problem(tmp_path / "problems" / p["file"]).model_roofline is None


def test_the_planner_ranks_untried_problems_by_share_times_headroom(tmp_path, monkeypatch):
    m = extract(tmp_path, monkeypatch, CPU)
    folder = tmp_path / "problems"
    base = [load_problem(folder / p["file"]) for p in m["problems"][:2]]
    # a GEMM at 90% of its bound with the larger share; a norm at 10% with a smaller one
    gemm = base[0].model_copy(update={"name": "gemm", "model_share": 0.4,
                                      "model_roofline": 0.9})
    norm = base[1].model_copy(update={"name": "norm", "model_share": 0.15,
                                      "model_roofline": 0.1})
    plain = base[1].model_copy(update={"name": "plain", "model_share": 0.1,
                                       "model_roofline": None})
    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    p = Planner(run, [gemm, norm, plain], PlannerConfig(agents=["search"]),
                EvalOptions(device="cpu"))
    h = {n: p.headroom(p.problems[n]) for n in ("gemm", "norm", "plain")}
    assert h["gemm"] == pytest.approx(0.4 * 2 * (1 - 0.9))
    assert h["norm"] == pytest.approx(0.15 * 2 * 0.9)
    assert h["plain"] == pytest.approx(0.1 * 2)  # no estimate: by share alone
    assert p.next_problem().problem.name == "norm"
    p.problems["norm"].converged = p.problems["plain"].converged = "done"
    assert p.next_problem().problem.name == "gemm"
    # an estimate at the bound still leaves the floor: the problem is tried eventually
    at_bound = gemm.model_copy(update={"name": "at_bound", "model_roofline": 1.0})
    p2 = Planner(Run.create(tmp_path / "run2", RunSpec(agent="search")), [at_bound],
                 PlannerConfig(agents=["search"]), EvalOptions(device="cpu"))
    assert p2.headroom(p2.problems["at_bound"]) == pytest.approx(0.4 * 2 * UNTRIED_FLOOR)
