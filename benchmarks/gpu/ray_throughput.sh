#!/usr/bin/env bash
# Candidate throughput of the Ray backend against the local backend on one machine (issue 27).
#
# The same candidates (each problem's reference restated as ModelNew) are evaluated by
# WORKERS threads sharing the device, first through judge processes here (LocalBackend),
# then through one judge actor per GPU of a Ray instance started here (RayBackend): the
# planner's two transports, and nothing else differs. Before the timed passes every
# candidate is evaluated once (warm compile caches, prewarmed baselines) so that neither
# backend pays them. Writes $OUT/ray_throughput.json: candidates per second of each, their
# ratio, and the median phase times of each pass.
#
# Ray is carried as wheels (the H200 has no internet; the ray wheel is over the 64 MiB carry
# limit): see benchmarks/gpu/PLAN.md, "Preparing the carried folders". Call 1 carries
# .ray1 (the first part of the ray wheel; run `true`), call 2 on the same warm machine
# carries .ray2 (the second part and the other wheels) and runs this script.
#
# Env: DEVICE (cuda), WORKERS (3), ROUNDS (candidates per problem and pass, 4),
# TARGETS (corpus problems), DEADLINE (seconds for the whole script, 330).
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT="${OUT:-/tmp/ray_throughput}"
mkdir -p "$OUT"
START=$(date +%s)
if ! python3 -c "import ray" 2>/dev/null; then
    WH=/tmp/raywheels
    mkdir -p "$WH"
    if [ -f .ray1/raypart.aa ] && [ -f .ray2/raypart.ab ]; then
        cat .ray1/raypart.aa .ray2/raypart.ab > "$WH/$(cat .ray2/ray_wheel_name)"
    fi
    cp .ray2/*.whl "$WH/" 2>/dev/null || true
    cp .whl/*.whl "$WH/" 2>/dev/null || true
    python3 -m pip install --no-index --find-links "$WH" ray 2>&1 | tail -3 | tee "$OUT/pip.log"
fi
python3 -c "import ray; print('ray', ray.__version__)" || {
    echo "ray is not installed: carry .ray1 in one call and .ray2 in the next (PLAN.md)";
    exit 3; }
export RAY_TMPDIR=/tmp/ray SOLFORGE_DEADLINE=$(( START + ${DEADLINE:-330} ))
python3 - <<'EOF'
import json, os, statistics, threading, time
from pathlib import Path

from solforge.orchestrate.backend import LocalBackend, make_backend
from solforge.problems import resolve_target
from solforge.records.options import EvalOptions

out = Path(os.environ["OUT"] if "OUT" in os.environ else "/tmp/ray_throughput")
device = os.environ.get("DEVICE", "cuda")
workers = int(os.environ.get("WORKERS", "3"))
rounds = int(os.environ.get("ROUNDS", "4"))
deadline = float(os.environ["SOLFORGE_DEADLINE"])
targets = os.environ.get("TARGETS", "rmsnorm_llama3,gelu_tanh_gemma2,layernorm_vit,"
                         "bias_gelu_whisper").split(",")
problems = [p for t in targets for p in resolve_target(t)[0]]
work = Path("/tmp/ray_throughput_solutions")
work.mkdir(parents=True, exist_ok=True)
cands = []
for p in problems:
    src = p.path.read_text().replace("class Model(", "class ModelNew(").replace(
        "super(Model,", "super(ModelNew,")
    f = work / f"{p.name}.py"
    f.write_text(src)
    cands.append((p, f))
# the exploring settings of the search worker (250 ms timed loops), eager baseline only so
# that both passes fit the device call (a compile baseline costs both backends the same)
opts = EvalOptions(device=device if device == "cpu" else "cuda:0", workloads="visible",
                   budget_ms=250 if device != "cpu" else 40, baselines=["eager"],
                   timeout_s=180)


def one_pass(backend, label, jobs):
    """Evaluate ``jobs`` (problem, file, seed) over ``workers`` threads; seconds, records."""
    evs = [backend.evaluator(opts, f"{label}-w{i}") for i in range(workers)]
    queue, lock, records = list(jobs), threading.Lock(), []

    def run(ev):
        while time.time() < deadline - 20:
            with lock:
                if not queue:
                    return
                p, f, seed = queue.pop(0)
            rec = ev.evaluate(p, f, seed=seed)
            with lock:
                records.append(rec)

    # every judge started (and warm) before the clock starts
    threads = [threading.Thread(target=ev.evaluate, args=(cands[0][0], cands[0][1]),
                                kwargs={"seed": 7}) for ev in evs]
    [t.start() for t in threads]
    [t.join() for t in threads]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(ev,)) for ev in evs]
    [t.start() for t in threads]
    [t.join() for t in threads]
    wall = time.perf_counter() - t0
    for ev in evs:
        ev.close()
    return wall, records


def summary(wall, records):
    phases = {}
    for r in records:
        for k, v in (r.phase_seconds or {}).items():
            phases.setdefault(k, []).append(v)
    return {"candidates": len(records), "wall_s": round(wall, 2),
            "candidates_per_s": round(len(records) / wall, 4) if wall else None,
            "passed": sum(r.passed for r in records),
            "median_phase_s": {k: round(statistics.median(v), 3) for k, v in phases.items()}}


jobs = [(p, f, 100 + i) for i in range(rounds) for p, f in cands]
result = {"device": device, "workers": workers, "problems": [p.name for p in problems],
          "jobs_per_pass": len(jobs)}
local = LocalBackend()
t = time.perf_counter()
one_pass(local, "warm", [(p, f, 1) for p, f in cands])
result["warmup_s"] = round(time.perf_counter() - t, 1)
wall, recs = one_pass(local, "local", jobs)
result["local"] = summary(wall, recs)
print("local", result["local"], flush=True)
t = time.perf_counter()
ray_backend = make_backend("ray")
result["ray_init_s"] = round(time.perf_counter() - t, 1)
try:
    devs = ray_backend.devices([opts.device if device == "cpu" else "cuda"])
    wall, recs = one_pass(ray_backend, "ray", jobs)
    result["ray"] = summary(wall, recs)
    result["ray"]["where"] = ray_backend.where()
    result["ray"]["devices"] = devs
finally:
    ray_backend.close()
print("ray", result["ray"], flush=True)
lc, rc = result["local"]["candidates"], result["ray"]["candidates"]
if lc and rc and lc == rc == len(jobs):
    ratio = result["ray"]["candidates_per_s"] / result["local"]["candidates_per_s"]
    result["ray_over_local"] = round(ratio, 3)
    result["within_10_percent"] = ratio >= 0.9
else:
    result["ray_over_local"] = None
    result["note"] = "a pass did not finish every candidate before the deadline"
(out / "ray_throughput.json").write_text(json.dumps(result, indent=1))
print(json.dumps({k: result.get(k) for k in ("ray_over_local", "within_10_percent",
                                              "warmup_s", "ray_init_s")}))
EOF
