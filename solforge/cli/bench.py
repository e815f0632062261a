"""`solforge bench TARGET --solution PATH`: evaluate solutions, print a table, write JSON."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from solforge.bench import SuiteStopped, with_solutions
from solforge.bench import bench as run_bench
from solforge.cli.console import fmt, make_console
from solforge.problems import ProblemError, resolve_target
from solforge.problems.formats.solution_json import for_target as solution_for
from solforge.problems.formats.solution_json import name_of as solution_name
from solforge.records.evaluation import EvaluationRecord
from solforge.records.flashinfer import write_traces
from solforge.records.options import EvalOptions

console = make_console()


def workloads_table(r: EvaluationRecord) -> Table:
    """One record's workloads: error, kernel time against the baselines, speed of light."""
    t = Table(title=f"{r.problem} ({r.language}, {r.device}): {r.status.value}")
    for col in ("workload", "held out", "correct", "max abs err", "kernel ms", "eager ms",
                "compile ms", "vs eager", "vs compile", "SOL ms", "bound", "SOL score"):
        t.add_column(col, justify="left" if col in ("workload", "bound") else "right")
    for w in r.workloads:
        t.add_row(w.name, "" if w.visible else "yes", "yes" if w.correct else "NO",
                  fmt(w.max_abs_error, digits=2), fmt(w.time_ms), fmt(w.eager_ms),
                  fmt(w.compile_ms), fmt(w.speedup_vs_eager, "x"),
                  fmt(w.speedup_vs_compile, "x"), fmt(w.sol_ms), w.bound or "-",
                  fmt(w.sol_score, digits=2))
    return t


def records_table(records: list[EvaluationRecord], title: str = "") -> Table:
    t = Table(title=title or None)
    for col in ("problem", "status", "workloads", "kernel ms", "eager ms", "compile ms",
                "vs eager", "vs compile", "SOL score"):
        t.add_column(col, justify="left" if col in ("problem", "status") else "right")
    for r in records:
        timed = [w for w in r.workloads if w.time_ms is not None]
        ok = sum(1 for w in r.workloads if w.correct)
        color = "green" if r.passed else "red"
        status = f"[{color}]{r.status.value}[/{color}]"
        if r.flags:
            status += f" [yellow]{','.join(r.flags)}[/yellow]"
        first = timed[0] if len(timed) == 1 else None
        t.add_row(r.problem, status, f"{ok}/{len(r.workloads)}",
                  fmt(first.time_ms) if first else (f"{len(timed)} timed" if timed else "-"),
                  fmt(first.eager_ms) if first else "-",
                  fmt(first.compile_ms) if first else "-",
                  fmt(r.speedup_vs_eager, "x"), fmt(r.speedup_vs_compile, "x"),
                  fmt(r.sol_score, digits=2))
    return t


def _summary(records: list[EvaluationRecord], device: str, baseline: str) -> dict | None:
    try:
        from solforge.sol import summarize
    except ImportError:
        return None
    return summarize(records, device=device, baseline=baseline)


