"""`solforge extract MODEL`, `solforge apply RUN_OR_EXPORT SCRIPT` and `solforge validate MODEL
RUN_OR_EXPORT`: from a model to problems and back (the logic is in solforge/models/)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from solforge.cli.console import fmt, make_console
from solforge.models import MIN_SPEEDUP

console = make_console()

MODEL_HELP = ("a transformers model type (llama, qwen2, mixtral, gemma2, mistral, deepseek_v3, "
              "phi3, gpt2, bert, vit, clip, whisper, ...) built from its config with random "
              "weights, a config .json, a saved model folder, a torchvision name, or "
              "module:callable returning (nn.Module, example inputs)")
SET_HELP = "a config override KEY=VALUE (JSON value), e.g. --set hidden_size=1024; repeatable"


def _fail(msg: str, code: int = 2) -> None:
    console.print(f"[red]{escape(msg)}[/red]", soft_wrap=True)
    raise typer.Exit(code)


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        _fail(f"{flag} {text!r}: give positive integers, comma-separated (e.g. 1,8)")
    return values


def _modes(prefill: bool, decode: bool) -> list[str]:
    return [m for m, on in (("prefill", prefill), ("decode", decode)) if on] or ["prefill"]


def _build(model: str, sets: list[str], layers: int | None, dtype: str, device: str,
           batch: int, seq: int):
    from solforge.models.source import ModelSpecError, build_model, parse_dtype, parse_overrides

    try:
        overrides = parse_overrides(sets or [])
        if layers is not None:
            overrides["num_hidden_layers"] = layers
        return build_model(model, overrides, parse_dtype(dtype), device, batch=batch, seq=seq)
    except ModelSpecError as e:
        _fail(str(e))


def _model_failed(model: str, e: Exception, what: str) -> str:
    """One line for a model whose forward raised while solforge ran it: the error, the
    frame that raised it, and what usually causes it."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return (f"{what}: running {model} failed: {type(e).__name__}: {str(e)[:300]}{where}. "
            "When --set values were given, check that they agree with each other (head "
            "sizes, rotary dims, expert counts) and with the model's own defaults; a model "
            "that needs inputs solforge does not build is wrapped in a module:callable")


