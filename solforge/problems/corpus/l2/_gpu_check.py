# temporary: not a problem (leading underscore); deleted after the check
import glob, importlib.util, inspect, os, sys, time, traceback
import torch
sys.path.insert(0, os.getcwd())
import types
_pkg = types.ModuleType("solforge.problems")  # skip the package __init__ (needs pydantic)
_pkg.__path__ = [os.path.join(os.getcwd(), "solforge", "problems")]
sys.modules["solforge.problems"] = _pkg
from solforge.problems import gen

TOL = {"bf16": 2e-2, "fp16": 1e-2}
only = sys.argv[1:]
out_f = open(os.path.join(os.environ.get("OUT", "/tmp"), "gpu_check.txt"), "w")

def log(s):
    print(s, flush=True); out_f.write(s + "\n"); out_f.flush()

def call(fn, params):
    sig = inspect.signature(fn)
    return fn(**{k: v for k, v in params.items() if k in sig.parameters})

def todev(x, dt=None):
    if not isinstance(x, torch.Tensor):
        return x
    x = x.cuda()
    return x.double() if (dt and x.is_floating_point()) else x

files = sorted(glob.glob("solforge/problems/corpus/l2/[!_]*.py") + glob.glob("solforge/problems/corpus/attention/[!_]*.py"))
log(f"torch {torch.__version__} {torch.cuda.get_device_name()}")
for f in files:
    name = os.path.basename(f)[:-3]
    if only and name not in only:
        continue
    spec = importlib.util.spec_from_file_location("p_" + name, f)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    S = mod.SOLFORGE
    tol = TOL[S["precision"]]
    for w, dist in [(w, d) for w in S["workloads"] for d in ("normal", "outliers")]:
        if w.get("cpu"):
            continue
        p = w["params"]
        try:
            torch.manual_seed(42)
            with torch.device("cuda"):
                m = mod.Model(*call(mod.get_init_inputs, p)).eval()
            torch.manual_seed(1)
            with gen.distribution(dist):
                inp = [todev(x) for x in call(mod.get_inputs, p)]
            nbytes = sum(t.numel() * t.element_size() for t in inp if isinstance(t, torch.Tensor))
            nbytes += sum(t.numel() * t.element_size() for t in list(m.parameters()) + list(m.buffers()))
            with torch.no_grad():
                out = m(*inp); torch.cuda.synchronize()
                ts = []
                for _ in range(5):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record(); m(*inp); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
                ms = sorted(ts)[2]
                peak = torch.cuda.max_memory_allocated() / 2**30
                fl, by = S["flops"](p), S["bytes"](p)
                msg = (f"{name:30s} {w['name'][:26]:26s} {dist[:4]} ref={ms:8.3f}ms data={nbytes/2**30:6.3f}GiB "
                       f"peak={peak:6.1f}GiB  ref:{fl/ms/1e9:7.1f}TF/s {by/ms/1e9:7.1f}TB/s(SOL {by/4.8e12*1e3:.3f}ms,{fl/990e12*1e3:.3f}ms)")
                outs = out if isinstance(out, (tuple, list)) else [out]
                try:
                    m64 = m.double()
                    ref = m64(*[todev(x, True) for x in inp])
                    refs = ref if isinstance(ref, (tuple, list)) else [ref]
                    for o, r in zip(outs, refs):
                        if not o.is_floating_point():
                            msg += f" | ids_eq={torch.equal(o, r)} ndiff={(o != r).sum().item()}"
                        else:
                            fac = (o.double() - r).abs() / (tol + tol * r.abs())
                            msg += f" | match={(fac <= 1).double().mean().item():.6f} worst={fac.max().item():.2f} std={r.std().item():.3g}"
                    del ref, refs, m64
                except torch.OutOfMemoryError:
                    msg += " | fp64 OOM"
            log(msg)
            del m, inp, out, outs
        except Exception as e:
            log(f"{name:32s} {w['name']:28s} ERROR {type(e).__name__}: {str(e)[:300]}")
        torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
