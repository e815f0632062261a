#!/usr/bin/env bash
# Issue 21 on the GPU machine, in one device call: does the runners' read-only filesystem
# view hold on a GPU, do CUDA IPC, Triton and CUDA C++ builds still work under it and under
# hardening (SOLFORGE_HARDEN_GPU=1: no capabilities, non-dumpable judge and runners), and is
# a judge whose CUDA context is lost replaced? The answer decides whether GPU runs are
# hardened by default (solforge/env.py: harden_gpu).
# Usage (on the GPU machine, from the repository root; about 6-9 minutes on an H200):
#   OUT=/tmp/out bash benchmarks/gpu/containment.sh
# Results: $OUT/containment.json (one entry per check: ok, and what was seen), the logs
# $OUT/*.log. DEADLINE (seconds after start, default 560) bounds the last, open-ended step.
# STEPS (default: all four) names the Python checks to run: machine tamper_default
# tamper_hardened builds.
# DEVICE=cpu dry-runs steps 1-3 on a CPU machine (slow there: the builds fail as GPU-only).
set -u
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out} SOLFORGE_CACHE=${SOLFORGE_CACHE:-/tmp/sfcache}
mkdir -p "$OUT" "$SOLFORGE_CACHE"
. benchmarks/gpu/lib.sh && ensure_pydantic || exit 3
T0=$(date +%s)
left() { local l=$(( ${DEADLINE:-560} - ($(date +%s) - T0) )); echo $(( l > 1 ? l : 1 )); }

# 1-3: the machine, the tamper test in both modes, builds under the view (one Python run)
timeout -k 10 $(( $(left) - 200 )) python3 - <<'EOF' 2>&1 | tee "$OUT/containment_checks.log"
import hashlib, json, os, pwd, shutil, subprocess, sys, time
from pathlib import Path

ROOT = Path.cwd()
FIX = ROOT / "tests" / "fixtures"
OUT = Path(os.environ["OUT"])
results = {}
DEVICE = os.environ.get("DEVICE", "cuda")


def save():
    (OUT / "containment.json").write_text(json.dumps(results, indent=1))


def machine():
    from solforge.bench.runner import fsview, sandbox
    import torch, triton
    os.environ.pop("SOLFORGE_HARDEN_GPU", None)
    default = sandbox.containment_note("cuda")
    os.environ["SOLFORGE_HARDEN_GPU"] = "1"
    hardened = sandbox.containment_note("cuda")
    os.environ.pop("SOLFORGE_HARDEN_GPU")
    results["machine"] = {"uid": os.getuid(), "torch": torch.__version__,
                          "triton": triton.__version__,
                          "gpu": torch.cuda.get_device_name(0) if DEVICE != "cpu" else "cpu",
                          "capabilities": sandbox.capabilities(),
                          "fs_view_unavailable_because": fsview.available(),
                          "note_default": default, "note_hardened": hardened,
                          "ok": fsview.available() == "" and hardened == ""}


SCRIPT = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
import solforge
assert solforge.__file__.startswith(sys.argv[1]), solforge.__file__
from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
out = []
import os
device = os.environ.get("DEVICE", "cuda")
wl = ["small", "held", "gpu_mid"] if device != "cpu" else None
with Evaluator(EvalOptions(device=device, baselines=["eager"], timeout_s=300, seed=4)) as ev:
    for sol in sys.argv[3:]:
        r = ev.evaluate(sys.argv[2], sol, **({"workloads": wl} if wl else {}))
        out.append({"solution": sol.rsplit("/", 1)[-1], "status": r.status.value,
                    "flags": r.flags, "containment": r.containment,
                    "judge_fault": r.judge_fault, "message": r.message[:600],
                    "duration_s": r.duration_s})