def register(app: typer.Typer) -> None:
    @app.command("extract")
    def extract(
        model: str = typer.Argument(..., help=MODEL_HELP),
        out: Path = typer.Option(..., "--out", help="folder for the problem files and "
                                 "extract.json"),
        sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
        layers: int = typer.Option(None, help="num_hidden_layers (a shortcut for --set)"),
        batch: str = typer.Option("1", help="batch sizes, comma-separated"),
        seq: str = typer.Option("128", help="sequence lengths (prefill tokens; the context "
                                "of a decode step), comma-separated"),
        prefill: bool = typer.Option(False, "--prefill", help="capture prefill steps"),
        decode: bool = typer.Option(False, "--decode", help="capture decode steps (one "
                                    "token after a prefill of --seq); neither flag: prefill"),
        dtype: str = typer.Option("float32", help="float32, bfloat16 or float16"),
        device: str = typer.Option("cpu", help="cpu or cuda"),
        backward: bool = typer.Option(False, "--backward", help="prefill steps are "
                                      "training steps: each module with something to "
                                      "differentiate also gets a backward problem "
                                      "(<name>_bwd: the gradients, given its outputs')"),
        name: str = typer.Option(None, help="prefix of the problem names (default: MODEL)"),
        as_json: bool = typer.Option(False, "--json", help="print the manifest as JSON"),
    ) -> None:
        """Capture a model's repeated modules and fused regions with their real shapes,
        write one problem file per distinct module (one workload per shape) ranked by its
        share of the model's time, and extract.json. Optimise them with `solforge optimize
        OUT`; the planner weighs each by its share, and an untried one also by how far the
        model ran it from its speed of light ("of SOL": the bound over the measured time,
        where the device has ceilings)."""
        from solforge.models.extract import Step
        from solforge.models.extract import extract as run_extract
        from solforge.models.source import ModelSpecError

        if backward and "prefill" not in _modes(prefill, decode):
            # said before the model is built: a default-sized one takes minutes and GBs
            _fail("--backward needs a prefill step (a training step runs the whole "
                  "sequence): add --prefill")
        batches, seqs = _ints(batch, "--batch"), _ints(seq, "--seq")
        built = _build(model, sets, layers, dtype, device, max(batches), max(seqs))
        steps = [Step(m, b, s) for m in _modes(prefill, decode) for b in batches for s in seqs]
        try:
            manifest = run_extract(built, steps, out, tag=name, backward=backward)
        except ModelSpecError as e:
            _fail(str(e))
        except Exception as e:  # the model's own code failed on these sizes
            _fail(_model_failed(model, e, "extract"))
        if as_json:
            typer.echo(json.dumps(manifest, indent=1))
            return
        t = Table(title=f"{model}: {len(manifest['problems'])} problem(s) in {out}; "
                        f"{manifest['covered_share']:.1%} of the model's time covered")
        for col in ("problem", "dir", "class", "modules", "workloads (calls)", "share",
                    "of SOL"):
            t.add_column(col, justify="right" if col in ("share", "of SOL") else "left")
        for p in manifest["problems"]:
            roof = (p.get("roofline") or {}).get("fraction")
            t.add_row(p["name"], "bwd" if p["direction"] == "backward" else "fwd",
                      p["class"].rsplit(".", 1)[-1], str(len(p["paths"])),
                      ", ".join(f"{k} ({v['calls']})" for k, v in p["workloads"].items()),
                      f"{p['share']:.1%}", "-" if roof is None else f"{roof:.0%}")
        console.print(t)
        if manifest["skipped"]:
            console.print(f"{len(manifest['skipped'])} module(s) left out (why: "
                          f"{out / 'extract.json'}, 'skipped')")
        for k, v in manifest["steps"].items():
            console.print(f"{k}: {fmt(v['ms'], ' ms')} per step")

    @app.command("apply", context_settings={"allow_extra_args": True,
                                            "ignore_unknown_options": True})
    def apply_cmd(
        ctx: typer.Context,
        source: Path = typer.Argument(..., help="a run directory or an export"),
        script: Path = typer.Argument(..., help="a Python script that builds and runs a "
                                      "model; its own arguments follow it"),
        report: Path = typer.Option(None, help="write the patched modules' call counts "
                                    "(JSON) here"),
        min_speedup: float = typer.Option(MIN_SPEEDUP, "--min-speedup", min=0,
                                          help="swap a kept solution in only for the "
                                          "shapes its record measured at least this many "
                                          "times as fast as the original module (0: every "
                                          "verified shape)"),
    ) -> None:
        """Run SCRIPT with the kept solutions of SOURCE swapped into each model it calls,
        for the shapes and dtypes each was verified on (other calls fall back to the
        original module, counted). In Python: solforge.apply(model, SOURCE)."""
        from solforge.models.apply import ApplyError
        from solforge.models.script import run_script

        if not script.is_file():
            _fail(f"{script}: no such script")
        try:
            result = run_script(source, script, list(ctx.args), min_speedup=min_speedup)
        except ApplyError as e:
            _fail(str(e))
        data = result.report()
        if report:
            report.write_text(json.dumps(data, indent=1))
        for entry in data:
            patched = sum(m["patched"] for m in entry["modules"].values())
            fallback = sum(m["fallback"] for m in entry["modules"].values())
            typer.echo(f"solforge apply: {entry['model']}: {len(entry['modules'])} module(s) "
                       f"patched; {patched} call(s) ran a kept solution, {fallback} fell "
                       f"back; {len(entry['refused'])} refused", err=True)
        if not data:
            typer.echo("solforge apply: no model the script called holds the modules of "
                       f"the kept solutions in {source}", err=True)
        raise typer.Exit(result.exit_code)

    @app.command("validate")
    def validate_cmd(
        model: str = typer.Argument(..., help=MODEL_HELP + " (as given to extract)"),
        source: Path = typer.Argument(..., help="a run directory or an export"),
        sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
        layers: int = typer.Option(None, help="num_hidden_layers (a shortcut for --set)"),
        batch: int = typer.Option(1, min=1, help="batch size"),
        seq: int = typer.Option(128, min=1, help="sequence length"),
        prefill: bool = typer.Option(False, "--prefill", help="validate prefill steps"),
        decode: bool = typer.Option(False, "--decode", help="validate decode steps"),
        dtype: str = typer.Option("float32", help="float32, bfloat16 or float16"),
        device: str = typer.Option("cpu", help="cpu or cuda"),
        tokens: Path = typer.Option(None, help="a text file for the perplexity ratio: "
                                    "whitespace-separated token ids, or any other text read "
                                    "as UTF-8 bytes (a model with a byte vocabulary)"),
        gen_steps: int = typer.Option(16, min=0, help="greedy tokens compared (causal LMs)"),
        rounds: int = typer.Option(5, min=1, help="interleaved latency rounds"),
        per_module: bool = typer.Option(True, help="the drift of each problem's modules "
                                        "patched alone"),
        max_kl: float = typer.Option(None, help="fail (exit 1) when a step's mean KL is "
                                     "above this"),
        min_top1: float = typer.Option(None, help="fail when a step's top-1 agreement is "
                                       "below this"),
        max_ppl_ratio: float = typer.Option(None, help="fail when patched/original "
                                            "perplexity is above this"),
        as_json: Path = typer.Option(None, "--json", help="write the report here"),
        skip: list[str] = typer.Option(None, "--skip", help="a problem whose kept solution "
                                       "stays out of the model (repeatable): one whose "
                                       "module a report showed slower in the model"),
        min_speedup: float = typer.Option(MIN_SPEEDUP, "--min-speedup", min=0,
                                          help="swap a kept solution in only for the "
                                          "shapes its record measured at least this many "
                                          "times as fast as the original module (0: every "
                                          "verified shape)"),
    ) -> None:
        """Compare the original model with the patched one on the same inputs: logits
        drift (max/mean abs diff, KL mean and 99.9th percentile, top-1, same-top-p), the
        drift of each patched problem alone with the precision its kernel lowers,
        perplexity ratio (--tokens), greedy-token agreement, and interleaved latency."""
        import solforge
        from solforge.models.apply import ApplyError
        from solforge.models.validate import check, read_tokens, validate

        built = _build(model, sets, layers, dtype, device, batch, seq)
        from solforge.models.apply import kept_solutions

        try:
            kept = kept_solutions(source)
        except ApplyError as e:
            _fail(str(e))
        if not kept:
            _fail(f"{source} holds no passed solution of a problem `solforge extract` wrote")
        unknown = sorted(set(skip or []) - {k.problem for k in kept})
        if unknown:
            _fail(f"--skip {', '.join(unknown)}: {source} keeps no solution of that problem "
                  f"(it keeps: {', '.join(sorted(k.problem for k in kept))})")
        kept = [k for k in kept if k.problem not in set(skip or [])]
        if not kept:
            _fail("--skip leaves no kept solution to apply")
        patch = solforge.apply(built.model, kept, min_speedup=min_speedup)
        if not patch.modules:
            _fail(f"no module of {model} was patched from {source} ("
                  f"{len(patch.refused)} refused: {list(patch.refused.items())[:3]}); build "
                  "the model with the --set values extract was given, or lower "
                  "--min-speedup")
        try:
            toks = read_tokens(tokens, built.vocab_size) if tokens else None
            report = validate(built, patch, _modes(prefill, decode), batch, seq, tokens=toks,
                              gen_steps=gen_steps, rounds=rounds, per_module=per_module)
        except ValueError as e:
            _fail(str(e))
        except Exception as e:
            _fail(_model_failed(model, e, "validate"))
        report["refused"] = dict(patch.refused)
        report["min_speedup"] = min_speedup
        bad = check(report, max_kl=max_kl, min_top1=min_top1, max_ppl_ratio=max_ppl_ratio)
        report["failed"] = bad
        if as_json:
            as_json.write_text(json.dumps(report, indent=1))
        _print_report(report)
        for what, why in patch.refused.items():
            console.print(f"[yellow]not patched[/yellow] {escape(what)}: {escape(why)}")
        for b in bad:
            console.print(f"[red]FAIL[/red] {escape(b)}")
        if bad:
            raise typer.Exit(1)


