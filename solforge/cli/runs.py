"""`solforge runs show RUN` and `solforge export RUN --out OUT`: read a run back."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from solforge.bench.judge.build import judge_build
from solforge.cli.console import fmt, make_console
from solforge.orchestrate.run import Run

console = make_console()
runs_app = typer.Typer(help="Read runs.", no_args_is_help=True)


def summary_line(run: Run) -> str:
    s = run.summary()
    if s is None:
        return ""
    return (f"{s['passed']}/{s['problems']} passed; geomean speedup vs best baseline "
            f"{fmt(s['geomean_speedup_vs_best'], 'x')} (vs eager "
            f"{fmt(s['geomean_speedup_vs_eager'], 'x')}, vs torch.compile "
            f"{fmt(s['geomean_speedup_vs_compile'], 'x')}); SOL score median "
            f"{fmt(s['sol_score_median'], digits=2)}"
            + (f"; cut short by the run's budget (resume to go on): {', '.join(s['cut_short'])}"
               if s.get("cut_short") else "")
            + (f"; not reached before the run's budget ended (resume to go on): "
               f"{_names(s['not_reached'])}" if s.get("not_reached") else "")
            + _builds(s.get("judge_builds") or {}))


def _builds(builds: dict[str, int]) -> str:
    """A note when some verdicts came from another judge code than this solforge's
    (``judge/build.py``; 'unknown': a record from before records named their judge)."""
    older = sum(builds.values()) - builds.get(judge_build(), 0)
    if not older:
        return ""
    return (f"; {older} verdict(s) from an older solforge judge "
            f"(reopen those problems to judge them again)")


def _names(names: list[str], shown: int = 8) -> str:
    """Up to ``shown`` names, then how many more."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _open(directory: Path) -> Run:
    try:
        return Run.open(directory)
    except FileNotFoundError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None


@runs_app.command("show")
def show(directory: Path = typer.Argument(..., help="a run directory"),
         as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Status, evaluations, and per problem the attempts and the best verdict."""
    run = _open(directory)
    data = run.show()
    data["summary"] = run.summary()
    if as_json:
        typer.echo(json.dumps(data, indent=1))
        return
    t = Table(title=f"{run.dir}: {data['status']} ({data['agent']}), "
                    f"{data['evaluations']} evaluations")
    for col in ("problem", "state", "attempts", "best status", "vs eager", "vs compile",
                "SOL score"):
        t.add_column(col, justify="left" if col in ("problem", "state", "best status")
                     else "right")
    for p in data["problems"]:
        b = p["best"] or {}
        t.add_row(p["name"], p["state"], str(p["attempts"]), b.get("status", "-"),
                  fmt(b.get("speedup_vs_eager"), "x"), fmt(b.get("speedup_vs_compile"), "x"),
                  fmt(b.get("sol_score"), digits=2))
    console.print(t)
    u = data["usage"]
    console.print(f"tokens {u['input_tokens'] + u['output_tokens']}, cost ${u['cost_usd']:.4f}")
    console.print(summary_line(run))


def register(app: typer.Typer) -> None:
    app.add_typer(runs_app, name="runs")

    @app.command("export")
    def export(directory: Path = typer.Argument(..., help="a run directory"),
               out: Path = typer.Option(..., "--out", help="where to write"),
               fmt: str = typer.Option("solforge", "--format", help="solforge, or flashinfer "
                                       "(also traces.jsonl and a solution.json per "
                                       "solution)")) -> None:
        """Write each problem's best solution (KernelBench format), its record, its
        reference and the run's summary to OUT."""
        if fmt not in ("solforge", "flashinfer"):
            raise typer.BadParameter("--format is 'solforge' or 'flashinfer'")
        run = _open(directory)
        if fmt == "flashinfer":
            from solforge.orchestrate.exchange import export_flashinfer

            result = export_flashinfer(run, out)
            console.print(f"wrote {result['traces']} FlashInfer-Trace record(s) to "
                          f"{out / 'traces.jsonl'}")
        else:
            result = run.export(out)
        console.print(f"exported {len(result['exported'])} solution(s) to {out}: "
                      f"{', '.join(result['exported']) or 'none passed'}")
        console.print(summary_line(run))
