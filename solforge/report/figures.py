"""The report's plots, as plotly figures built from a :class:`~solforge.report.view.RunView`:
the roofline, speedups per problem, best so far over time, gain per lever, agent usage.

Every function returns a ``plotly.graph_objects.Figure`` (``page.py`` embeds its JSON);
none reads a file or the ledger. The roofline's x axis is arithmetic intensity (FLOP per
byte of necessary DRAM traffic, as ``sol/work.py`` counts them), its y axis the achieved
rate (counted FLOPs over the measured kernel time), one point per timed workload of each
kept kernel; each unit of the device profile is one roof, min(intensity x bandwidth, peak).

Not covered: workloads with no counted FLOPs or bytes (not placeable on a log-log roofline;
``roofline`` says how many were left out in its title), per-kernel rooflines (the points
are whole calls, every kernel of a call together).
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from solforge.report.view import RunView

FONT = dict(family="system-ui, -apple-system, Segoe UI, sans-serif", size=12)
_UNIT_COLORS = {"fp32": "#6b7280", "tf32": "#2563eb", "bf16": "#059669", "fp16": "#10b981",
                "fp8": "#d97706", "int8": "#b45309", "fp4": "#dc2626"}


def _layout(fig: go.Figure, title: str, height: int = 420) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.01), font=FONT, height=height,
                      margin=dict(l=60, r=20, t=50, b=50), template="plotly_white",
                      legend=dict(orientation="h", y=-0.15))
    return fig


def roofline_points(view: RunView) -> tuple[list[dict[str, Any]], int]:
    """The placeable workloads of the kept kernels, and how many timed ones were not."""
    points, skipped = [], 0
    for p in view.problems:
        if not (p.kept and p.record):
            continue
        for w in p.record.workloads:
            if not w.time_ms:
                continue
            if not (w.flops and w.bytes and w.flops > 0 and w.bytes > 0):
                skipped += 1
                continue
            points.append({"problem": p.name, "workload": w.name,
                           "intensity": w.flops / w.bytes,
                           "tflops": w.flops / (w.time_ms * 1e-3) / 1e12,
                           "time_ms": w.time_ms, "sol_score": w.sol_score,
                           "bound": w.bound or "", "unit": w.sol_unit or "fp32"})
    return points, skipped


def roofline(view: RunView) -> go.Figure:
    points, skipped = roofline_points(view)
    fig = go.Figure()
    prof = view.profile
    xs = [pt["intensity"] for pt in points] or [1.0]
    lo, hi = min(xs) / 4, max(xs) * 4
    if prof is not None:
        bw_tb = prof.bandwidth_gbs / 1000.0  # TB/s: intensity x this is TFLOP/s
        knees = [peak / bw_tb for peak in prof.peaks_tflops.values() if peak > 0]
        lo, hi = min([lo, *[k / 8 for k in knees]]), max([hi, *[k * 8 for k in knees]])
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        for unit, peak in sorted(prof.peaks_tflops.items(), key=lambda kv: kv[1]):
            if peak <= 0:
                continue
            fig.add_trace(go.Scatter(
                x=grid, y=[min(x * bw_tb, peak) for x in grid], mode="lines",
                name=f"{unit} roof {peak:.0f} TFLOP/s", hoverinfo="name",
                line=dict(width=1.5, color=_UNIT_COLORS.get(unit, "#9ca3af"))))
    known = [pt for pt in points if pt["sol_score"] is not None]
    unknown = [pt for pt in points if pt["sol_score"] is None]
    hover = ("%{customdata[0]} / %{customdata[1]}<br>%{x:.3g} FLOP/B, %{y:.3g} TFLOP/s<br>"
             "%{customdata[2]:.4g} ms, %{customdata[3]}-bound (%{customdata[4]}), SOL "
             "%{customdata[5]}<extra></extra>")
    for group, label in ((known, "kept kernels (per workload)"),
                         (unknown, "kept kernels, SOL unknown")):
        if not group:
            continue
        marker: dict[str, Any] = dict(size=9, line=dict(width=0.5, color="#111"))
        if group is known:
            marker.update(color=[pt["sol_score"] for pt in group], colorscale="Viridis",
                          cmin=0, cmax=1, showscale=True, colorbar=dict(title="SOL", len=0.6))
        else:
            marker.update(color="#9ca3af")
        fig.add_trace(go.Scatter(
            x=[pt["intensity"] for pt in group], y=[pt["tflops"] for pt in group],
            mode="markers", name=label, marker=marker, hovertemplate=hover,
            customdata=[[pt["problem"], pt["workload"], pt["time_ms"], pt["bound"] or "?",
                         pt["unit"], "-" if pt["sol_score"] is None else
                         f"{pt['sol_score']:.2f}"] for pt in group]))
    note = f"; {skipped} timed workload(s) with no counted FLOPs or bytes left out" \
        if skipped else ""
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP / byte)",
                     range=[math.log10(lo), math.log10(hi)])
    fig.update_yaxes(type="log", title="achieved (TFLOP/s)")
    return _layout(fig, f"Roofline: {len(points)} workload(s) of the kept kernels{note}",
                   height=520)


def speedups(view: RunView) -> go.Figure:
    """Per problem, its kept kernel's geomean speedup against eager, torch.compile and the
    better of the two (a failed problem shows no bar)."""
    rows = sorted((p for p in view.problems), key=lambda p: (p.speedup_vs_best or 0.0))
    names = [p.name for p in rows]
    fig = go.Figure()
    for label, get, color in (
            ("vs eager", lambda p: p.record.speedup_vs_eager, "#93c5fd"),
            ("vs torch.compile", lambda p: p.record.speedup_vs_compile, "#fcd34d"),
            ("vs best baseline", lambda p: p.speedup_vs_best, "#16a34a")):
        vals = [get(p) if p.kept and p.record else None for p in rows]
        fig.add_trace(go.Bar(y=names, x=vals, name=label, orientation="h",
                             marker_color=color,
                             hovertemplate="%{y}: %{x:.3g}x " + label + "<extra></extra>"))
    fig.add_vline(x=1.0, line_dash="dot", line_color="#111")
    fig.update_xaxes(type="log", title="speedup (x, log)")
    fig.update_yaxes(automargin=True)
    return _layout(fig.update_layout(barmode="group"), "Speedup per problem (kept kernel)",
                   height=max(360, 60 + 30 * len(rows)))


def best_so_far(view: RunView) -> go.Figure:
    t = view.timeline
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=[0.0, *[p["minutes"] for p in t]], y=[1.0, *[p["geomean_speedup_vs_best"] for p in t]],
        mode="lines+markers", line_shape="hv", name="suite geomean vs best baseline",
        customdata=[["start"], *[[p["problem"]] for p in t]],
        hovertemplate="%{x:.1f} min: %{y:.3f}x (%{customdata[0]})<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[0.0, *[p["minutes"] for p in t]], y=[0, *[p["passed"] for p in t]], yaxis="y2",
        mode="lines", line_shape="hv", line=dict(dash="dot", color="#6b7280"),
        name="problems with a passing kernel"))
    fig.update_layout(xaxis=dict(title="minutes since the run began"),
                      yaxis=dict(title="geomean speedup vs best (x)"),
                      yaxis2=dict(title="problems", overlaying="y", side="right",
                                  rangemode="tozero"))
    title = "Best so far" if t else "Best so far: no passing verdict yet"
    return _layout(fig, title)


def levers(view: RunView) -> go.Figure:
    gains = view.summary.get("levers") or {}
    items = sorted(gains.items(), key=lambda kv: kv[1].get("geomean_speedup_vs_best") or 0.0)
    fig = go.Figure(go.Bar(
        y=[k for k, _ in items], x=[v.get("geomean_speedup_vs_best") for _, v in items],
        orientation="h", marker_color="#7c3aed",
        text=[f"{v.get('problems', 0)} problem(s)" for _, v in items], textposition="auto",
        hovertemplate="%{y}: %{x:.3g}x over %{text}<extra></extra>"))
    fig.add_vline(x=1.0, line_dash="dot", line_color="#111")
    fig.update_xaxes(type="log", title="geomean speedup vs best baseline of the problems "
                     "whose kept kernel uses the lever (x, log)")
    fig.update_yaxes(automargin=True)
    title = "Gain per lever" if items else "Gain per lever: no levers recorded"
    return _layout(fig, title, height=max(300, 80 + 32 * len(items)))


def usage(view: RunView) -> go.Figure:
    """Per worker: attempts and seconds spent in work units; per model: tokens."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "per worker: attempts and unit seconds", "per model: tokens"),
        specs=[[{"secondary_y": True}, {}]])
    ws = view.workers
    names = [w["worker"] for w in ws]
    fig.add_trace(go.Bar(x=names, y=[w["attempts"] for w in ws], name="attempts",
                         marker_color="#2563eb", offsetgroup=0), row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[w["unit_seconds"] for w in ws], name="unit seconds",
                         marker_color="#f59e0b", offsetgroup=1), row=1, col=1,
                  secondary_y=True)
    models: dict[str, list[int]] = {}
    for u in view.usage:
        acc = models.setdefault(u["model"] or "-", [0, 0])
        acc[0] += int(u["input_tokens"] or 0)
        acc[1] += int(u["output_tokens"] or 0)
    fig.add_trace(go.Bar(x=list(models), y=[v[0] for v in models.values()],
                         name="input tokens", marker_color="#10b981"), row=1, col=2)
    fig.add_trace(go.Bar(x=list(models), y=[v[1] for v in models.values()],
                         name="output tokens", marker_color="#059669"), row=1, col=2)
    fig.update_layout(barmode="group")
    cost = sum(float(u["cost_usd"] or 0.0) for u in view.usage)
    tokens = sum(v[0] + v[1] for v in models.values())
    title = (f"Agents and tokens: {sum(w['attempts'] for w in ws)} attempts by "
             f"{len(ws)} worker(s); {tokens} tokens, ${cost:.4f}" if ws or models
             else "Agents and tokens: none recorded")
    if not models:
        fig.add_annotation(text="no model calls in this run", showarrow=False,
                           xref="x2 domain", yref="y3 domain", x=0.5, y=0.5)
    return _layout(fig, title)


# the summary page's plots: element id -> figure, in page order
_PLOTS = {"plot-roofline": roofline, "plot-speedups": speedups,
          "plot-best-so-far": best_so_far, "plot-levers": levers, "plot-usage": usage}
PLOT_IDS = tuple(_PLOTS)


def all_figures(view: RunView) -> dict[str, go.Figure]:
    """The summary page's plots by element id (:data:`PLOT_IDS`), in page order."""
    return {k: make(view) for k, make in _PLOTS.items()}