print("RESULT " + json.dumps(out))
'''


def evaluate(site, solutions, harden):
    env = dict(os.environ)
    # the copy is imported instead of the checkout (the pydantic wheels' folder stays)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in env.get("PYTHONPATH", "").split(os.pathsep)
        if p and Path(p).resolve() != ROOT)
    if harden:
        env["SOLFORGE_HARDEN_GPU"] = "1"
    else:
        env.pop("SOLFORGE_HARDEN_GPU", None)
    p = subprocess.run([sys.executable, "-c", SCRIPT, site, str(FIX / "problems" / "tiny_linear.py"),
                        *map(str, solutions)], capture_output=True, text=True, timeout=400,
                       env=env, cwd="/tmp")
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if not line:
        return {"error": (p.stdout[-2000:] + p.stderr[-3000:])}
    return json.loads(line[0][7:])


def snapshot(pkg):
    import torch
    lib = Path(torch.__file__).parent
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    files = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in pkg.rglob("*") if p.is_file()}
    stats = {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
             for root, pat in ((lib, "*.py"), (home, ".*")) for p in root.glob(pat) if p.is_file()}
    return files, stats, lib, home


def tamper(harden):
    tmp = Path(f"/tmp/solforge-tamper-{'hardened' if harden else 'default'}")
    shutil.rmtree(tmp, ignore_errors=True)
    pkg = tmp / "site" / "solforge"
    shutil.copytree(ROOT / "solforge", pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    before = snapshot(pkg)
    good = FIX / "solutions" / "tiny_good_pytorch.py"
    recs = evaluate(str(pkg.parent), [good, FIX / "hacks" / "tamper_everything.py", good], harden)
    after = snapshot(pkg)
    made = [str(p) for p in (before[2] / "_solforge_was_here.py", before[3] / "._solforge_was_here")
            if p.exists()]
    for p in made:
        os.unlink(p)
    same = before[0] == after[0] and before[1] == after[1]
    hack = recs[1] if isinstance(recs, list) and len(recs) > 1 else {}
    ok = same and not made and "written=0/" in hack.get("message", "") \
        and "opened=0 created=0 own_dir=ok" in hack.get("message", "") \
        and all(r["status"] == "PASSED" for r in (recs[0], recs[2]))
    results[f"tamper_{'hardened' if harden else 'default'}"] = {
        "ok": bool(ok), "byte_identical": same, "probe_files_made": made, "records": recs}


def builds():
    sols = [FIX / "solutions" / n for n in ("tiny_good_pytorch.py", "tiny_good_triton.py",
                                            "tiny_good_nvrtc.py", "tiny_good_load_inline.py",
                                            "tiny_own_dirs.py", "tiny_good_load_inline.py")]
    recs = evaluate(str(ROOT), sols, harden=True)
    ok = isinstance(recs, list) and all(r["status"] == "PASSED" and r["containment"] == ""
                                        for r in recs)
    # the second load_inline evaluation finds its build in the candidate's kept caches
    results["builds_hardened"] = {"ok": bool(ok), "records": recs,
                                  "load_inline_s": [r.get("duration_s") for r in recs
                                                    if r.get("solution") == "tiny_good_load_inline.py"]
                                  if isinstance(recs, list) else None}


# STEPS picks a subset (e.g. STEPS="machine builds" once the tamper test is recorded)
wanted = os.environ.get("STEPS", "machine tamper_default tamper_hardened builds").split()
for name, fn in (("machine", machine), ("tamper_default", lambda: tamper(False)),
                 ("tamper_hardened", lambda: tamper(True)), ("builds", builds)):
    if name not in wanted:
        continue
    t0 = time.time()
    try:
        fn()
    except Exception as e:  # record and go on: every check is reported
        results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    print(f"=== {name} ({time.time() - t0:.0f}s): "
          f"{json.dumps({k: v.get('ok') for k, v in results.items()})}", flush=True)
    save()
EOF

[ "${DEVICE:-cuda}" = cpu ] && exit 0
# 4: hardened GPU runs keep CUDA IPC; a judge that loses its CUDA context is replaced;
# then as much of the GPU corpus as time allows, hardened
SOLFORGE_HARDEN_GPU=1 timeout -k 10 $(left) python3 -m pytest -q -rP -p no:cacheprovider \
  -k "hardened or cuda_context_is_lost or out_of_memory" \
  tests/anticheat/test_gpu_corpus.py 2>&1 | tee "$OUT/gpu_faults_hardened.log" | tail -15
SOLFORGE_HARDEN_GPU=1 timeout -k 10 $(left) python3 -m pytest -q -rf -p no:cacheprovider \
  -k "test_hack_on_gpu or honest_on_gpu" \
  tests/anticheat/test_gpu_corpus.py 2>&1 | tee "$OUT/gpu_corpus_hardened.log" | tail -30
echo "=== done ($(( $(date +%s) - T0 ))s)"; cat "$OUT/containment.json" | head -c 3000