def _print_report(r: dict) -> None:
    t = Table(title=f"{r['model']}: patched against original (batch {r['batch']}, "
                    f"seq {r['seq']})")
    for col in ("step", "max |diff|", "mean |diff|", "KL mean", "KL p99.9", "top-1",
                "same top-p", "original ms", "patched ms", "speedup", "graphed speedup"):
        t.add_column(col, justify="left" if col == "step" else "right")
    for mode, d in r["drift"].items():
        lat = r["latency"].get(mode, {})
        graphed = lat.get("graphed") or {}
        t.add_row(mode, fmt(d["max_abs_diff"]), fmt(d["mean_abs_diff"]),
                  fmt(d.get("kl_mean")), fmt(d.get("kl_p999")),
                  fmt(d.get("top1_agreement"), digits=4), fmt(d.get("same_top_p"), digits=4),
                  fmt(lat.get("original_ms")), fmt(lat.get("patched_ms")),
                  fmt(lat.get("speedup"), "x"), fmt(graphed.get("speedup"), "x"))
    console.print(t)
    for mode, lat in r["latency"].items():
        graphed = lat.get("graphed") or {}
        if "skipped" in graphed:
            console.print(f"[yellow]{mode}: {escape(graphed['skipped'])}[/yellow]")
        elif graphed.get("original_ms") and lat.get("original_ms"):
            console.print(f"{mode}: eager {lat['original_ms']:.3g} ms of wall time, "
                          f"{graphed['original_ms']:.3g} ms replayed from a CUDA graph "
                          f"(device time; patched {graphed['patched_ms']:.3g} ms)")
    if r.get("module_costs"):
        c = Table(title="each patched module alone, per call (us)")
        for col in ("problem", "input shapes", "original host", "original device",
                    "patched host", "patched device"):
            c.add_column(col, justify="left" if col in ("problem", "input shapes") else "right")
        for name, e in r["module_costs"].items():
            for row in e["signatures"]:
                shapes = " ".join("x".join(map(str, s)) for _, s, _ in row["signature"])
                if "skipped" in row:
                    c.add_row(name, shapes, escape(row["skipped"][:60]), "", "", "")
                    continue
                o, p = row["original"], row["patched"]
                c.add_row(name, shapes, fmt(o["host_us"]), fmt(o["device_us"]),
                          fmt(p["host_us"]), fmt(p["device_us"]))
        console.print(c)
    if r["per_module"]:
        m = Table(title="each problem patched alone")
        for col in ("problem", "modules", "lowered precision", "step", "KL mean",
                    "max |diff|", "top-1"):
            m.add_column(col)
        for name, e in r["per_module"].items():
            for mode, d in e["drift"].items():
                m.add_row(name, str(len(e["paths"])), ", ".join(e["lowered_precision"]) or
                          "none", mode, fmt(d.get("kl_mean")), fmt(d["max_abs_diff"]),
                          fmt(d.get("top1_agreement"), digits=4))
        console.print(m)
    calls = r.get("calls", {})
    if calls and not sum(c["patched"] for c in calls.values()):
        console.print("[yellow]no call ran a kept solution: the model's shapes or dtypes "
                      "differ from those the solutions were verified on (--batch, --seq, "
                      "--dtype as extracted; the report's calls list the signatures)[/yellow]")
    console.print(f"calls: {sum(c['patched'] for c in calls.values())} ran a kept solution, "
                  f"{sum(c['fallback'] for c in calls.values())} fell back; share of the "
                  f"model's time patched: {r.get('share_patched')}")
    if "perplexity" in r:
        p = r["perplexity"]
        console.print(f"perplexity {p['original']:.4g} -> {p['patched']:.4g} "
                      f"(ratio {p['ratio']:.5f})")
    if "generation" in r:
        g = r["generation"]
        console.print(f"greedy {g['steps']} steps: token agreement "
                      f"{g['token_agreement']:.4f}, first divergence {g['first_divergence']}")
