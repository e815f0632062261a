"""``solforge validate``: the original model against the patched one, on the same inputs.

:func:`drift` compares two outputs: the maximum and mean absolute difference and, for
logits, the KL divergence of the patched distribution from the original's per position
(mean and 99.9th percentile), top-1 agreement, and same-top-p (the fraction of positions
whose nucleus, the smallest set of tokens holding ``top_p`` of the original's
probability, is the same token set in both). :func:`validate` runs:

- ``drift``: every step asked (prefill, decode), original and patched on the same inputs;
- ``per_module``: the same drift with one problem's modules patched at a time, and what each
  kept solution does to precision (TF32, bf16 accumulation, FP8: ``apply.lowered_precision``),
  so a reduced-precision kernel's effect on the model is named;
- ``perplexity`` (with ``tokens``, on a model whose weights mean something): the ratio of the
  patched model's perplexity to the original's;
- ``generation`` (causal LMs): ``gen_steps`` greedy tokens from the same prompt, the fraction
  of positions that agree and the first step where they part;
- ``latency``: median prefill and decode-step wall time (synchronised on a GPU) with and
  without the patch, the two interleaved round by round so drift of the machine hits both;
  on a GPU also ``graphed``, the same steps replayed from CUDA graphs (device time, without
  the host's launch cost: ``timing.graphed_latency``);
- ``module_costs``: each patched problem's module alone, host and device microseconds per
  call, original against patched (``timing.module_costs``), so a step that got slower says
  whether the kernels or their launches cost it.

Random-weight models give drift and latency only: their perplexity means nothing.
:func:`check` turns thresholds (``max_kl``, ``min_top1``, ``max_ppl_ratio``) into failures.

Not covered: sampling-based generation (greedy only), batches with padding, and latency of
more than one decode step length.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F

from solforge.models.apply import Patch, lowered_precision
from solforge.models.source import BuiltModel
from solforge.models.timing import graphed_latency, module_costs
from solforge.models.timing import step_inputs as _inputs

REPORT_SCHEMA = "solforge.validate/1"


def _logits(out: Any) -> tuple[torch.Tensor, bool]:
    """The output compared: logits when the model gives them (True), else its first
    tensor."""
    if getattr(out, "logits", None) is not None:
        return out.logits, True
    if isinstance(out, torch.Tensor):
        return out, False
    for v in (out.values() if hasattr(out, "values") else out):
        if isinstance(v, torch.Tensor):
            return v, False
    raise ValueError("the model's output holds no tensor to compare")


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_p, idx = probs.sort(-1, descending=True)
    keep = (sorted_p.cumsum(-1) - sorted_p) < top_p
    return torch.zeros_like(probs, dtype=torch.bool).scatter(-1, idx, keep)


def drift(ref: torch.Tensor, new: torch.Tensor, logits: bool = True,
          top_p: float = 0.9) -> dict[str, float]:
    """Differences of ``new`` from ``ref`` (module docstring)."""
    a, b = ref.detach().double(), new.detach().double()
    out = {"max_abs_diff": float((a - b).abs().max()), "mean_abs_diff": float((a - b).abs().mean())}
    if not logits:
        return out
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    la, lb = F.log_softmax(a, -1), F.log_softmax(b, -1)
    kl = (la.exp() * (la - lb)).sum(-1).clamp_min(0.0)
    out |= {
        "kl_mean": float(kl.mean()),
        "kl_p999": float(torch.quantile(kl.float(), 0.999)) if kl.numel() > 1 else float(kl[0]),
        "top1_agreement": float((a.argmax(-1) == b.argmax(-1)).double().mean()),
        "same_top_p": float((_nucleus(la.exp(), top_p) == _nucleus(lb.exp(), top_p))
                            .all(-1).double().mean()),
    }
    return out


def _sync(built: BuiltModel) -> None:
    if built.device.type == "cuda":
        torch.cuda.synchronize()


def _run(built: BuiltModel, inputs: dict[str, Any]) -> Any:
    with torch.no_grad():
        return built.call(inputs)


def step_drift(built: BuiltModel, patch: Patch, mode: str, batch: int, seq: int,
               seed: int = 0, top_p: float = 0.9) -> dict[str, float]:
    """Original then patched on the same inputs of one step (a decode step gets the same
    prefill cache, rebuilt for each)."""
    patch.enabled = False
    ref, is_logits = _logits(_run(built, _inputs(built, patch, mode, batch, seq, seed)))
    patch.enabled = True
    new, _ = _logits(_run(built, _inputs(built, patch, mode, batch, seq, seed)))
    return drift(ref, new, is_logits, top_p)


def perplexity(built: BuiltModel, tokens: torch.Tensor, seq: int, batch: int = 8) -> float:
    """exp(mean next-token loss) over ``tokens`` cut into rows of ``seq`` + 1."""
    n = (tokens.numel() - 1) // seq
    if n < 1:
        raise ValueError(f"perplexity needs more than {seq} tokens; got {tokens.numel()}")
    total, count = 0.0, 0
    rows = torch.stack([tokens[i * seq:(i + 1) * seq + 1] for i in range(n)])
    for i in range(0, n, batch):
        chunk = rows[i:i + batch].to(built.device)
        with torch.no_grad():
            logits = built.model(input_ids=chunk[:, :-1]).logits.double()
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                              reduction="sum")
        total, count = total + float(nll), count + chunk[:, 1:].numel()
    return math.exp(total / count)


def greedy(built: BuiltModel, prompt: torch.Tensor, steps: int) -> list[list[int]]:
    """``steps`` greedy tokens after ``prompt`` [batch, len], through the model's cache."""
    import inspect

    key = "cache" if "cache" in inspect.signature(built.model.forward).parameters \
        else "past_key_values"
    with torch.no_grad():
        out = built.model(input_ids=prompt, use_cache=True)
        toks = [out.logits[:, -1].argmax(-1)]
        cache = getattr(out, "past_key_values", None) or getattr(out, "cache", None)
        for _ in range(steps - 1):
            out = built.model(input_ids=toks[-1][:, None], use_cache=True, **{key: cache})
            cache = getattr(out, "past_key_values", None) or getattr(out, "cache", None)
            toks.append(out.logits[:, -1].argmax(-1))
    return torch.stack(toks, 1).tolist()


