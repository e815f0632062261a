"""``solforge report RUN`` (one self-contained HTML file) and ``solforge dashboard RUN``
(the same page live on loopback while the run goes).

    solforge report runs/20261201-120000 --out report.html
    solforge report benchmarks/results/2026-12-02-h200-s10/optimize_run-call6.tgz \\
        --profile benchmarks/results/2026-12-02-h200-s10/calibration-call6.json
    solforge dashboard runs/20261201-120000          # http://127.0.0.1:8765/
"""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError
from rich.markup import escape

from solforge.cli.console import make_console
from solforge.orchestrate.locate import Located, LocateError, locate

console = make_console()

_RUN_HELP = ("a run directory, its ledger.sqlite, a .tgz of a run (benchmarks/results/), or "
             "an export (solforge export)")
_PROFILE_HELP = ("device ceilings for the roofline: a `solforge calibrate --json` profile "
                 "(default: this machine's stored calibration of the run's device, else the "
                 "datasheet table)")


def need(*modules: str) -> None:
    """Stop with the install command when the ``report`` extra is missing."""
    import importlib

    for m in modules:
        try:
            importlib.import_module(m)
        except ModuleNotFoundError:
            console.print(f"[red]this command needs {m}: pip install \"solforge[report]\" "
                          "(or pip install -e \".[report]\" in a checkout)[/red]")
            raise typer.Exit(2) from None


def located(run: Path) -> Located:
    """The run/export at ``run``, or exit 2 with what was found instead."""
    try:
        return locate(run)
    except LocateError as e:
        console.print(f"[red]{escape(str(e))}[/red]")
        raise typer.Exit(2) from None


def _check_profile(profile: Path | None) -> None:
    if profile is None:
        return
    from solforge.sol.profile import read_profile

    try:
        read_profile(profile)
    except FileNotFoundError:
        console.print(f"[red]--profile {escape(str(profile))}: no such file[/red]")
        raise typer.Exit(2) from None
    except (ValidationError, ValueError) as e:
        console.print(f"[red]--profile {profile}: not a solforge.device/1 profile "
                      f"({str(e).splitlines()[0]}); write one with `solforge calibrate "
                      "--json FILE`[/red]")
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(run: Path = typer.Argument(..., help=_RUN_HELP),
               out: Path = typer.Option(None, "--out", help="the HTML file (default: "
                                        "report.html in the run directory, or beside the "
                                        "archive or export)"),
               profile: Path = typer.Option(None, "--profile", help=_PROFILE_HELP)) -> None:
        """Write one self-contained HTML file: summary, roofline, speedups, best so far,
        agent and token usage, and a page per problem (kernel beside reference, records,
        numerics, levers, reasoning). It needs no network to be read."""
        _check_profile(profile)
        need("plotly")
        with located(run) as loc:
            from solforge.report import build_view
            from solforge.report.page import render

            view = build_view(loc, profile)
            target = out or _default_out(loc)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(render(view), encoding="utf-8")
        # soft_wrap: a path is not broken across lines
        console.print(f"wrote {target}: {len(view.problems)} problem(s), "
                      f"{view.evaluations} evaluation(s); {view.profile_note}", soft_wrap=True)

    @app.command("dashboard")
    def dashboard(run: Path = typer.Argument(..., help=_RUN_HELP),
                  host: str = typer.Option("127.0.0.1", "--host", help="address to bind "
                                           "(loopback by default; the page shows every "
                                           "source and record of the run)"),
                  port: int = typer.Option(8765, "--port", help="TCP port"),
                  profile: Path = typer.Option(None, "--profile", help=_PROFILE_HELP),
                  poll_s: float = typer.Option(2.0, "--poll-s", min=0.2,
                                               help="how often the page checks the ledger"),
                  ) -> None:
        """Serve the report's views live while a run goes (read-only: GET only, the ledger
        opened read-only), updating as the ledger grows."""
        _check_profile(profile)
        need("plotly", "starlette", "uvicorn")
        with located(run) as loc:
            from solforge.report.dashboard import serve

            console.print(f"dashboard of {run} on http://{host}:{port}/ (Ctrl-C stops it)")
            serve(loc, host=host, port=port, profile=profile, poll_ms=int(poll_s * 1000))


def _default_out(loc: Located) -> Path:
    if loc.run_dir is not None and loc.given.is_dir():
        return loc.run_dir / "report.html"
    if loc.given.is_file() and loc.given.name == "ledger.sqlite":
        return loc.given.parent / "report.html"
    if loc.given.is_dir():
        return loc.given / "report.html"
    return loc.given.with_name(loc.given.name.split(".")[0] + "-report.html")
