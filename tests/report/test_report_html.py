"""`solforge report` on a real recorded H200 run (session 10's whole-corpus run of the search
agent, 53 problems, its calibrated ceilings) renders in headless Chromium with no console
error and every plot drawn; the screenshots are kept under docs/screenshots/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.report.browser import chromium_page, screenshot

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "2026-12-02-h200-s10"
PLOTS = ["plot-roofline", "plot-speedups", "plot-best-so-far", "plot-levers", "plot-usage"]


def test_report_of_a_recorded_h200_run_renders_every_plot(tmp_path):
    out = tmp_path / "report.html"
    r = subprocess.run([sys.executable, "-m", "solforge.cli.main", "report",
                        str(RESULTS / "optimize_run-call6.tgz"), "--out", str(out),
                        "--profile", str(RESULTS / "calibration-call6.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "53 problem(s), 292 evaluation(s)" in " ".join(r.stdout.split())
    text = out.read_text()
    # self-contained: no script or stylesheet is fetched from anywhere
    assert "<script src=" not in text and "<link" not in text
    with chromium_page() as (page, errors):
        page.goto(out.as_uri())
        for pid in PLOTS:
            page.wait_for_selector(f"#{pid} .main-svg", timeout=60_000)
        # the roofline: one roof per calibrated unit (fp32 tf32 bf16 fp16 fp8) and the points
        traces = page.evaluate("document.getElementById('plot-roofline').data.map("
                               "t => [t.name, t.x.length])")
        roofs = [name for name, _ in traces if "roof" in name]
        assert len(roofs) == 5, traces
        points = [n for name, n in traces if name.startswith("kept kernels")]
        assert points and points[0] > 100, traces
        bars = page.evaluate("document.getElementById('plot-speedups').data[2].y.length")
        assert bars == 53
        assert page.locator("#summary-cards .card").count() == 6
        assert "1.44x" in page.inner_text("#summary-cards")
        screenshot(page, "report-summary.png")

        page.goto(out.as_uri() + "#p-rmsnorm_llama3")
        section = page.locator("#p-rmsnorm_llama3")
        section.locator("table.diff").wait_for(state="visible")
        assert page.locator("#summary").is_hidden()
        assert section.locator("table.workloads tr").count() == 1 + 6  # header + workloads
        assert section.locator("table.numerics tr").count() >= 7
        assert "compile" in section.locator("p.levers").inner_text()
        assert section.locator("pre.reason").inner_text().strip()
        screenshot(page, "report-problem.png")
    assert errors == []


def test_a_run_cut_by_its_budget_lists_the_problems_it_did_not_reach(tmp_path):
    """Session 23's corpus call on an H100 (170 problems): its budget ended after 24
    surveys, one problem got a verdict, four floor units were killed with the call. The
    summary counts the one verdict; the 169 others are listed as not reached, not counted
    as passed on their survey's figure (its CLI line once read "24/170 passed, 0.92x")."""
    import re

    from solforge.orchestrate.run import Run

    tgz = ROOT / "benchmarks" / "results" / "2026-12-06-h100-s23" / "corpus_call3" / \
        "optimize_run.tgz"
    out = tmp_path / "report.html"
    r = subprocess.run([sys.executable, "-m", "solforge.cli.main", "report", str(tgz),
                        "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    text = re.sub(r"<[^>]+>", " ", out.read_text())
    assert "Not reached before the run's budget ended (169, not counted above" in text
    assert "100% (1/1)" in text
    import tarfile

    with tarfile.open(tgz) as t:
        t.extractall(tmp_path, filter="data")
    s = Run.open(tmp_path / "optrun").summary()
    assert s["problems"] == 1 and s["passed"] == 1 and len(s["not_reached"]) == 169
    assert "alibi_attention_bloom" not in s["not_reached"]  # judged by its floor unit