def generation(built: BuiltModel, patch: Patch, batch: int, seq: int, steps: int,
               seed: int = 0) -> dict[str, Any]:
    prompt = built.inputs("prefill", batch, seq, seed=seed)["input_ids"]
    patch.enabled = False
    ref = greedy(built, prompt, steps)
    patch.enabled = True
    new = greedy(built, prompt, steps)
    same = [x == y for r, n in zip(ref, new) for x, y in zip(r, n)]
    firsts = [next((i for i, (x, y) in enumerate(zip(r, n)) if x != y), None)
              for r, n in zip(ref, new)]
    parted = [f for f in firsts if f is not None]
    return {"steps": steps, "token_agreement": sum(same) / len(same),
            "first_divergence": min(parted) if parted else None,
            "sequences_identical": sum(f is None for f in firsts), "sequences": len(firsts)}


def latency(built: BuiltModel, patch: Patch, mode: str, batch: int, seq: int,
            rounds: int = 5, reps: int = 3) -> dict[str, Any]:
    """Median wall ms of one step, original and patched interleaved per round."""
    times: dict[str, list[float]] = {"original": [], "patched": []}
    for r in range(rounds + 1):  # round 0 warms both up and is not kept
        for label, on in (("original", False), ("patched", True)) if r % 2 else \
                (("patched", True), ("original", False)):
            for _ in range(reps):
                inputs = _inputs(built, patch, mode, batch, seq, seed=r)
                patch.enabled = on
                _sync(built)
                t0 = time.perf_counter()
                _run(built, inputs)
                _sync(built)
                if r:
                    times[label].append((time.perf_counter() - t0) * 1e3)
    patch.enabled = True
    o, p = statistics.median(times["original"]), statistics.median(times["patched"])
    return {"original_ms": o, "patched_ms": p, "speedup": o / p if p else None,
            "rounds": rounds, "reps": reps}


