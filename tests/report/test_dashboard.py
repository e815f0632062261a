"""`solforge dashboard` serves a CPU run live while `solforge optimize` writes it: the page in
headless Chromium shows the run's progress change, no write reaches the ledger through it,
and it listens on loopback only by default."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from tests.conftest import PROBLEMS
from tests.report.browser import chromium_page, screenshot


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "solforge.cli.main", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=dict(os.environ, COLUMNS="200"))


def _get(url: str, method: str = "GET") -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _wait_up(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        try:
            if _get(url)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer")


def test_dashboard_shows_a_cpu_run_progress_live(tmp_path):
    run_dir = tmp_path / "run"
    run = _cli("optimize", str(PROBLEMS / "kb_relu.py"), "--run-dir", str(run_dir),
               "--families", "reference", "--max-candidates", "1", "--baselines", "eager",
               "--timeout", "120", "--explore-max-calls", "12", "--budget-ms", "40")
    dash = None
    try:
        deadline = time.time() + 60
        while not (run_dir / "ledger.sqlite").exists():
            assert time.time() < deadline and run.poll() is None, run.stdout.read()
            time.sleep(0.05)
        port = _free_port()
        dash = _cli("dashboard", str(run_dir), "--port", str(port), "--poll-s", "0.3")
        base = f"http://127.0.0.1:{port}"
        _wait_up(base + "/api/progress", dash)
        first = json.loads(_get(base + "/api/progress")[1])
        assert first["problems"] == 1 and first["status"] == "running"
        with chromium_page() as (page, errors):
            page.goto(base + "/")
            page.wait_for_selector("#plot-roofline .main-svg", timeout=60_000)
            page.wait_for_function("document.getElementById('live-status').textContent"
                                   ".includes('evaluations')", timeout=30_000)
            seen = {page.inner_text("#live-status").split(";")[0]}
            cards = {page.inner_text("#summary-cards")}
            while run.poll() is None:
                seen.add(page.inner_text("#live-status").split(";")[0])
                time.sleep(0.2)
            assert run.returncode == 0, run.stdout.read()
            # the page swaps itself once the finished run's last write is seen
            page.wait_for_function("document.getElementById('live-status').textContent"
                                   ".startsWith('live: finished')", timeout=30_000)
            page.wait_for_selector("#problems-table .badge.ok", timeout=30_000)
            seen.add(page.inner_text("#live-status").split(";")[0])
            cards.add(page.inner_text("#summary-cards"))
            # the swapped page's own header says so too
            assert page.inner_text("#run-meta").startswith("finished")
            page.wait_for_selector("#plot-speedups .main-svg")
            screenshot(page, "dashboard.png")
            # the problem's page: its errors per input distribution (a plain KernelBench
            # file: its own draw, 'normal', and 'signed')
            page.goto(base + "/#p-kb_relu")
            numerics = page.locator("#p-kb_relu table.numerics")
            numerics.wait_for(state="visible")
            assert "normal" in numerics.inner_text()
            assert "not recorded" not in numerics.inner_text()
        assert errors == [], errors
        # the page itself changed as the run went: several progress lines, new cards
        assert len(seen) >= 2, seen
        assert len(cards) >= 2, cards
        last = json.loads(_get(base + "/api/progress")[1])
        assert last["status"] == "finished" and last["passed"] == 1
        assert last["evaluations"] > first["evaluations"]
        # read-only: nothing but GET is served
        assert _get(base + "/api/progress", "POST")[0] == 405
        assert _get(base + "/", "DELETE")[0] == 405
        # loopback only by default: the machine's other address (where it has one) refuses
        try:
            outside = [a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None,
                                                           socket.AF_INET)
                       if not a[4][0].startswith("127.")]
        except socket.gaierror:
            outside = []
        for addr in outside[:1]:
            with socket.socket() as s:
                s.settimeout(2)
                assert s.connect_ex((addr, port)) != 0
    finally:
        for p in (run, dash):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, 15)
                p.wait(timeout=30)
        if dash is not None:
            # uvicorn's log: a request that failed on the server shows up here
            print(dash.stdout.read())
