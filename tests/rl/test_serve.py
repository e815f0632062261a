"""`solforge serve` end to end on loopback: the load harness of benchmarks/load_serve.py on
a small mixed batch from 8 clients (honest, wrong, PyTorch for a kernel task, hacks,
crashers, a completion without code; wrong tokens, malformed bodies), then the
TRL, verl and OpenRLHF adapters scoring a batch against the same server."""

from __future__ import annotations

import json

import pytest

from benchmarks.load_serve import KINDS, exercise, start_server, stop_server

CI_KINDS = ["honest_triton", "honest_pytorch", "wrong_triton", "pytorch_for_kernel",
            "hack_no_kernel", "hack_calls_reference", "crash_segfault", "no_code"]
# (no hang here: it costs a slot its whole timeout; benchmarks/load_serve.py has one)
TOKEN = "ci-token-0123456789abcdef"


def _block(kind: str) -> str:
    # the harness's variant 0 of a kind, as a model would answer: served from the cache
    source, _, _ = KINDS[kind]
    assert source is not None
    return f"Here it is.\n```python\n{source.rstrip()}\n# variant 0\n```\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    state = tmp_path_factory.mktemp("serve")
    proc, url = start_server(state / "state", TOKEN, slots=2, timeout_s=120.0)
    try:
        yield url
    finally:
        stop_server(proc)


def test_load_on_loopback(server):
    summary = exercise(server, TOKEN, solutions=16, clients=8, variants=1, kinds=CI_KINDS)
    assert summary["ok"], json.dumps(summary["problems"], indent=1)
    assert summary["answers"] == 16 and summary["health_after"] == 200
    assert all(v["ok"] for v in summary["negatives"].values())
    per = summary["per_kind"]
    assert set(per) == set(CI_KINDS)
    assert set(per["hack_no_kernel"]["rewards"]) == {"-1.0"}
    assert summary["cache_hits"] and summary["cache_hits"] > 0  # duplicates: one verdict


def test_trainer_adapters_score_a_batch(server, monkeypatch):
    pytest.importorskip("httpx")
    monkeypatch.setenv("SOLFORGE_SERVE_URL", server)
    monkeypatch.setenv("SOLFORGE_SERVE_TOKEN", TOKEN)
    from solforge.rl.client import compute_score, openrlhf_reward_func, trl_reward

    label = json.dumps({"problem": "tiny_linear"})
    good, hack = _block("honest_triton"), _block("hack_no_kernel")
    # TRL: conversational completions, the label column passed by name
    f = trl_reward()
    got = f(prompts=["p", "p", "p"], completions=[
        [{"role": "assistant", "content": good}], [{"role": "assistant", "content": hack}],
        [{"role": "assistant", "content": "no code"}]], label=[label] * 3)
    assert got[0] >= 1.0 and got[1] == -1.0 and got[2] == -1.0
    with pytest.raises(KeyError, match="label"):
        f(prompts=["p"], completions=["x"])
    # verl: one sample a call, ground truth as `solforge rl dataset` writes it
    score = compute_score("solforge", good, label)
    assert score["score"] >= 1.0 and score["passed"] == 1.0 and score["hack"] == 0.0
    assert compute_score("solforge", hack, label)["hack"] == 1.0
    # OpenRLHF: queries are prompt + response
    out = openrlhf_reward_func(queries=["P:" + good, "P:" + hack], prompts=["P:", "P:"],
                               labels=[label, label])
    assert out["rewards"].tolist()[0] >= 1.0 and out["rewards"].tolist()[1] == -1.0
