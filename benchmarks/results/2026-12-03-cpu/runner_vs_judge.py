"""A real runner and this process time the reference of rmsnorm_llama3 in turn, N rounds:
the runner-vs-judge comparison of README.md (run from the repository root with
``PYTHONPATH=.``; ``trace`` as a second argument runs a correctness call and the
policy trace first, as an evaluation does). CPU only."""
import time, torch, sys
from solforge.bench.sandbox import RunnerProcess, SandboxConfig
from solforge.bench.handle import RunnerHandle
from solforge.bench import inputs as I
from solforge.bench.timing import measure, TimingConfig
from solforge.problems.loader import find_builtin, import_file
from solforge.bench.reference_solution import reference_solution
torch.set_num_threads(1)
p = find_builtin("rmsnorm_llama3"); mod = import_file(p.path, prefix="solforge_reference")
w = [w for w in p.workloads if w.cpu][0]
dev = torch.device("cpu")
ref = I.build_model(mod.Model, I.init_args(mod, w.params), dev, True)
pool = [I.make_inputs(mod, w.params, 1000+k, "normal", dev) for k in range(3)]
cfg = TimingConfig(budget_ms=300, max_calls=200)
h = RunnerHandle(RunnerProcess("cpu", SandboxConfig(memory_mb=16384)), 16384)
dl = time.monotonic() + 600
h.ask({"op": "load", "problem": str(p.path), "solution": str(reference_solution(p)), "params": dict(w.params), "eval_mode": True, "cpu_threads": 1}, dl)
x = I.make_inputs(mod, w.params, 5, "normal", dev)
if "trace" in sys.argv:
    h.ask({"op": "run", "inputs": I.clone_all(x), "seed": 1}, dl)
    h.ask({"op": "trace", "inputs": I.clone_all(x), "seed": 1, "aten": True}, dl)
def med(xs): xs=sorted(xs); return xs[len(xs)//2]
for r in range(int(sys.argv[1]) if len(sys.argv)>1 else 4):
    seeds = list(range(r*1000, r*1000+200))
    rep = h.ask({"op": "time", "pool": pool, "seeds": seeds, "config": vars(cfg), "retain_bytes": 0, "seed": 1}, dl)
    with torch.no_grad():
        t = measure(ref, pool, dev, cfg, seeds=seeds)
    print(r, "runner", round(med(rep["kernel_ms"])*1e3,2), "us  judge", round(t.median_kernel_ms*1e3,2), "us  warmup", rep["warmup_calls"], t.warmup_calls)
h.close()
