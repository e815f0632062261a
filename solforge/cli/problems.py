"""`solforge problems list|show`: browse the built-in corpus (and plug-in corpora)."""

from __future__ import annotations

import json

import typer
from solforge.cli.console import make_console
from rich.syntax import Syntax
from rich.table import Table

from solforge.problems import ProblemError, builtin_problems, resolve_target

app = typer.Typer(help="List and inspect problems.", no_args_is_help=True)
console = make_console()


@app.command("list")
def list_problems(
    category: str = typer.Option(None, "--category", "-c", help="L1, L2, quant, attention, ..."),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """List problems with their category, source model and workloads."""
    problems = builtin_problems(category)
    if as_json:
        typer.echo(json.dumps([p.summary() for p in problems], indent=2))
        return
    table = Table(title=f"{len(problems)} problems")
    for col in ("name", "category", "models", "precision", "workloads (held out)"):
        table.add_column(col)
    for p in problems:
        held = sum(1 for w in p.workloads if not w.visible)
        table.add_row(p.name, p.category, ", ".join(p.models), p.precision.name,
                      f"{len(p.workloads)} ({held})")
    console.print(table)


@app.command("show")
def show(name: str = typer.Argument(..., help="a problem name or a problem file"),
         source: bool = typer.Option(True, "--source/--no-source", help="print the reference")
         ) -> None:
    """Show one problem: metadata, workloads and the reference source."""
    try:
        problems, _ = resolve_target(name)
    except ProblemError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    p = problems[0]
    console.print(f"[bold]{p.name}[/bold]  ({p.category}, {p.precision.name}, from "
                  f"{', '.join(p.models) or 'unknown'})")
    console.print(p.description)
    console.print(f"tolerance: atol={p.precision.atol:g} rtol={p.precision.rtol:g} "
                  f"matched ratio {p.precision.matched_ratio:g}; file: {p.path}")
    t = Table()
    for col in ("workload", "visible", "cpu", "params", "FLOPs", "bytes"):
        t.add_column(col)
    for w in p.workloads:
        f, b = p.declared_flops(w), p.declared_bytes(w)
        t.add_row(w.name, "yes" if w.visible else "held out", "yes" if w.cpu else "",
                  json.dumps(w.params_json()), f"{f:.3g}" if f else "-", f"{b:.3g}" if b else "-")
    console.print(t)
    if source:
        console.print(Syntax(p.path.read_text(), "python", line_numbers=False))
