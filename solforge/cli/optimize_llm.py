"""The ``--agent llm`` half of ``solforge optimize``: flags in, one table or one line out.

The ``optimize`` command (``cli/optimize.py``) owns the flags and calls
:func:`run_llm_optimize` with them when ``--agent llm``::

    solforge optimize tiny.py --agent llm --model gpt-4.1                   # OPENAI_API_KEY
    solforge optimize L1 --agent llm --model claude-sonnet-4-5 --device cuda   # ANTHROPIC_API_KEY
    solforge optimize rmsnorm_llama3 --agent llm --model qwen2.5-coder \\
        --base-url http://localhost:8000/v1 --language triton               # a vLLM server

Exit codes: 0 every problem got a passing verdict, 1 some did not, 2 nothing ran (a
setting is missing or wrong; the one line printed says what to set).

The keyword names are :func:`~solforge.agents.optimize.optimize_llm`'s: the flags
``optimize`` shares with the search agent (``device``, ``run_dir``, ``language``,
``policy``, ``timeout_s``, ``resume``) and the LLM ones, whose help texts are in
``LLM_FLAGS`` so the command can declare them without restating them::

    model: str = typer.Option(None, "--model", help=LLM_FLAGS["model"])
    base_url: str = typer.Option(None, "--base-url", help=LLM_FLAGS["base_url"])
    api: str = typer.Option(None, "--api", help=LLM_FLAGS["api"])
    ...
    if agent == "llm":
        raise typer.Exit(run_llm_optimize(targets, model=model, base_url=base_url, api=api,
                                          device=device, run_dir=run_dir, ...))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from solforge.agents.errors import ModelError
from solforge.agents.optimize import optimize_llm
from solforge.cli.console import fmt
from solforge.orchestrate.units import WorkerResult
from solforge.problems.spec import ProblemError

LLM_FLAGS: dict[str, str] = {
    "model": "model name (gpt-4.1, claude-sonnet-4-5, or what your server serves)",
    "base_url": "OpenAI-compatible or Anthropic endpoint (default: $OPENAI_BASE_URL / "
                "$ANTHROPIC_BASE_URL, else the vendor's)",
    "api": "openai (any chat-completions endpoint) or anthropic (default: anthropic for "
           "claude* models, else openai)",
    "api_key": "the key (default: $OPENAI_API_KEY / $ANTHROPIC_API_KEY, or the config file)",
    "llm_config": "TOML file with model, api, base_url, api_key_env, prices (default: "
                  "$SOLFORGE_LLM_CONFIG or ~/.config/solforge/llm.toml)",
    "language": "a language the agent may write (repeat): pytorch, triton, cuda_cpp, "
                "cute_dsl",
    "protocol": "a markdown protocol replacing solforge's SKILL.md",
    "role": "optimizer, diagnoser or reviewer",
    "role_file": "a markdown role prompt replacing the packaged one",
    "max_steps": "model calls per problem, at most (0: no limit)",
    "max_tokens": "input + output tokens per problem (0: no limit)",
    "max_cost": "dollars per problem (0: no limit; needs a known price)",
    "max_time_s": "wall-clock seconds per problem (0: no limit)",
    "context_tokens": "prompt budget per request; older tool output is trimmed to fit",
    "price_in": "$ per million input tokens (overrides the built-in table)",
    "price_out": "$ per million output tokens (overrides the built-in table)",
}


def results_table(results: list[WorkerResult]) -> Table:
    t = Table()
    for col in ("problem", "agent", "verdict", "vs eager", "vs compile", "SOL", "steps",
                "tokens", "cost"):
        t.add_column(col, justify="left" if col in ("problem", "agent", "verdict") else "right")
    for r in results:
        verdict = r.verdict or "-"
        color = "green" if verdict == "PASSED" else "red"
        agent = r.status + (" (best auto-submitted)" if r.auto_submitted else "")
        cost = "-" if r.usage.cost_usd is None else f"${r.usage.cost_usd:.4f}"
        t.add_row(r.problem, agent, f"[{color}]{verdict}[/{color}]",
                  fmt(r.speedup_vs_eager, "x"), fmt(r.speedup_vs_compile, "x"),
                  fmt(r.sol_score, digits=2), str(r.steps), str(r.usage.tokens), cost)
    return t


def run_llm_optimize(targets: list[str], console: Console | None = None, **flags: Any) -> int:
    """Run :func:`~solforge.agents.optimize.optimize_llm` with the parsed flags (same
    keyword names) and print the outcome; returns the exit code."""
    console = console or Console()

    def on_event(kind: str, **data: Any) -> None:
        if kind == "cost_unpriced":
            console.print(f"[yellow]{data.get('problem')}: {data.get('message')}[/yellow]")
        elif kind == "model_retry":
            console.print(f"[yellow]{data.get('problem')}: model call retry "
                          f"{data.get('attempt')} in {data.get('wait_s')} s: "
                          f"{data.get('reason')}[/yellow]")

    def on_result(r: WorkerResult) -> None:
        console.print(f"{r.problem}: {r.status}, verdict {r.verdict or 'none'}"
                      + (f" ({r.message})" if r.message and r.verdict != "PASSED" else ""))

    try:
        out = optimize_llm(list(targets), on_event=on_event, on_result=on_result, **flags)
    except (ModelError, ProblemError, FileNotFoundError, FileExistsError, ValueError) as e:
        console.print(f"[red]solforge optimize: {e}[/red]", soft_wrap=True)
        return 2
    for b in out.broken:
        console.print(f"[yellow]skipped a broken problem file: {b}[/yellow]")
    console.print(results_table(out.results))
    console.print(f"run: {out.run_dir} ({out.status}); read it with "
                  f"`solforge runs show {Path(out.run_dir)}`")
    if out.status == "stopped":
        console.print(f"[red]stopped: {out.message}[/red]", soft_wrap=True)
        return 2 if not any(r.steps for r in out.results) else 1
    return 0 if out.results and all(r.verdict == "PASSED" for r in out.results) else 1