def register(app: typer.Typer) -> None:
    @app.command("bench")
    def bench(
        target: str = typer.Argument(..., help="a built-in problem, a category, 'all', a "
                                               "problem file or a directory of them (a "
                                               "KernelBench checkout or level folder; "
                                               "DIR:N-M: its files numbered N to M), or a "
                                               "comma-separated list"),
        solution: str = typer.Option(..., "--solution", "-s", help="a solution .py, a directory "
                                     "of <problem>.py files, a SOL-ExecBench / FlashInfer-"
                                     "Bench solution.json, or 'reference'"),
        device: str = typer.Option("cpu", help="cpu or cuda (cuda:N)"),
        timeout: float = typer.Option(300.0, help="seconds per evaluation (candidate side)"),
        json_out: Path = typer.Option(None, "--json", help="write the evaluation records here"),
        summary: Path = typer.Option(None, help="write the suite summary here"),
        policy: str = typer.Option("default", help="default (flag) or strict (reject)"),
        language: list[str] = typer.Option(None, "--language", help="languages that count"),
        workloads: str = typer.Option("all", help="all, visible, or comma-separated names"),
        trials: int = typer.Option(5, min=1, help="correctness trials per workload"),
        seed: int = typer.Option(None, help="fix the trials' base seed (default: fresh)"),
        baselines: str = typer.Option("eager,compile", help="reference baselines to time"),
        compile_mode: str = typer.Option("default", help="torch.compile mode of the baseline"),
        baseline: str = typer.Option("best", help="T_b of the SOL score: eager, compile, best"),
        fresh_baselines: bool = typer.Option(False, help="re-measure cached baselines"),
        budget_ms: float = typer.Option(0.0, help="timed-loop budget per workload in ms"),
        no_timing: bool = typer.Option(False, "--no-timing", help="check correctness only"),
        prewarm: int = typer.Option(-1, help="processes that compile baselines ahead of "
                                    "timing (-1: auto on a GPU, 0: off)"),
        trace_out: Path = typer.Option(None, "--trace-out", help="write FlashInfer-Trace "
                                       "records (JSONL, one per workload) here"),
    ) -> None:
        """Evaluate a solution on problems: correctness, kernel time, speedups, SOL score."""
        if policy not in ("default", "strict"):
            raise typer.BadParameter("--policy is 'default' or 'strict'")
        try:
            problems, broken = resolve_target(target)
        except ProblemError as e:
            console.print(f"[red]{e}[/red]")
            raise typer.Exit(2) from None
        try:
            trace_name = solution_name(solution)
            solution = solution_for(solution, problems)
        except ProblemError as e:
            console.print(f"[red]{e}[/red]", soft_wrap=True)
            raise typer.Exit(2) from None
        opts = EvalOptions(
            device=device, timeout_s=timeout, policy=policy,
            languages=list(language or []) or None,
            workloads=workloads if workloads in ("all", "visible") else workloads.split(","),
            trials=trials, seed=seed, timing=not no_timing,
            baselines=[b for b in baselines.split(",") if b], compile_mode=compile_mode,
            fresh_baselines=fresh_baselines, budget_ms=budget_ms, sol_baseline=baseline)
        if prewarm != 0 and "compile" in opts.baselines and opts.timing and (
                prewarm > 0 or (device != "cpu" and len(problems) > 1)):
            import os

            from solforge.bench import prewarm as run_prewarm

            n = prewarm if prewarm > 0 else max(1, min(8, (os.cpu_count() or 2) - 2))
            # only the problems that have a solution here get timed, so only theirs compile
            try:
                wanted = with_solutions(problems, solution)
            except FileNotFoundError:
                wanted = []  # reported below by the bench itself
            with console.status(f"compiling torch.compile baselines ({n} processes)"):
                done = run_prewarm(wanted, device, n, compile_mode)
            console.print(f"prewarmed {done['compiled']} baseline graphs "
                          f"({done['failed']} failed; the judge retries those)")
        records: list[EvaluationRecord] = []
        skipped: list[str] = []
        total = len(problems) + len(broken)

        def save(rec: EvaluationRecord) -> None:
            # written after every record: an interrupted bench keeps what it measured
            records.append(rec)
            if json_out:
                json_out.parent.mkdir(parents=True, exist_ok=True)
                json_out.write_text(json.dumps([r.to_json() for r in records], indent=1))
            if trace_out:
                write_traces(trace_out, records, trace_name)

        try:
            if total > 1:
                with Progress(TextColumn("{task.description}"), BarColumn(),
                              TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                              console=console) as prog:
                    task = prog.add_task("bench", total=total)

                    def advance(rec: EvaluationRecord) -> None:
                        save(rec)
                        prog.update(task, advance=1, description=f"{rec.problem}: "
                                    f"{rec.status.value}")

                    run_bench(problems, broken, solution, opts, on_record=advance,
                              on_skip=lambda p: (skipped.append(p.name),
                                                 prog.update(task, advance=1)))
            else:
                run_bench(problems, broken, solution, opts, on_record=save,
                          on_skip=lambda p: skipped.append(p.name))
        except FileNotFoundError as e:
            console.print(f"[red]{e}[/red]")
            raise typer.Exit(2) from None
        except SuiteStopped as e:
            console.print(records_table(records))
            console.print(f"[red]{e}[/red]", soft_wrap=True)
            raise typer.Exit(3) from None
        console.print(workloads_table(records[0]) if len(records) == 1 and records[0].workloads
                      else records_table(records))
        for r in records:
            if not r.passed and r.message:
                console.print(f"[red]{r.problem}[/red]: {r.message[:600]}")
        if skipped:
            console.print(f"[yellow]no solution for {len(skipped)} problem(s): "
                          f"{', '.join(skipped[:20])}[/yellow]")
        device_label = records[0].device if records else device
        summ = _summary(records, device_label, baseline)
        if json_out:
            if summ is not None and summary is None:
                summary = json_out.with_suffix(".summary.json")
        if summary and summ is not None:
            summary.parent.mkdir(parents=True, exist_ok=True)
            summary.write_text(json.dumps(summ, indent=1))
        if summ is not None:
            console.print(f"pass rate {summ['pass_rate']:.0%}, geomean speedup vs best "
                          f"{fmt(summ['geomean_speedup_vs_best'], 'x')}, SOL score median "
                          f"{fmt(summ['sol_score_median'], digits=2)}")
        if not records or any(not r.passed for r in records):
            raise typer.Exit(1)