def validate(built: BuiltModel, patch: Patch, modes: list[str], batch: int, seq: int,
             tokens: torch.Tensor | None = None, gen_steps: int = 0, rounds: int = 5,
             per_module: bool = True, top_p: float = 0.9) -> dict[str, Any]:
    """The report of the module docstring, as plain data."""
    report: dict[str, Any] = {"schema": REPORT_SCHEMA, "model": built.name,
                              "batch": batch, "seq": seq, "drift": {}, "latency": {},
                              "per_module": {}, "refused": dict(patch.refused)}
    patch.reset_stats()
    for mode in modes:
        report["drift"][mode] = step_drift(built, patch, mode, batch, seq, top_p=top_p)
    report["calls"] = patch.stats()
    report["share_patched"] = share_patched(patch, built.device.type)
    if per_module:
        by_problem: dict[str, list[str]] = {}
        for path, d in patch.modules.items():
            by_problem.setdefault(d.kept.problem, []).append(path)
        for problem, paths in by_problem.items():
            kept = patch.modules[paths[0]].kept
            patch.only(paths)
            report["per_module"][problem] = {
                "paths": paths, "lowered_precision": lowered_precision(kept),
                "model_share": kept.extracted.get("shares"),
                "speedup_vs_best": _speedup(kept.record),
                "drift": {m: step_drift(built, patch, m, batch, seq, top_p=top_p)
                          for m in modes}}
        patch.only(None)
    if tokens is not None:
        patch.enabled = False
        base = perplexity(built, tokens, seq)
        patch.enabled = True
        new = perplexity(built, tokens, seq)
        report["perplexity"] = {"original": base, "patched": new, "ratio": new / base}
    if gen_steps and built.causal_lm:
        report["generation"] = generation(built, patch, batch, seq, gen_steps)
    for mode in modes:
        report["latency"][mode] = latency(built, patch, mode, batch, seq, rounds=rounds)
        if built.device.type == "cuda":
            report["latency"][mode]["graphed"] = graphed_latency(built, patch, mode, batch,
                                                                 seq, rounds=rounds)
    report["module_costs"] = module_costs(patch)
    patch.enabled = True
    return report


def share_patched(patch: Patch, device_type: str) -> dict[str, float]:
    """Per extracted step, the share of the model's time (as ``extract`` profiled it) that
    the patched modules' problems took; a problem inside another patched one (a Linear in
    a patched MLP) is not counted twice."""
    problems = {d.kept.problem: d.kept for d in patch.modules.values()}
    paths = {p for k in problems.values() for p in k.extracted.get("module_paths", [])}
    out: dict[str, float] = {}
    for k in problems.values():
        if any(any(p.startswith(q + ".") for q in paths)
               for p in k.extracted.get("module_paths", [])):
            continue
        for step, share in (k.extracted.get("shares") or {}).items():
            out[step] = out.get(step, 0.0) + share
    return out


def _speedup(record: dict[str, Any]) -> float | None:
    from solforge.records import speedup_vs_best

    return speedup_vs_best(record)


def read_tokens(path: Any, vocab: int | None) -> torch.Tensor:
    """Token ids from a text file: whitespace-separated integers, or else its UTF-8 bytes
    (for a model with a byte vocabulary, ``vocab`` >= 256)."""
    from pathlib import Path

    text = Path(path).read_text()
    words = text.split()
    if words and all(w.isdigit() for w in words):
        ids = torch.tensor([int(w) for w in words])
    else:
        if vocab is not None and vocab < 256:
            raise ValueError(f"{path}: text read as UTF-8 bytes needs a vocabulary of 256 "
                             f"or more; this model's is {vocab}: give token ids instead")
        ids = torch.tensor(list(text.encode()), dtype=torch.long)
    if vocab is not None and int(ids.max()) >= vocab:
        raise ValueError(f"{path}: token id {int(ids.max())} is outside the model's "
                         f"vocabulary of {vocab}")
    return ids


def check(report: dict[str, Any], max_kl: float | None = None, min_top1: float | None = None,
          max_ppl_ratio: float | None = None) -> list[str]:
    """The thresholds a report breaks, each as a sentence (empty: it passes)."""
    bad = []
    for mode, d in report["drift"].items():
        if max_kl is not None and d.get("kl_mean") is not None and d["kl_mean"] > max_kl:
            bad.append(f"{mode}: KL mean {d['kl_mean']:.3g} > --max-kl {max_kl:g}")
        if min_top1 is not None and d.get("top1_agreement") is not None \
                and d["top1_agreement"] < min_top1:
            bad.append(f"{mode}: top-1 agreement {d['top1_agreement']:.4f} < --min-top1 "
                       f"{min_top1:g}")
    ppl = report.get("perplexity")
    if max_ppl_ratio is not None and ppl and ppl["ratio"] > max_ppl_ratio:
        bad.append(f"perplexity ratio {ppl['ratio']:.4f} > --max-ppl-ratio {max_ppl_ratio:g}")
    return bad
