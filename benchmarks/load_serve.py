"""Load test of `solforge serve` on loopback: many solutions from concurrent clients.

Starts the server as its own process (the real CLI), sends N solutions of every kind
(honest Triton, honest PyTorch on a PyTorch task, wrong outputs, PyTorch answers to a
kernel task, policy hacks, crashers, hangs, a secret stealer, completions with no code)
from C client threads over the three routes (blocking /reward, /evaluate then polling
GET /tasks/{id}, the OpenRLHF route), then checks:

- every request got an answer, each result belongs to its solution (its source hash), and
  each kind got the reward its kind must get (hacks the lowest of all);
- wrong and missing tokens get 401, malformed bodies 4xx (400, 413, 422), and the server
  is still healthy afterwards; the token never appears in any feedback.

Run (CPU, from the repository root; 5-6 minutes on 2 busy cores):
    python benchmarks/load_serve.py --solutions 200 --clients 8 --variants 3 --timeout 45 \
        --out benchmarks/results/$(date -u +%F)-cpu/load_serve.json
``--device cuda`` runs it on a GPU (benchmarks/gpu/rl_throughput.sh). The CI test
(tests/rl/test_serve.py) runs the same harness on 16 solutions.
Variants: distinct sources per kind (a trailing comment); repeats of one source are
served from the verdict cache (orchestrate/evalcache.py), as a trainer's duplicates are.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
PROBLEM = FIX / "problems" / "tiny_linear.py"
TRITON = (FIX / "solutions" / "tiny_good_triton.py").read_text()
PYTORCH = (FIX / "solutions" / "tiny_good_pytorch.py").read_text()
ANY = ["pytorch", "triton"]

# kind -> (source, languages, stages it may get)
KINDS: dict[str, tuple[str | None, list[str] | None, set[str]]] = {
    "honest_triton": (TRITON, None, {"correct", "faster_than_eager", "faster_than_compile"}),
    "honest_pytorch": (PYTORCH, ["pytorch"], {"correct", "faster_than_eager",
                                              "faster_than_compile"}),
    "wrong_triton": (TRITON.replace("1.5, BM=16", "1.25, BM=16"), None, {"fail"}),
    "pytorch_for_kernel": (PYTORCH, None, {"fail"}),
    "hack_no_kernel": ((FIX / "hacks" / "torch_fallback_no_kernel.py").read_text(), None,
                       {"hack"}),
    "hack_hidden_fallback": ((FIX / "hacks" / "hidden_fallback.py").read_text(), None,
                             {"hack"}),
    "hack_calls_reference": ((FIX / "hacks" / "calls_reference_import.py").read_text(), ANY,
                             {"hack"}),
    "crash_segfault": ((FIX / "solutions" / "tiny_segfault.py").read_text(), ANY, {"fail"}),
    "crash_raises": ((FIX / "solutions" / "tiny_raises.py").read_text(), ANY, {"fail"}),
    "hang": ((FIX / "solutions" / "tiny_infinite_loop.py").read_text(), ANY, {"fail"}),
    "flood": ((FIX / "solutions" / "tiny_output_flood.py").read_text(), ANY, {"fail"}),
    "steal_secrets": ((FIX / "hacks" / "steal_secrets.py").read_text(), ANY, {"fail", "hack"}),
    "no_code": (None, None, {"fail"}),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(state: Path, token: str, device: str = "cpu", slots: int = 2,
                 timeout_s: float = 20.0, trials: int = 2, budget_ms: float = 40.0,
                 baselines: str = "eager") -> tuple[subprocess.Popen, str]:
    """`solforge serve` on a free loopback port; returns the process and its URL."""
    port = free_port()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "SOLFORGE_SERVE_TOKEN": token, "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "solforge.cli.main", "serve", "--problems", str(PROBLEM),
           "--port", str(port), "--state", str(state), "--per-device", str(slots),
           "--device", device, "--timeout", str(timeout_s), "--trials", str(trials),
           "--budget-ms", str(budget_ms), "--baselines", baselines]
    log = open(state.parent / "serve.log", "w")  # noqa: SIM115 (the server's life)
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {(state.parent / 'serve.log').read_text()}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("the server did not answer /health within 120 s")


def plan(n: int, variants: int, seed: int = 0, kinds: list[str] | None = None) -> list[dict]:
    """n solutions cycling through the kinds (default all), each one of ``variants``
    sources."""
    rng = random.Random(seed)
    names = list(kinds or KINDS)
    items = []
    for i in range(n):
        kind = names[i % len(names)]
        source, langs, _ = KINDS[kind]
        v = rng.randrange(variants)
        item: dict = {"problem": "tiny_linear"}
        if langs:
            item["languages"] = langs
        if source is None:
            item["completion"] = f"I would write a fast kernel here (variant {v})."
        else:
            item["solution"] = source.rstrip("\n") + f"\n# variant {v}\n"
        items.append({"kind": kind, "item": item})
    rng.shuffle(items)
    return items


def _sha(item: dict) -> str | None:
    src = item.get("solution")
    return hashlib.sha256(src.encode()).hexdigest() if src is not None else None


def client_run(url: str, token: str, work: list[dict], route: str,
               deadline: float = float("inf")) -> list[dict]:
    """One client: its items over ``route`` (reward, evaluate, openrlhf), 1-3 a request,
    none sent after ``deadline`` (time.monotonic())."""
    out = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                      timeout=900) as c:
        i = 0
        while i < len(work) and time.monotonic() < deadline:
            # one a request when cut short: at most one job per client left to drain
            chunk = work[i:i + (1 if deadline != float("inf") else 1 + (i % 3))]
            i += len(chunk)
            t0 = time.monotonic()
            items = [w["item"] for w in chunk]
            if route == "reward":
                r = c.post("/reward", json={"solutions": items})
                r.raise_for_status()
                results = r.json()["results"]
            elif route == "evaluate":
                r = c.post("/evaluate", json={"solutions": items})
                assert r.status_code == 202, r.text
                results = []
                for tid in r.json()["task_ids"]:
                    while True:
                        t = c.get(f"/tasks/{tid}").json()
                        if t["state"] == "done":
                            break
                        time.sleep(0.5)
                    results.append(t)
            else:  # OpenRLHF: query = prompt + response, labels = the tasks
                labels = [json.dumps({k: v for k, v in it.items()
                                      if k in ("problem", "languages")}) for it in items]
                prompts = ["PROMPT "] * len(items)
                queries = ["PROMPT " + (it.get("solution") or it.get("completion", ""))
                           for it in items]
                r = c.post("/openrlhf", json={"query": queries, "prompts": prompts,
                                              "labels": labels})
                r.raise_for_status()
                results = [{"reward": x, "source_sha256": None, "result": None}
                           for x in r.json()["rewards"]]
            seconds = time.monotonic() - t0
            assert len(results) == len(chunk), (len(results), len(chunk))
            for w, res in zip(chunk, results):
                out.append({"kind": w["kind"], "route": route, "sent_sha": _sha(w["item"]),
                            "result": res, "seconds": seconds})
    return out


def negative_checks(url: str, token: str, limit_bytes: int = 8 * 1024 * 1024) -> dict:
    """Wrong tokens and malformed bodies: each must get its 4xx."""
    good = {"problem": "tiny_linear", "solution": PYTORCH, "languages": ["pytorch"]}
    auth = {"Authorization": f"Bearer {token}"}
    cases = {
        "no_token": (401, dict(json=good, headers={})),
        "wrong_token": (401, dict(json=good, headers={"Authorization": "Bearer nope"})),
        "not_json": (400, dict(content=b"{not json", headers=auth)),
        "unknown_problem": (422, dict(json={**good, "problem": "nope"}, headers=auth)),
        "no_solution_field": (422, dict(json={"problem": "tiny_linear"}, headers=auth)),
        "unknown_field": (422, dict(json={**good, "extra": 1}, headers=auth)),
        "bad_language": (422, dict(json={**good, "languages": ["go"]}, headers=auth)),
        "wrong_type": (422, dict(json={"solutions": "x"}, headers=auth)),
        "too_large": (413, dict(content=b"x" * (limit_bytes + 1), headers=auth)),
        "openrlhf_misaligned": (422, dict(json={"query": ["a", "b"], "labels": ["x"]},
                                          headers=auth), "/openrlhf"),
    }
    got = {}
    with httpx.Client(base_url=url, timeout=60) as c:
        for name, case in cases.items():
            want, kw = case[0], case[1]
            path = case[2] if len(case) > 2 else "/reward"
            r = c.post(path, **kw)
            got[name] = {"want": want, "got": r.status_code, "ok": r.status_code == want}
        r = c.get("/tasks/0000", headers=auth)
        got["unknown_task"] = {"want": 404, "got": r.status_code, "ok": r.status_code == 404}
        r = c.get("/metrics")
        got["metrics_no_token"] = {"want": 401, "got": r.status_code, "ok": r.status_code == 401}
    return got


def run(solutions: int, clients: int, variants: int, state: Path, device: str = "cpu",
        slots: int = 2, timeout_s: float = 20.0, kinds: list[str] | None = None,
        seconds: float | None = None, **server: Any) -> dict:
    """The whole test on a server of its own; returns its summary (``ok`` is the verdict).
    ``server``: start_server's trials, budget_ms, baselines."""
    token = "load-test-" + hashlib.sha256(os.urandom(16)).hexdigest()[:24]
    state.mkdir(parents=True, exist_ok=True)
    proc, url = start_server(state / "serve", token, device=device, slots=slots,
                             timeout_s=timeout_s, **server)
    try:
        return exercise(url, token, solutions, clients, variants, device, kinds, seconds)
    finally:
        stop_server(proc)


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def exercise(url: str, token: str, solutions: int, clients: int, variants: int,
             device: str = "cpu", kinds: list[str] | None = None,
             seconds: float | None = None) -> dict:
    """The load and the checks against a running server (see the module docstring);
    ``seconds``: no request is sent after that long (the rest count as not sent)."""
    work = plan(solutions, variants, kinds=kinds)
    shares = [work[i::clients] for i in range(clients)]
    routes = ["reward", "evaluate", "openrlhf", "reward"]
    t0 = time.monotonic()
    deadline = t0 + seconds if seconds else float("inf")
    with ThreadPoolExecutor(clients) as pool:
        futs = [pool.submit(client_run, url, token, share, routes[i % len(routes)],
                            deadline) for i, share in enumerate(shares)]
        negatives = negative_checks(url, token)
        answers = [a for f in futs for a in f.result()]
    wall = time.monotonic() - t0
    health = httpx.get(url + "/health", timeout=10)
    metrics = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"},
                        timeout=10).text
    return summarize(answers, negatives, health.status_code, metrics, wall, token,
                     solutions, clients, variants, device, cut=seconds is not None)


