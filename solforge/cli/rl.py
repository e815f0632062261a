"""`solforge serve` (the reward server) and `solforge rl dataset` (trainer prompts)."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import typer

from solforge.cli.console import make_console
from solforge.problems import ProblemError, resolve_target

console = make_console()
rl_app = typer.Typer(help="RL training against solforge: datasets for trainers.",
                     no_args_is_help=True)


def _problems(target: str):
    try:
        problems, broken = resolve_target(target)
    except ProblemError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    for path, error in broken:
        console.print(f"[yellow]skipped {path}: {error}[/yellow]")
    return problems


def _missing_extra(e: ModuleNotFoundError) -> typer.Exit:
    console.print(f"[red]{e.name} is not installed: pip install 'solforge[rl]'[/red]")
    return typer.Exit(2)


@rl_app.command("dataset")
def dataset(
    target: str = typer.Argument(..., help="problems: a name, a category, 'all', a file or "
                                 "a directory (as for `solforge bench`)"),
    out: Path = typer.Option(..., "--out", "-o", help="the jsonl file to write"),
    device: str = typer.Option("cuda", help="the device the prompts name (and measure on)"),
    language: list[str] = typer.Option(None, "--language", help="languages that count "
                                       "(default: the kernel languages)"),
    measure: bool = typer.Option(False, help="evaluate each reference on its visible "
                                 "workloads to put SOL and baseline figures in the prompt"),
) -> None:
    """Write one trainer row per problem: prompt, data_source, reward_model, label."""
    from solforge.rl.dataset import dataset_rows
    from solforge.rl.task import TaskError

    problems = _problems(target)
    figures = None
    if measure:
        from solforge.bench import Evaluator
        from solforge.bench.judge.reference_solution import reference_solution
        from solforge.records.options import EvalOptions
        from solforge.rl.task import reference_figures

        figures = {}
        with Evaluator(EvalOptions(device=device, workloads="visible")) as ev, \
                console.status("measuring the references") as status:
            for p in problems:
                status.update(f"measuring {p.name}")
                rec = ev.evaluate(p, reference_solution(p))
                figures[p.name] = reference_figures(rec) if rec.passed else []
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        rows = list(dataset_rows(problems, device, list(language or []) or None,
                                 figures=figures))
    except (TaskError, ValueError) as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    with out.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    console.print(f"wrote {len(rows)} prompts to {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(rl_app, name="rl")

    @app.command("serve")
    def serve(
        target: str = typer.Option("all", "--problems", help="the problems served (as for "
                                   "`solforge bench`); requests name them"),
        device: list[str] = typer.Option(None, "--device", help="a device slot (repeat "
                                         "for several: --device cuda:0 --device cuda:1)"),
        per_device: int = typer.Option(1, min=1, help="slots (judges) per device"),
        host: str = typer.Option("127.0.0.1", help="address to listen on"),
        port: int = typer.Option(8471, help="port"),
        token_file: Path = typer.Option(None, help="a file holding the bearer token "
                                        "(default $SOLFORGE_SERVE_TOKEN, else a new one "
                                        "written to STATE/token)"),
        no_auth: bool = typer.Option(False, "--no-auth", help="accept requests without a "
                                     "token (trusted loopback only)"),
        scheme: str = typer.Option("staged", help="reward: staged (CUDA Agent) or sol"),
        policy: str = typer.Option("strict", help="strict (reject fallbacks) or default"),
        trials: int = typer.Option(5, min=1, help="correctness trials per workload"),
        budget_ms: float = typer.Option(0.0, help="timed-loop budget per workload (0: "
                                        "by device)"),
        baselines: str = typer.Option("eager,compile", help="baselines to time"),
        timeout: float = typer.Option(300.0, help="seconds per evaluation (candidate side)"),
        batch: int = typer.Option(8, min=1, help="jobs a slot takes at once (one problem's "
                                  "back to back)"),
        state: Path = typer.Option(Path("solforge-serve"), help="state directory: the "
                                   "verdict cache, the generated token"),
    ) -> None:
        """Serve rewards over HTTP: POST /reward, /evaluate, /openrlhf; GET /tasks/{id}."""
        try:
            import uvicorn
            from pydantic import SecretStr

            from solforge import env
            from solforge.records.options import EvalOptions
            from solforge.rl.jobs import SlotPool
            from solforge.rl.reward import RewardConfig
            from solforge.rl.server import create_app
        except ModuleNotFoundError as e:
            raise _missing_extra(e) from None
        if scheme not in ("staged", "sol"):
            raise typer.BadParameter("--scheme is 'staged' or 'sol'")
        if policy not in ("default", "strict"):
            raise typer.BadParameter("--policy is 'default' or 'strict'")
        problems = {p.name: p for p in _problems(target)}
        state.mkdir(parents=True, exist_ok=True)
        token = None
        if not no_auth:
            if token_file is not None:
                if not token_file.is_file():
                    raise typer.BadParameter(f"--token-file {token_file}: no such file")
                token = token_file.read_text().strip()
            else:
                token = env.serve_token()
            if not token:
                token = secrets.token_urlsafe(32)
                path = state / "token"
                path.write_text(token + "\n")
                path.chmod(0o600)
                console.print(f"token written to {path} (send 'Authorization: Bearer ...')")
            os.environ.pop(env.SERVE_TOKEN, None)  # nothing below needs it in the environment
        opts = EvalOptions(device=(device or ["cpu"])[0], timeout_s=timeout, policy=policy,
                           trials=trials, budget_ms=budget_ms, workloads="all",
                           baselines=[b for b in baselines.split(",") if b])
        slots = [d for d in (device or ["cpu"]) for _ in range(per_device)]
        pool = SlotPool(problems, slots, opts, RewardConfig(scheme=scheme), state, batch=batch)
        app = create_app(pool, SecretStr(token) if token else None, require_token=not no_auth)
        console.print(f"serving {len(problems)} problems on {', '.join(slots)} at "
                      f"http://{host}:{port} ({scheme} reward, {policy} policy)")
        import logging

        # one line per judged job on stderr (the access log stays off: the jobs say more)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        uvicorn.run(app, host=host, port=port, log_level="warning")
