"""`solforge import SRC --out DIR`: other benchmarks' problems as plain solforge files."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from solforge.cli.console import make_console
from solforge.problems import ProblemError
from solforge.problems.formats.importer import import_source

console = make_console()


def register(app: typer.Typer) -> None:
    @app.command("import")
    def import_(
        src: Path = typer.Argument(..., help="a SOL-ExecBench problem folder (or a folder of "
                                   "them), a FlashInfer-Bench dataset, a CUDA-Agent-Ops "
                                   ".jsonl, or a KernelBench checkout or level folder"),
        out: Path = typer.Option(..., "--out", help="the folder to write problem files to"),
        holdout: float = typer.Option(0.0, min=0.0, max=1.0, help="share of each converted "
                                      "definition's workloads held out (seeded by its name)"),
    ) -> None:
        """Write SRC's problems as plain solforge problem files, for editing or a corpus;
        duplicates are reported, not written."""
        try:
            done = import_source(src, out, holdout)
        except ProblemError as e:
            console.print(f"[red]{escape(str(e))}[/red]", soft_wrap=True)
            raise typer.Exit(2) from None
        console.print(f"wrote {len(done.files)} problem file(s) to {out}")
        for entry, first in done.duplicates:
            console.print(f"[yellow]duplicate[/yellow] {entry}: repeats {first}; not "
                          "written", soft_wrap=True, highlight=False)
        for entry, why in done.broken:
            console.print(f"[red]not converted[/red] {escape(why)}", soft_wrap=True,
                          highlight=False)
        if not done.files:
            raise typer.Exit(1)