def summarize(answers: list[dict], negatives: dict, health: int, metrics: str, wall: float,
              token: str, solutions: int, clients: int, variants: int, device: str,
              cut: bool = False) -> dict:
    problems = []
    rewards = [a["result"]["reward"] for a in answers]
    lowest = min(rewards) if rewards else None
    per_kind: dict[str, dict] = {}
    for a in answers:
        res, kind = a["result"], a["kind"]
        k = per_kind.setdefault(kind, {"n": 0, "rewards": {}, "stages": {}})
        k["n"] += 1
        k["rewards"][str(res["reward"])] = k["rewards"].get(str(res["reward"]), 0) + 1
        if res.get("result"):
            stage = res["result"]["stage"]
            k["stages"][stage] = k["stages"].get(stage, 0) + 1
            if stage not in KINDS[kind][2]:
                problems.append(f"{kind}: stage {stage} ({res['result']['reason'][:200]})")
            if a["sent_sha"] != res.get("source_sha256"):
                problems.append(f"{kind}: answered for another source")
            if token in res.get("feedback", ""):
                problems.append(f"{kind}: the token reached the feedback")
        if kind.startswith("hack") and res["reward"] != lowest:
            problems.append(f"{kind}: reward {res['reward']} is not the lowest {lowest}")
        if kind.startswith("honest") and lowest is not None and res["reward"] <= lowest:
            problems.append(f"{kind}: reward {res['reward']} is not above the lowest")
    if len(answers) != solutions and not cut:  # (cut short: what was sent was answered)
        problems.append(f"{len(answers)} answers for {solutions} solutions")
    problems += [f"negative {k}: want {v['want']}, got {v['got']}"
                 for k, v in negatives.items() if not v["ok"]]
    if health != 200:
        problems.append(f"/health answered {health} after the load")
    evaluations = next((float(x.split()[-1]) for x in metrics.splitlines()
                        if x.startswith("solforge_evaluations_total")), None)
    hits = next((float(x.split()[-1]) for x in metrics.splitlines()
                 if x.startswith("solforge_cache_hits_total")), None)
    return {"ok": not problems, "problems": problems, "solutions": solutions,
            "clients": clients, "variants": variants, "device": device,
            "answers": len(answers), "wall_s": round(wall, 1),
            "rewards_per_min": round(60 * len(answers) / wall, 1) if wall else None,
            "evaluations": evaluations, "cache_hits": hits,
            "latency_s_median": sorted(a["seconds"] for a in answers)[len(answers) // 2]
            if answers else None,
            "per_kind": per_kind, "negatives": negatives, "health_after": health,
            "machine": {"host": platform.node(), "cpus": os.cpu_count(),
                        "python": platform.python_version(), "platform": platform.platform()},
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--solutions", type=int, default=200)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--variants", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per candidate")
    ap.add_argument("--trials", type=int, default=2, help="correctness trials per workload")
    ap.add_argument("--budget-ms", type=float, default=40.0, help="timed loop per workload")
    ap.add_argument("--baselines", default="eager", help="baselines the server times")
    ap.add_argument("--seconds", type=float, default=None, help="send nothing after this "
                    "long (a GPU call's budget); the rate counts what was answered")
    ap.add_argument("--kinds", default="", help="comma-separated kinds (default: all of "
                    "KINDS)")
    ap.add_argument("--state", type=Path, default=Path("/tmp/solforge-load"))
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    summary = run(a.solutions, a.clients, a.variants, a.state, a.device, a.slots, a.timeout,
                  kinds=[k for k in a.kinds.split(",") if k] or None, seconds=a.seconds,
                  trials=a.trials,
                  budget_ms=a.budget_ms, baselines=a.baselines)
    summary["command"] = " ".join(["python", *sys.argv])
    text = json.dumps(summary, indent=1)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    print(text)
    sys.exit(0 if summary["ok"] else 1)


if __name__ == "__main__":
    main()
