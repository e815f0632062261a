"""What an agent reads back from ``evaluate``, ``submit`` and ``profile``: short plain text.

A record is boiled down to its status, the error or mismatch that decided it, one line per
workload (kernel time against eager and ``torch.compile``, SOL score, bound, error), the
geomeans, the anti-cheat flags, and one line saying what to look at next. Full records
stay in the ledger; the model gets only what helps it choose the next change.

Not covered: advice beyond one line per case; the protocol (SKILL.md) carries the method.
"""

from __future__ import annotations

from typing import Any

from solforge.records.evaluation import EvaluationRecord, Status, WorkloadResult


def _f(x: float | None, unit: str = "", digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}{unit}"


def _workload_line(w: WorkloadResult) -> str:
    ok = "ok" if w.correct else (w.status.value if w.status else "FAILED")
    err = "" if w.max_abs_error is None else f" max_abs_err={w.max_abs_error:.2e}"
    if w.mismatch_ratio:
        err += f" mismatched={w.mismatch_ratio:.2%}"
    return (f"  {w.name:<16} {ok:<8} kernel={_f(w.time_ms, 'ms')} eager={_f(w.eager_ms, 'ms')}"
            f" compile={_f(w.compile_ms, 'ms')} vs_eager={_f(w.speedup_vs_eager, 'x')}"
            f" vs_compile={_f(w.speedup_vs_compile, 'x')} sol={_f(w.sol_score, digits=2)}"
            f" bound={w.bound or '-'}{err}")


def next_step(rec: EvaluationRecord) -> str:
    """One line: what to look at next, from the status and the numbers."""
    s = rec.status
    if s is Status.COMPILE_ERROR:
        return "fix the build or import error above, then evaluate again"
    if s is Status.RUNTIME_ERROR:
        return "fix the runtime error above (shapes, dtypes, launch bounds, device)"
    if s is Status.TIMEOUT:
        return "the candidate hangs or is far too slow: check loop bounds and launch grids"
    if s is Status.INCORRECT_SHAPE:
        return "return the reference's output shape exactly (read problem.py's forward)"
    if s is Status.INCORRECT_DTYPE:
        return "return the reference's output dtype exactly"
    if s is Status.INCORRECT_NUMERICAL:
        return ("outputs differ beyond tolerance: check accumulation dtype, masking of tails, "
                "off-by-one indexing, and every input distribution (outliers, zeros)")
    if s is Status.REWARD_HACK:
        return ("the evaluator rejected this as gaming the measurement (flags above): no "
                "caching across calls, no side streams or threads, compute every call")
    if s is Status.INVALID_REFERENCE:
        return "the reference itself failed: nothing to fix in the solution; report it"
    timed = [w for w in rec.workloads if w.time_ms is not None]
    slow = [w for w in timed if w.speedup_vs_eager is not None and w.speedup_vs_eager < 1]
    if slow:
        return (f"correct but slower than eager on {', '.join(w.name for w in slow)}: "
                "profile it and attack the largest kernel")
    scores = [w for w in timed if w.sol_score is not None]
    if scores:
        worst = min(scores, key=lambda w: w.sol_score or 0.0)
        if worst.bound == "memory":
            return (f"lowest SOL score on {worst.name} ({_f(worst.sol_score, digits=2)}, "
                    "memory-bound): fuse ops, cut bytes moved, vectorise loads, avoid "
                    "intermediate tensors")
        if worst.bound == "compute":
            return (f"lowest SOL score on {worst.name} ({_f(worst.sol_score, digits=2)}, "
                    "compute-bound): use tensor cores, better tiling, fewer wasted FLOPs")
    return "correct: profile to find the next bottleneck, or submit if no gain is left"


def evaluation_report(rec: EvaluationRecord, title: str = "evaluate") -> str:
    """The compact text of one evaluation for the model."""
    scope = "all workloads, held-out included" if rec.held_out_included else \
        "visible workloads"
    lines = [f"{title}: {rec.status.value} ({rec.language}, {scope}, policy {rec.policy})"]
    if rec.message and not rec.passed:
        msg = rec.message.strip()
        if len(msg) > 2500:
            msg = msg[:1200] + "\n...\n" + msg[-1200:]
        lines.append(msg)
    if rec.workloads:
        lines.append("workloads:")
        lines += [_workload_line(w) for w in rec.workloads]
    if rec.passed:
        lines.append(f"geomean: vs_eager={_f(rec.speedup_vs_eager, 'x')} "
                     f"vs_compile={_f(rec.speedup_vs_compile, 'x')} "
                     f"sol_score={_f(rec.sol_score, digits=2)}")
    lines.append(f"flags: {', '.join(rec.flags) if rec.flags else 'none'}")
    notes = sorted({w.message.strip() for w in rec.workloads if w.correct and w.message})
    if notes:
        lines.append("notes: " + "; ".join(n[:300] for n in notes[:3]))
    lines.append(f"next: {next_step(rec)}")
    return "\n".join(lines)


def profile_report(prof: dict[str, Any], ncu: str | None = None, top: int = 15) -> str:
    """Per-kernel (GPU) or per-operator (CPU) time, largest first, with shares."""
    if not prof.get("ok"):
        status = f" [{prof['status']}]" if prof.get("status") else ""
        return f"profile failed{status}: {prof.get('message', '')[:2500]}"
    rows = prof.get("rows", [])
    total = sum(r["ms_per_call"] for r in rows) or 1.0
    kind = "kernel" if str(prof.get("device", "")).startswith("cuda") else "operator"
    lines = [(f"profile of {prof.get('problem')} on workload {prof.get('workload')} "
              f"({prof.get('device')}, {prof.get('language')}): {kind} time per call")]
    for r in rows[:top]:
        lines.append(f"  {r['ms_per_call']:9.4f} ms {r['ms_per_call'] / total:6.1%} "
                     f"x{r['calls']:<3} {r['name'][:110]}")
    if len(rows) > top:
        lines.append(f"  ... {len(rows) - top} more")
    if ncu:
        lines.append(ncu)
    return "\n".join(lines)
