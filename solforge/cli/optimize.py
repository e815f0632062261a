"""`solforge optimize [TARGET...]`: agents over problems, planned, resumable, live."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from solforge.bench import install_refusal
from solforge.cli.console import broken_line, fmt, make_console
from solforge.cli.optimize_llm import LLM_FLAGS
from solforge.cli.optimize_settings import (
    devices,
    llm_settings,
    merged_sections,
    recorded_llm,
)
from solforge.orchestrate.backend import BACKENDS, make_backend
from solforge.orchestrate.planner import Planner, ProblemState
from solforge.orchestrate.planner_config import PlannerConfig, unknown_reopened
from solforge.orchestrate.run import Run, RunSpec
from solforge.orchestrate.units import agent_factory
from solforge.problems import ProblemError, resolve_target
from solforge.records.options import EvalOptions

console = make_console()


def _state(ps: ProblemState) -> str:
    return "running" if ps.busy else (f"done: {ps.converged}" if ps.converged else "queued")


def progress_view(planner: Planner) -> Group:
    """The live table: per problem best speedup, SOL score, units; workers; usage."""
    t = Table(title=f"run {planner.run.dir}")
    for col in ("problem", "state", "units", "best vs best-baseline", "SOL score"):
        t.add_column(col, justify="left" if col in ("problem", "state") else "right")
    for name, ps in planner.problems.items():
        state = _state(ps)
        t.add_row(name, state, str(ps.units), fmt(ps.best_speedup, "x"),
                  fmt(ps.best_sol, digits=2))
    w = Table.grid(padding=(0, 2))
    for ws in planner.workers:
        what = f"{ws.unit.problem} ({ws.unit.role})" if ws.unit else ""
        w.add_row(ws.name, ws.device, ws.state, what)
    u = planner.run.ledger.usage_totals()
    usage = (f"tokens {u['input_tokens'] + u['output_tokens']}, cost ${u['cost_usd']:.4f}, "
             f"evaluations {planner.run.ledger.count_evaluations()}"
             + (f"; stopping: {planner.stop_reason}" if planner.stop_reason else ""))
    return Group(t, w, usage)


def progress_lines(planner: Planner, seen: dict[str, tuple[str, ...]]) -> list[str]:
    """One timestamped line per problem whose row of :func:`progress_view` changed since
    ``seen`` (which it updates), and one when the run starts stopping: what ``optimize``
    writes when its output is a file, so a run killed before its end (a device call's time
    limit) still leaves its log. A problem first seen queued is not news."""
    now = time.strftime("%H:%M:%S")
    lines = []
    for name, ps in planner.problems.items():
        state = _state(ps)
        row = (state, str(ps.units), fmt(ps.best_speedup, "x"), fmt(ps.best_sol, digits=2))
        if seen.get(name) != row:
            if name in seen or state != "queued":
                lines.append(f"{now} {name}: {state}, units {row[1]}, best {row[2]} against "
                             f"the best baseline, SOL score {row[3]}")
            seen[name] = row
    if planner.stop_reason and seen.get("") != (planner.stop_reason,):
        seen[""] = (planner.stop_reason,)
        lines.append(f"{now} stopping: {planner.stop_reason}")
    return lines


def _check_reopen(reopen: list[str], resume: Path | None, names: list[str]) -> None:
    if reopen and resume is None:
        console.print("[red]solforge optimize: --reopen goes with --resume (a new run "
                      "starts every problem anyway)[/red]")
        raise typer.Exit(2)
    error = unknown_reopened(reopen, names)
    if error:
        console.print(f"[red]solforge optimize: {error}[/red]")
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    @app.command("optimize")
    def optimize(
        ctx: typer.Context,
        targets: list[str] = typer.Argument(None, help="problems, categories, files or "
                                            "directories: a KernelBench checkout or level "
                                            "folder, DIR:N-M for its files numbered N to "
                                            "M; comma lists (default: the whole corpus)"),
        agent: str = typer.Option("search", help="search (no LLM), llm, or both: search,llm"),
        workers: int = typer.Option(1, min=1, help="workers at once"),
        device: str = typer.Option("cpu", help="cpu or cuda"),
        gpus: str = typer.Option(None, help="GPU indices to spread workers over (default: "
                                 "all visible, with --device cuda)"),
        run_dir: Path = typer.Option(None, help="the run directory (default: runs/<time>)"),
        resume: Path = typer.Option(None, help="continue the run in this directory"),
        reopen: str = typer.Option("", help="with --resume: comma-separated problems that "
                                   "get one more unit, whatever ended them (after an "
                                   "upgrade gave the search new candidates or kernels); "
                                   "kept in the run until that unit has run"),
        roles: str = typer.Option("optimizer", help="LLM roles per problem, in turn, e.g. "
                                  "diagnoser,optimizer,reviewer"),
        max_units: int = typer.Option(3, min=1, help="units per problem, at most"),
        patience: int = typer.Option(2, min=1, help="units without gain that end a problem"),
        converge_sol: float = typer.Option(0.95, help="a SOL score that ends a problem"),
        budget_wall_s: float = typer.Option(0.0, help="run budget: wall seconds (0: none)"),
        budget_device_s: float = typer.Option(0.0, help="run budget: GPU evaluation seconds"),
        budget_tokens: int = typer.Option(0, help="run budget: model tokens"),
        budget_cost: float = typer.Option(0.0, help="run budget: dollars"),
        budget_attempts: int = typer.Option(0, help="run budget: candidates"),
        unit_timeout_s: float = typer.Option(0.0, help="a unit longer is stalled (0: off)"),
        floor_s: float = typer.Option(None, min=0, help="after a budget ended, seconds in "
                                      "which surveyed problems no unit reached still get "
                                      "one (default: half of --budget-wall-s, at least "
                                      "120; 0: none); the rest are reported not reached"),
        backend: str = typer.Option("local", help="where judges run: local (judge "
                                    "processes on this machine) or ray (one judge actor "
                                    "per GPU of a Ray cluster; docs/SCALE.md)"),
        address: str = typer.Option(None, help="with --backend ray: the cluster to join "
                                    "(auto, ray://HOST:10001; default: a Ray instance "
                                    "started here)"),
        timeout: float = typer.Option(300.0, help="seconds per evaluation"),
        budget_ms: float = typer.Option(0.0, help="the evaluator's timed-loop budget per "
                                        "workload in ms (0: by device, 1000 on a GPU); "
                                        "the search agent's final re-measurement uses it"),
        baselines: str = typer.Option("eager,compile", help="reference baselines to time"),
        max_candidates: int = typer.Option(None, help="search agent: candidates per problem "
                                           "and unit (default: 12 on a GPU, 6 on a CPU)"),
        search_seconds: float = typer.Option(1800.0, help="search agent: seconds of candidate "
                                             "evaluations (their trials, policy probe and "
                                             "timing) per problem and unit"),
        compile_seconds: float = typer.Option(900.0, help="search agent: seconds of builds, "
                                              "compilation and checks per problem and unit"),
        explore_budget_ms: float = typer.Option(
            250.0, help="search agent: timed-loop budget per workload (ms) while exploring; "
            "the winner's final re-measurement uses the evaluator's full budget"),
        explore_max_calls: int = typer.Option(
            50, help="search agent: timed calls per workload while exploring, at most "
            "(at least 10)"),
        families: str = typer.Option(None, help="search agent: candidate families to use, "
                                     "e.g. library,compile (default: all)"),
        policy: str = typer.Option("default", help="default or strict"),
        language: list[str] = typer.Option(None, "--language", help=LLM_FLAGS["language"]),
        model: str = typer.Option(None, help=LLM_FLAGS["model"]),
        base_url: str = typer.Option(None, help=LLM_FLAGS["base_url"]),
        api: str = typer.Option(None, help=LLM_FLAGS["api"]),
        api_key: str = typer.Option(None, help=LLM_FLAGS["api_key"]),
        llm_config: Path = typer.Option(None, help=LLM_FLAGS["llm_config"]),
        protocol: Path = typer.Option(None, help=LLM_FLAGS["protocol"]),
        role_file: Path = typer.Option(None, help=LLM_FLAGS["role_file"]),
        max_steps: int = typer.Option(60, help=LLM_FLAGS["max_steps"]),
        max_tokens: int = typer.Option(0, help=LLM_FLAGS["max_tokens"]),
        max_cost: float = typer.Option(10.0, help=LLM_FLAGS["max_cost"]),
        max_time_s: float = typer.Option(3600.0, help=LLM_FLAGS["max_time_s"]),
        context_tokens: int = typer.Option(100_000, help=LLM_FLAGS["context_tokens"]),
        price_in: float = typer.Option(None, help=LLM_FLAGS["price_in"]),
        price_out: float = typer.Option(None, help=LLM_FLAGS["price_out"]),
        config: Path = typer.Option(None, "--config", help="a TOML file of settings: "
                                    r"\[planner] (and \[planner.budgets]), \[search], "
                                    r"\[llm] (and \[llm.model], \[llm.agent]), \[eval], "
                                    "each checked by its settings model; flags typed here "
                                    "override it"),
        dry_run: bool = typer.Option(False, help="print the settings the run would use "
                                     "(JSON) and exit without running"),
    ) -> None:
        r"""Optimise problems with agents (default: the built-in search agent, offline).

        Settings come from the flags and, with --config run.toml, from a file whose tables
        are the settings models (\[planner] PlannerConfig, \[search] SearchConfig, \[llm]
        WorkerConfig, \[eval] EvalOptions), e.g. "\[search] max_candidates = 8"; a flag
        typed on the command line wins over the file. --dry-run prints what the run would
        use.
        """
        flags = dict(locals())

        def typed(flag: str) -> bool:
            # by name: typer may bring its own copy of click's ParameterSource
            source = ctx.get_parameter_source(flag)
            return source is not None and source.name == "COMMANDLINE"

        try:
            sections = merged_sections(config, flags, typed)
        except ValueError as e:  # the file: one line naming the file, section and key
            console.print(f"[red]solforge optimize: {escape(str(e))}[/red]", soft_wrap=True)
            raise typer.Exit(2) from None
        planner_s, eval_s = sections["planner"], sections["eval"]
        if resume is not None:  # what to resume comes from the run itself
            try:
                spec = Run.open(resume).spec
            except FileNotFoundError as e:
                console.print(f"[red]solforge optimize: {e}[/red]")
                raise typer.Exit(2) from None
            targets = spec.targets
            planner_s["agents"] = spec.options.get("agents") or spec.agent.split(",")
            eval_s["device"] = spec.device
        agents, role_list = planner_s["agents"], planner_s["roles"]
        if agents == ["llm"] and planner_s["workers"] == 1 and len(role_list) == 1 \
                and config is None and not dry_run and planner_s["backend"] == "local":
            # the simple plan (one LLM unit per problem, in turn) with its results table
            from solforge.cli.optimize_llm import run_llm_optimize

            raise typer.Exit(run_llm_optimize(
                list(targets or ["all"]), console=console, model=model, base_url=base_url,
                api=api, device=eval_s["device"], run_dir=resume or run_dir,
                language=eval_s["languages"], protocol=protocol, api_key=api_key,
                llm_config=llm_config, role=role_list[0], role_file=role_file,
                max_steps=max_steps, max_tokens=max_tokens, max_cost=max_cost,
                max_time_s=max_time_s, context_tokens=context_tokens, price_in=price_in,
                price_out=price_out, policy=policy, timeout_s=timeout,
                resume=resume is not None, eval_options=EvalOptions(**eval_s)))
        try:
            problems = []
            seen = set()
            for t in targets or ["all"]:
                loaded, broken = resolve_target(t)
                for b, err in broken:  # the run goes on without them
                    console.print(f"{broken_line(b, err)} [yellow](skipped)[/yellow]",
                                  soft_wrap=True, highlight=False)
                problems += [p for p in loaded if not (p.name in seen or seen.add(p.name))]
            if not problems:
                raise ProblemError("no problem to optimize: every problem file of "
                                   f"{' '.join(targets or [])} failed to load (above)")
            settings: dict[str, dict] = {}
            if "llm" in agents:
                settings["llm"] = llm_settings(sections["llm"], llm_config)
            if "search" in agents:
                from solforge.search import SearchConfig

                # a bad value fails before the run exists
                settings["search"] = SearchConfig(**sections["search"]).model_dump(mode="json")
            planner_s["devices"] = devices(sections, gpus, typed)
            cfg = PlannerConfig(**planner_s)
            if cfg.backend not in BACKENDS:
                raise ValueError(f"--backend {cfg.backend}: use one of {', '.join(BACKENDS)}")
            for kind in cfg.agents:
                agent_factory(kind)  # an unknown or broken worker kind: one line, now
            opts = EvalOptions(**{**eval_s, "device": cfg.devices[0]})
            refused = install_refusal()  # a tampered install starts no run
            if refused:
                raise ValueError(refused)
        except (ProblemError, FileNotFoundError, ValueError) as e:
            console.print(f"[red]solforge optimize: {escape(str(e))}[/red]", soft_wrap=True)
            raise typer.Exit(2) from None
        except Exception as e:  # a missing key or model setting: one line, what to set
            console.print(f"[red]solforge optimize: {escape(str(e))}[/red]", soft_wrap=True)
            raise typer.Exit(2) from None
        _check_reopen(cfg.reopen, resume, [p.name for p in problems])
        judges = None
        if not dry_run:
            try:  # Ray starts (or is joined) here; its GPUs are the run's devices
                judges = make_backend(cfg.backend, cfg.address)
                cfg = cfg.model_copy(update={"devices": judges.devices(cfg.devices)})
                opts = opts.model_copy(update={"device": cfg.devices[0]})
            except Exception as e:  # no Ray, no cluster at the address, no GPU in it
                if judges is not None:
                    judges.close()
                console.print(f"[red]solforge optimize: {escape(str(e))}[/red]",
                              soft_wrap=True)
                raise typer.Exit(2) from None
        recorded = {"agents": agents, "planner": cfg.model_dump(mode="json"),
                    "eval": opts.model_dump(mode="json"), "search": settings.get("search"),
                    "llm": recorded_llm(settings["llm"]) if "llm" in settings else None,
                    "config": str(config) if config is not None else None}
        if dry_run or judges is None:
            typer.echo(json.dumps({**recorded, "targets": list(targets or ["all"]),
                                   "problems": [p.name for p in problems]}, indent=2))
            return
        if resume is None:
            spec = RunSpec(agent=",".join(agents), targets=list(targets or ["all"]),
                           device=eval_s["device"], workers=cfg.workers, options=recorded,
                           budgets=cfg.budgets.model_dump())
            try:
                run = Run.create(run_dir, spec)
            except FileExistsError as e:
                judges.close()
                console.print(f"[red]{e}[/red]")
                raise typer.Exit(2) from None
        else:
            run = Run.open(resume)
            run.mark("running")
        planner = Planner(run, problems, cfg, opts, settings, backend=judges)
        try:
            if console.is_terminal:
                with Live(progress_view(planner), console=console, refresh_per_second=2,
                          transient=False) as live:
                    planner.on_update = lambda p: live.update(progress_view(p))
                    result = planner.loop()
            else:  # a log: a live table would only be written when the run ends
                seen: dict[str, tuple[str, ...]] = {}
                planner.on_update = lambda p: [console.print(line, highlight=False)
                                               for line in progress_lines(p, seen)]
                result = planner.loop()
                console.print(progress_view(planner))
        except KeyboardInterrupt:
            run.mark("stopped")
            console.print(f"[yellow]stopped; continue with `solforge optimize --resume "
                          f"{run.dir}`[/yellow]")
            raise typer.Exit(130) from None
        finally:
            judges.close()
        console.print()
        console.print(f"{result.status}: {result.reason}. Evaluations run: "
                      f"{result.evaluations}, served from the run's cache: {result.cache_hits}")
        from solforge.cli.runs import summary_line

        console.print(summary_line(run))
        console.print(f"read it: `solforge runs show {run.dir}`; best solutions: "
                      f"`solforge export {run.dir} --out OUT`")
