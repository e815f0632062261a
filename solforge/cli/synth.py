"""`solforge synth --n N --seed S --out DIR`: synthesized problems, CUDA-Agent-Ops style
(the logic is in solforge/synth/)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from solforge.cli.console import make_console

console = make_console()


def _fail(msg: str, code: int = 2) -> None:
    console.print(f"[red]{escape(msg)}[/red]", soft_wrap=True)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    @app.command("synth")
    def synth(
        n: int = typer.Option(..., "--n", min=1, help="problems to write"),
        out: Path = typer.Option(..., "--out", help="folder for the problem files, "
                                 "synth.jsonl (CUDA-Agent-Ops rows) and synth.report.json"),
        seed: int = typer.Option(0, "--seed", help="the same seed writes the same bytes"),
        reference: list[Path] = typer.Option(
            [], "--reference", help="a KernelBench checkout or level folder, or a folder of "
            "earlier output, to dedupe against (repeatable; the built-in corpus always)"),
        device: str = typer.Option("cpu", "--device", help="cpu or cuda: where the filters "
                                   "run (cuda also runs the GPU-sized workloads)"),
        no_compile_check: bool = typer.Option(False, "--no-compile-check", help="skip the "
                                              "torch.compile filter (seconds a problem on a CPU)"),
        ops: str = typer.Option(None, "--ops", help="comma-separated catalogue ops to draw "
                                "from (default: all; see --list-ops)"),
        max_ops: int = typer.Option(5, "--max-ops", min=1, max=5, help="ops per problem, at most"),
        window_ms: str = typer.Option(None, "--window-ms", help="eager time window LO,HI in "
                                      "ms (default: cpu 0,500; cuda 0.01,100)"),
        threshold: float = typer.Option(0.9, "--threshold", min=0.0, max=1.0,
                                        help="AST similarity above which a problem is a "
                                        "duplicate"),
        max_draws: int = typer.Option(None, "--max-draws", min=1, help="draws at most "
                                      "(default: 50 * n)"),
        overwrite: bool = typer.Option(False, "--overwrite", help="replace a batch already "
                                       "in --out"),
        llm: str = typer.Option(None, "--llm", help="a model asked to write the first "
                                "--llm-n problems (a fusion of drawn ops each)"),
        llm_n: int = typer.Option(None, "--llm-n", min=1, help="problems asked of --llm "
                                  "(default: all n)"),
        base_url: str = typer.Option(None, "--base-url", help="the LLM's endpoint "
                                     "(OpenAI-compatible or Anthropic)"),
        api: str = typer.Option(None, "--api", help="openai or anthropic (default: by model)"),
        api_key: str = typer.Option(None, "--api-key", help="the key (default: the "
                                    "environment, as solforge optimize --agent llm)"),
        list_ops: bool = typer.Option(False, "--list-ops", help="print the catalogue and exit"),
    ) -> None:
        """Compose catalogue ops (or ask an LLM) into KernelBench-format problems, keep those
        that pass the filters and are no near-copy of a reference, and write them."""
        from solforge.registry import RegistryError
        from solforge.synth.catalogue import catalogue
        from solforge.synth.filters import FilterConfig
        from solforge.synth.pipeline import SynthConfig, synthesize
        from solforge.synth.write import prepare, write_batch

        names = [o.strip() for o in ops.split(",") if o.strip()] if ops else None
        try:
            chosen = catalogue(names)
        except RegistryError as e:
            _fail(f"--ops: {e}")
        if list_ops:
            t = Table("op", "kind", "dtypes")
            for op in chosen:
                t.add_row(op.name, op.kind, ", ".join(sorted(op.dtypes)))
            console.print(t)
            return
        if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
            _fail(f"--device {device!r}: use cpu or cuda")
        if device != "cpu":
            import torch

            if not torch.cuda.is_available():
                _fail(f"--device {device}: torch sees no CUDA device here; use --device cpu")
        if llm_n and not llm:
            _fail("--llm-n goes with --llm MODEL (the model asked to write them)")
        window = None
        if window_ms:
            try:
                lo, hi = (float(x) for x in window_ms.split(","))
            except ValueError:
                _fail(f"--window-ms {window_ms!r}: give LO,HI in ms, e.g. 0.01,100")
            if not 0 <= lo < hi:
                _fail(f"--window-ms {window_ms!r}: need 0 <= LO < HI")
            window = (lo, hi)
        client = None
        if llm:
            from solforge.agents.clients import make_client
            from solforge.agents.errors import ModelError
            from solforge.agents.settings import resolve_model_config

            try:
                client = make_client(resolve_model_config(model=llm, api=api, base_url=base_url,
                                                          api_key=api_key))
            except ModelError as e:
                _fail(str(e))
        config = SynthConfig(
            n=n, seed=seed, ops=names, max_ops=max_ops, references=list(reference),
            threshold=threshold, max_draws=max_draws,
            llm_n=(llm_n or n) if client is not None else 0,
            filters=FilterConfig(device=device, compile_check=not no_compile_check,
                                 window_ms=window))
        try:
            prepare(out, overwrite)
            with Progress(TextColumn("{task.description}"), BarColumn(),
                          TextColumn("{task.completed}/{task.total} kept"), TimeElapsedColumn(),
                          console=console, transient=not console.is_terminal) as prog:
                task = prog.add_task("synth", total=n)

                def on_draw(i: int, reason: str, kept: int) -> None:
                    prog.update(task, completed=kept, description=f"draw {i}: {reason}")

                batch = synthesize(config, on_draw=on_draw, client=client)
        except ValueError as e:
            _fail(str(e))
        files = write_batch(out, batch.accepted, batch.report(config))
        t = Table("reason", "count", "example", title=f"{batch.draws} draws, seed {seed}")
        for reason, count in sorted(batch.tally.counts.items(), key=lambda kv: -kv[1]):
            t.add_row(reason, str(count), escape(batch.tally.examples.get(reason, "")[:100]))
        console.print(t)
        console.print(f"wrote {len(files)} problem file(s), synth.jsonl and synth.report.json "
                      f"to {out}", soft_wrap=True)
        if len(files) < n:
            console.print(f"[yellow]only {len(files)} of {n} kept in {batch.draws} draws; "
                          "raise --max-draws or widen --ops[/yellow]")
            raise typer.Exit(1)
