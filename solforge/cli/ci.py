"""``solforge ci EXPORT_OR_RUN --baseline FILE``: the CI gate (``solforge.gate``).

    solforge ci exported/ --baseline ci/baseline.json --update-baseline   # once, reviewed
    solforge ci exported/ --baseline ci/baseline.json --junit ci.xml --summary ci.md

Exit status: 0 every kernel passed, 1 a kernel was wrong or slower beyond the noise, 2 the
input or the baseline could not be used.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from solforge.cli.console import make_console
from solforge.cli.report import located

console = make_console()


def register(app: typer.Typer) -> None:
    @app.command("ci")
    def ci(target: Path = typer.Argument(..., help="an export (solforge export), a run "
                                         "directory, its ledger.sqlite, or a .tgz of either"),
           baseline: Path = typer.Option(..., "--baseline", help="the reviewed "
                                         "solforge.ci-baseline/1 file"),
           update_baseline: bool = typer.Option(False, "--update-baseline", help="write "
                                                "this measurement as the baseline (after "
                                                "review); correctness still gates"),
           device: str = typer.Option(None, "--device", help="cpu, cuda or cuda:N (default: "
                                      "cuda if PyTorch sees a GPU, else cpu)"),
           rounds: int = typer.Option(None, "--rounds", min=2, help="interleaved rounds per "
                                      "kernel (default 5)"),
           baselines: str = typer.Option("eager,compile", "--baselines",
                                         help="reference baselines: eager, compile"),
           budget_ms: float = typer.Option(0.0, "--budget-ms", help="timing budget per "
                                           "workload, all rounds together (0: by device)"),
           timeout: float = typer.Option(300.0, "--timeout", help="seconds per kernel"),
           junit: Path = typer.Option(Path("solforge-ci.xml"), "--junit",
                                      help="JUnit XML to write"),
           summary: Path = typer.Option(Path("solforge-ci.md"), "--summary",
                                        help="markdown summary to write")) -> None:
        """Re-verify each kept kernel on fresh seeds and all workloads, re-time it in
        interleaved rounds with fresh baselines, and fail on a wrong kernel or a slowdown
        beyond the measured noise."""
        import torch

        from solforge.gate import (
            DEFAULT_ROUNDS,
            BaselineError,
            kept_kernels,
            markdown,
            read_baseline,
            run_gate,
            updated_baseline,
            write_baseline,
            write_outputs,
        )
        from solforge.records import EvalOptions

        old = None
        if not update_baseline or baseline.exists():
            try:
                old = read_baseline(baseline)
            except BaselineError as e:
                console.print(f"[red]{escape(str(e))}[/red]", soft_wrap=True)
                raise typer.Exit(2) from None
        kinds = [b.strip() for b in baselines.split(",") if b.strip()]
        unknown = [b for b in kinds if b not in ("eager", "compile")]
        if unknown or not kinds:
            console.print(f"[red]--baselines {baselines!r}: use eager, compile or both[/red]")
            raise typer.Exit(2)
        opts = EvalOptions(device=device or ("cuda" if torch.cuda.is_available() else "cpu"),
                           rounds=rounds or DEFAULT_ROUNDS, baselines=kinds,
                           budget_ms=budget_ms, timeout_s=timeout)
        with located(target) as loc:
            kept = kept_kernels(loc)
            if not kept.kernels:
                console.print(f"[red]{target}: no kept kernel to check[/red] "
                              + "; ".join(f"{k}: {v}" for k, v in kept.missing.items()))
                raise typer.Exit(2)
            report = run_gate(kept, opts, old)
        write_outputs(report, junit, summary)
        console.print(markdown(report), markup=False, highlight=False, soft_wrap=True)
        console.print(f"wrote {junit} and {summary}")
        if update_baseline:
            write_baseline(baseline, updated_baseline(report, old))
            console.print(f"baseline written: {baseline} (review and commit it)")
            wrong = [o for o in report.outcomes if not o.record.passed]
            raise typer.Exit(1 if wrong else 0)
        raise typer.Exit(0 if report.passed else 1)
