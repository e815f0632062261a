"""`solforge problems list|show`: browse the built-in corpus, plug-in corpora, and any
target (files, folders, KernelBench checkouts) before a run."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from solforge.cli.console import broken_line, broken_text, make_console
from solforge.problems import ProblemError, builtin_problems, resolve_target

app = typer.Typer(help="List and inspect problems.", no_args_is_help=True)
console = make_console()


@app.command("list")
def list_problems(
    target: str = typer.Argument(None, help="what to list: a problem file, a directory of "
                                 "them (a KernelBench checkout or level folder), DIR:N-M, a "
                                 "category, a name, or a comma-separated list (default: the "
                                 "built-in corpus and plug-in corpora)"),
    category: str = typer.Option(None, "--category", "-c", help="L1, L2, quant, attention, ..."),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """List problems with their category, source model and workloads, and the files of a
    target that failed to load (on stderr with --json; the exit status stays 0: a run over
    the target goes on without them)."""
    broken: list[tuple[Path, str]] = []
    if target is None:
        problems = builtin_problems(category)
    else:
        try:
            problems, broken = resolve_target(target)
        except ProblemError as e:
            console.print(f"[red]{escape(str(e))}[/red]", soft_wrap=True)
            raise typer.Exit(2) from None
        if category:
            problems = [p for p in problems if p.category.lower() == category.lower()]
    if as_json:
        typer.echo(json.dumps([p.summary() for p in problems], indent=2))
        for path, error in broken:
            typer.echo(broken_text(path, error), err=True)
        return
    families = {p.family for p in problems if p.family}
    title = _count(len(problems), "problem") + (
        f" from {_count(len(families), 'family')}" if families else "") + (
        f", {_count(len(broken), 'file')} failed to load" if broken else "")
    table = Table(title=title)
    for col in ("name", "category", "dir", "source", "license", "family", "models",
                "precision", "workloads (held out)"):
        table.add_column(col)
    for p in problems:
        held = sum(1 for w in p.workloads if not w.visible)
        table.add_row(p.name, p.category, "bwd" if p.direction == "backward" else "fwd",
                      p.source, p.origin.get("license", "-"), p.family or "-",
                      ", ".join(p.models), p.precision.name, f"{len(p.workloads)} ({held})")
    console.print(table)
    console.print(_counts_table(problems))
    for path, error in broken:
        console.print(broken_line(path, error), soft_wrap=True, highlight=False)


def _count(n: int, noun: str) -> str:
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun[:-1] + 'ies' if noun.endswith('y') else noun + 's'}"


def _counts_table(problems: list) -> Table:
    """Problems per category and direction, with a total row."""
    cats = sorted({p.category for p in problems})
    t = Table(title="per category and direction")
    for col in ("category", "forward", "backward", "total"):
        t.add_column(col, justify="left" if col == "category" else "right")
    for c in [*cats, None]:
        ps = [p for p in problems if c is None or p.category == c]
        bwd = sum(1 for p in ps if p.direction == "backward")
        t.add_row(c or "all", str(len(ps) - bwd), str(bwd), str(len(ps)))
    return t


@app.command("show")
def show(name: str = typer.Argument(..., help="a problem name or a problem file"),
         source: bool = typer.Option(True, "--source/--no-source", help="print the reference")
         ) -> None:
    """Show one problem: metadata, workloads and the reference source."""
    try:
        problems, broken = resolve_target(name)
    except ProblemError as e:
        console.print(f"[red]{escape(str(e))}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None
    if not problems:  # a folder whose every file failed to load
        for path, error in broken:
            console.print(broken_line(path, error), soft_wrap=True, highlight=False)
        raise typer.Exit(2)
    p = problems[0]
    console.print(f"[bold]{p.name}[/bold]  ({p.category}, {p.precision.name}, from "
                  f"{', '.join(p.models) or 'unknown'})")
    console.print(p.description)
    console.print(f"tolerance: atol={p.precision.atol:g} rtol={p.precision.rtol:g} "
                  f"matched ratio {p.precision.matched_ratio:g}; file: {p.path}")
    if p.origin:
        console.print("origin: " + ", ".join(f"{k} {v}" for k, v in p.origin.items()),
                      soft_wrap=True, highlight=False)
    own = [w for w in p.workloads if w.precision is not None]
    if own:
        console.print(f"{len(own)} workload(s) have their own tolerance, e.g. {own[0].name}: "
                      f"atol={own[0].precision.atol:g} rtol={own[0].precision.rtol:g} "
                      f"matched ratio {own[0].precision.matched_ratio:g}")
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
