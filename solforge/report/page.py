"""The report as one HTML document: the summary page (figures, levers, problems) and one
page per problem (the kept kernel beside its reference as a side-by-side diff, its record
per workload, its numerics, its levers and stated reasoning), switched by the URL's
``#fragment`` so that the file works from disk with no server.

``render(view)`` inlines plotly.js and every figure's data: the file needs no network to
be read. ``render(view, live=True)`` is the dashboard's page: plotly.js from the server's
``/plotly.js`` and a poll of ``/api/progress`` that swaps in the fresh page when the
ledger grew.

Not covered: printing (the problem pages are hidden but for the one shown), very large
sources (a diff of two files of thousands of lines is slow to view; kernels and
references are a few hundred at most).
"""

from __future__ import annotations

import difflib
import html
import json
import time
from typing import Any

from solforge.records import EvaluationRecord
from solforge.report import figures
from solforge.report.view import ProblemView, RunView

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#111;background:#f8fafc}
header{background:#0f172a;color:#f8fafc;padding:12px 20px}
header h1{font-size:18px;margin:0 0 4px 0} header .meta{font-size:12px;color:#cbd5e1}
#layout{display:flex;min-height:100vh}
nav{width:260px;flex:none;background:#fff;border-right:1px solid #e2e8f0;padding:10px;
    font-size:13px;overflow-y:auto;max-height:100vh;position:sticky;top:0}
nav a{display:block;padding:3px 6px;color:#0f172a;text-decoration:none;border-radius:4px}
nav a:hover{background:#e2e8f0}
main{flex:1;padding:16px 20px;min-width:0}
section.page{display:none} section.page.shown{display:block}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0 16px 0}
.card{background:#fff;border:1px solid #e2e8f0;border-radius:8px;padding:10px 14px;min-width:140px}
.card .v{font-size:22px;font-weight:600} .card .k{font-size:12px;color:#475569}
.plot{background:#fff;border:1px solid #e2e8f0;border-radius:8px;margin:10px 0;padding:4px}
table.t{border-collapse:collapse;background:#fff;font-size:12px;margin:8px 0}
table.t th,table.t td{border:1px solid #e2e8f0;padding:3px 6px;text-align:right}
table.t th{background:#f1f5f9} table.t td.l,table.t th.l{text-align:left}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:11px;color:#fff}
.ok{background:#16a34a} .bad{background:#dc2626} .na{background:#94a3b8}
pre.reason{white-space:pre-wrap;background:#fff;border:1px solid #e2e8f0;padding:8px;font-size:12px}
table.diff{font-family:ui-monospace,Menlo,monospace;font-size:11px;background:#fff;
           border:1px solid #e2e8f0;width:100%}
table.diff td{white-space:pre-wrap;word-break:break-all;vertical-align:top;padding:0 4px}
table.diff td:nth-child(3),table.diff td:nth-child(6){width:50%}
table.diff td.diff_header{color:#94a3b8;width:3em;text-align:right;white-space:nowrap}
table.diff td.diff_next{display:none} table.diff th.diff_next{display:none}
.diff_add{background:#dcfce7} .diff_chg{background:#fef9c3} .diff_sub{background:#fee2e2}
#live-status{font-size:12px;color:#a7f3d0}
p.caption{font-size:12px;color:#475569;margin:0 0 12px 4px}
"""

# which page the fragment names; plots drawn once their page is shown (a plot drawn in a
# hidden element has no size)
_SCRIPT = """
function figuresData(){return JSON.parse(document.getElementById('figures').textContent);}
function drawPlots(){
  var figs=figuresData();
  for(var id in figs){var el=document.getElementById(id);
    if(el){Plotly.react(el,figs[id].data,figs[id].layout,{responsive:true,displaylogo:false});}}
}
function showPage(){
  var id=(location.hash||'#summary').slice(1);
  var pages=document.querySelectorAll('section.page');
  var found=false;
  pages.forEach(function(p){if(p.id===id){found=true;}});
  if(!found){id='summary';}
  pages.forEach(function(p){p.classList.toggle('shown',p.id===id);});
  if(id==='summary'){drawPlots();}
}
window.addEventListener('hashchange',showPage);
document.addEventListener('DOMContentLoaded',showPage);
"""

_LIVE = """
// the progress this page was drawn from: a run that moved on between the page's load and
// the first poll is swapped in at once rather than on its next change
var lastProgress=null;
document.addEventListener('DOMContentLoaded',function(){
  try{lastProgress=JSON.stringify(JSON.parse(
    document.getElementById('page-progress').textContent));}catch(e){}
});
function poll(){
  fetch('/api/progress',{cache:'no-store'}).then(function(r){return r.json();}).then(function(p){
    var key=JSON.stringify(p);
    // the status line is written after the swap, so it never claims more than the page shows
    function say(){
      document.getElementById('live-status').textContent='live: '+p.status+', '+p.evaluations+
        ' evaluations, '+p.passed+'/'+p.problems+' passed; checked '+
        new Date().toLocaleTimeString();
    }
    if(lastProgress!==null&&key!==lastProgress){
      return fetch('/',{cache:'no-store'}).then(function(r){return r.text();}).then(function(t){
        var doc=new DOMParser().parseFromString(t,'text/html');
        ['layout','run-meta'].forEach(function(id){
          document.getElementById(id).innerHTML=doc.getElementById(id).innerHTML;});
        document.getElementById('figures').textContent=doc.getElementById('figures').textContent;
        lastProgress=key; showPage(); say();
      });
    }
    lastProgress=key; say();
  }).catch(function(e){document.getElementById('live-status').textContent='live: '+e;})
  .finally(function(){setTimeout(poll,POLL_MS);});
}
document.addEventListener('DOMContentLoaded',poll);
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: float | None, suffix: str = "", digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}g}{suffix}"


def _badge(status: str | None) -> str:
    cls = "ok" if status == "PASSED" else ("na" if not status else "bad")
    return f'<span class="badge {cls}">{_e(status or "no verdict")}</span>'


def render(view: RunView, live: bool = False, poll_ms: int = 2000) -> str:
    """The whole document (see the module docstring)."""
    figs = {k: json.loads(f.to_json()) for k, f in figures.all_figures(view).items()}
    if live:
        plotly_tag = '<script src="/plotly.js"></script>'
    else:
        from plotly.offline import get_plotlyjs

        plotly_tag = f"<script>{get_plotlyjs()}</script>"
    script = _SCRIPT + (_LIVE.replace("POLL_MS", str(int(poll_ms))) if live else "")
    live_span = '<span id="live-status">live: connecting</span>' if live else ""
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(view.generated))
    body = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        f"<title>solforge report: {_e(view.title)}</title>",
        f"<style>{_CSS}</style>", plotly_tag, f"<script>{script}</script></head><body>",
        f"<header><h1>solforge: {_e(view.title)}</h1><div class=meta><span id=run-meta>"
        f"{_e(view.status)} · agent {_e(view.agent or '-')} · device {_e(view.device)} · "
        f"{view.evaluations} evaluations · generated {generated}</span> {live_span}</div>"
        "</header>",
        '<div id="layout">', _nav(view), "<main>", _summary(view),
        *(_problem(p) for p in view.problems), "</main></div>",
        # '</' inside the JSON would end the script element early
        '<script type="application/json" id="figures">'
        + json.dumps(figs).replace("</", "<\\/") + "</script>",
        ('<script type="application/json" id="page-progress">'
         + json.dumps(view.progress(), default=str).replace("</", "<\\/") + "</script>"
         if live else ""),
        "</body></html>"]
    return "\n".join(body)


def _nav(view: RunView) -> str:
    items = ['<a href="#summary"><b>Summary</b></a>']
    for p in view.problems:
        status = p.record.status.value if p.record else None
        items.append(f'<a href="#{p.anchor}">{_badge("PASSED" if p.kept else status)} '
                     f'{_e(p.name)} <small>{_num(p.speedup_vs_best, "x")}</small></a>')
    return '<nav id="problems-nav">' + "".join(items) + "</nav>"


def _summary(view: RunView) -> str:
    s = view.summary
    pass_rate = s.get("pass_rate")
    cards = [("geomean vs eager", _num(s.get("geomean_speedup_vs_eager"), "x")),
             ("geomean vs torch.compile", _num(s.get("geomean_speedup_vs_compile"), "x")),
             ("geomean vs best baseline", _num(s.get("geomean_speedup_vs_best"), "x")),
             ("SOL score median", _num(s.get("sol_score_median"), digits=2)),
             ("pass rate", "-" if pass_rate is None else
              f"{pass_rate:.0%} ({s.get('passed')}/{s.get('problems')})"),
             ("evaluations", str(view.evaluations))]
    out = ['<section class="page" id="summary"><h2>Summary</h2><div class="cards" '
           'id="summary-cards">']
    out += [f'<div class="card"><div class="v">{_e(v)}</div><div class="k">{_e(k)}</div>'
            "</div>" for k, v in cards]
    out.append("</div>")
    out.append('<p style="font-size:12px;color:#475569">A failed problem counts 1.0x in the '
               "geomeans (solforge.summary/1); speedups are device kernel time against the "
               "eager and torch.compile runs of the reference measured in the same "
               "evaluation.</p>")
    left = s.get("not_reached") or []
    if left:
        shown = ", ".join(left[:20]) + (f" and {len(left) - 20} more" if len(left) > 20 else "")
        out.append(f'<p id="not-reached" style="font-size:12px;color:#92400e">Not reached '
                   f"before the run's budget ended ({len(left)}, not counted above; "
                   f"<code>solforge optimize --resume</code> goes on with them): "
                   f"{_e(shown)}</p>")
    for fid in figures.PLOT_IDS:
        out.append(f'<div class="plot" id="{fid}"></div>')
        if fid == "plot-roofline":
            out.append(f'<p class="caption" id="roofline-ceilings">Roofs: '
                       f"{_e(view.profile_note)}. One point per timed workload: counted "
                       "FLOPs over counted bytes, and counted FLOPs over the measured device "
                       "kernel time.</p>")
    out.append(_levers_table(s.get("levers") or {}))
    out.append(_problems_table(view))
    out.append("</section>")
    return "\n".join(out)


def _levers_table(levers: dict[str, dict[str, Any]]) -> str:
    rows = "".join(f'<tr><td class=l>{_e(k)}</td><td>{v.get("problems", 0)}</td>'
                   f'<td>{_num(v.get("geomean_speedup_vs_best"), "x")}</td></tr>'
                   for k, v in sorted(levers.items()))
    return ('<h3>Gain per lever</h3><table class="t" id="levers-table"><tr><th class=l>lever'
            "</th><th>problems</th><th>geomean vs best</th></tr>" + rows + "</table>")


def _problems_table(view: RunView) -> str:
    rows = []
    for p in view.problems:
        r = p.record
        rows.append(
            f'<tr><td class=l><a href="#{p.anchor}">{_e(p.name)}</a></td>'
            f"<td class=l>{_e(p.state)}</td><td class=l>{_badge(r.status.value if r else None)}"
            f"</td><td>{p.attempts}</td>"
            f"<td>{_num(r.speedup_vs_eager if r and p.kept else None, 'x')}</td>"
            f"<td>{_num(r.speedup_vs_compile if r and p.kept else None, 'x')}</td>"
            f"<td>{_num(p.speedup_vs_best, 'x')}</td>"
            f"<td>{_num(r.sol_score if r and p.kept else None, digits=2)}</td></tr>")
    return ('<h3>Problems</h3><table class="t" id="problems-table"><tr><th class=l>problem</th>'
            "<th class=l>state</th><th class=l>verdict</th><th>attempts</th><th>vs eager</th>"
            "<th>vs compile</th><th>vs best</th><th>SOL</th></tr>" + "".join(rows)
            + "</table>")


def _problem(p: ProblemView) -> str:
    r, a = p.record, p.attempt or {}
    out = [f'<section class="page problem" id="{p.anchor}"><h2>{_e(p.name)} '
           f'{_badge(r.status.value if r else None)}</h2>']
    if r is None:
        out.append("<p>No evaluation of this problem in the run yet.</p></section>")
        return "".join(out)
    verdict = {"final": "re-measured final verdict", "full": "verdict on all workloads",
               "visible": "an agent's check on the visible workloads (no verdict yet)",
               "export": "exported record"}.get(p.kind, p.kind)
    levers = a.get("levers") or []
    out.append(
        '<div class="cards">'
        + "".join(f'<div class="card"><div class="v">{_e(v)}</div><div class="k">{_e(k)}'
                  "</div></div>" for k, v in (
                      ("vs eager", _num(r.speedup_vs_eager, "x")),
                      ("vs torch.compile", _num(r.speedup_vs_compile, "x")),
                      ("vs best baseline", _num(p.speedup_vs_best, "x")),
                      ("SOL score", _num(r.sol_score, digits=2)),
                      ("language", r.language)))
        + "</div>")
    out.append(f"<p>Shown: the {_e(verdict)}; attempt {_e(a.get('id', '-'))} by "
               f"{_e(a.get('agent') or '-')} ({_e(a.get('role') or '-')}, worker "
               f"{_e(a.get('worker') or '-')}); {p.attempts} attempt(s) in all; device "
               f"{_e(r.device)}; policy {_e(r.policy)}.</p>")
    if r.message:
        out.append(f"<p><b>Message:</b> {_e(r.message)}</p>")
    if r.flags:
        out.append(f"<p><b>Flags:</b> {_e(', '.join(r.flags))}</p>")
    out.append("<h3>Levers and reasoning</h3>")
    out.append(f"<p class=levers><b>Levers:</b> {_e(', '.join(levers) or 'none recorded')}</p>")
    out.append(f'<pre class="reason">{_e(a.get("reasoning") or "no reasoning recorded")}</pre>')
    out.append(_workloads(r))
    out.append(_numerics(r))
    out.append(_diff(p))
    out.append("</section>")
    return "\n".join(out)


def _workloads(r: EvaluationRecord) -> str:
    head = ("workload", "visible", "params", "status", "time ms", "eager ms", "compile ms",
            "vs eager", "vs compile", "spread", "rounds", "SOL ms", "SOL", "bound", "unit")
    rows = []
    for w in r.workloads:
        rows.append("<tr>" + "".join([
            f"<td class=l>{_e(w.name)}</td><td>{'yes' if w.visible else 'held out'}</td>",
            f"<td class=l>{_e(json.dumps(w.params))[:120]}</td>",
            f"<td class=l>{_badge(w.status.value if w.status else None)}</td>",
            f"<td>{_num(w.time_ms, digits=4)}</td><td>{_num(w.eager_ms, digits=4)}</td>",
            f"<td>{_num(w.compile_ms, digits=4)}</td>",
            f"<td>{_num(w.speedup_vs_eager, 'x')}</td>",
            f"<td>{_num(w.speedup_vs_compile, 'x')}</td>",
            f"<td>{_num(w.time_spread, digits=2)}</td><td>{len(w.round_ms) or '-'}</td>",
            f"<td>{_num(w.sol_ms, digits=3)}</td><td>{_num(w.sol_score, digits=2)}</td>",
            f"<td class=l>{_e(w.bound or '-')}</td><td class=l>{_e(w.sol_unit or '-')}</td>",
        ]) + "</tr>")
    return ('<h3>Record per workload</h3><table class="t workloads"><tr>'
            + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>")


def _numerics(r: EvaluationRecord) -> str:
    head = ("workload", "distribution", "trials", "max abs error", "max rel error",
            "mismatch ratio", "vs float64 golden", "reference vs golden")
    rows = []
    for w in r.workloads:
        per = w.error_by_distribution or {"all (not recorded per distribution)":
                                           [w.max_abs_error, w.max_rel_error]}
        for dist, (abs_err, rel_err) in per.items():
            rows.append(
                f"<tr><td class=l>{_e(w.name)}</td><td class=l>{_e(dist)}</td>"
                f"<td>{w.trials}</td><td>{_num(abs_err)}</td><td>{_num(rel_err)}</td>"
                f"<td>{_num(w.mismatch_ratio)}</td><td>{_num(w.golden_max_abs_error)}</td>"
                f"<td>{_num(w.reference_golden_max_abs_error)}</td></tr>")
    return ('<h3>Numerics</h3><table class="t numerics"><tr>'
            + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>")


def _diff(p: ProblemView) -> str:
    kernel = (p.attempt or {}).get("source") or ""
    if not kernel:
        return "<h3>Kernel and reference</h3><p>No source recorded.</p>"
    ref = p.reference_source or "(reference source not found on this machine)\n"
    table = difflib.HtmlDiff(tabsize=4).make_table(
        ref.splitlines(), kernel.splitlines(), "reference", "kept kernel")
    return (f'<h3>Kernel and reference</h3><p style="font-size:12px">reference: '
            f"{_e(p.reference_from or 'not found')}</p>"
            f'<div class="diff-wrap">{table}</div>')
