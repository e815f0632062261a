"""``solforge calibrate``: measure this machine's ceilings and store them for the evaluator.

    solforge calibrate                       # the GPU if there is one, else the CPU
    solforge calibrate --device cpu --json cpu.json

The profile lands in ``$SOLFORGE_CACHE/devices/<slug>.json`` (default ``~/.cache/solforge``),
where later evaluations find it before the datasheet table.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from solforge.sol.devices import match_device
from solforge.sol.profile import DeviceProfile, save_profile


def calibrate_command(
    device: str = typer.Option(None, "--device", help="cpu, cuda or cuda:N (default: cuda if "
                               "PyTorch sees a GPU, else cpu)"),
    json_file: Path = typer.Option(None, "--json", help="also write the profile to this file"),
    quick: bool = typer.Option(False, "--quick", help="smaller sizes: seconds, less exact"),
    save: bool = typer.Option(True, "--save/--no-save", help="store in the solforge cache"),
) -> None:
    """Measure the device's bandwidth, matmul peaks and empty-kernel time."""
    import torch

    from solforge.sol.calibrate import calibrate

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    console = Console()
    with console.status(f"calibrating {device} ..."):
        profile = calibrate(device, quick=quick)
    stored = save_profile(profile) if save else None
    if json_file:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(profile.to_json(), indent=2) + "\n")
    console.print(_table(profile))
    for note in profile.notes:
        console.print(f"[yellow]{note}[/yellow]")
    if stored:
        console.print(f"stored: {stored}")


def _table(profile: DeviceProfile) -> Table:
    spec = match_device(profile.name)
    table = Table(title=f"{profile.name} ({profile.host})")
    table.add_column("ceiling")
    table.add_column("measured", justify="right")
    table.add_column("datasheet", justify="right")
    table.add_column("ratio", justify="right")

    def row(label: str, value: float | None, sheet: float | None, fmt: str) -> None:
        ratio = f"{value / sheet:.0%}" if value and sheet else ""
        table.add_row(label, fmt.format(value) if value is not None else "-",
                      fmt.format(sheet) if sheet is not None else "", ratio)

    for unit, rate in profile.peaks_tflops.items():
        sheet = spec.peaks_tflops.get(unit) if spec else None
        row(f"{unit} {'TOP/s' if unit == 'int8' else 'TFLOP/s'}", rate, sheet, "{:,.2f}")
    row("DRAM GB/s (read + write)", profile.bandwidth_gbs, spec.bandwidth_gbs if spec else None,
        "{:,.1f}")
    us = profile.empty_kernel_ms * 1e3 if profile.empty_kernel_ms is not None else None
    row("empty kernel µs", us, None, "{:.2f}")
    mib = profile.llc_bytes / 2**20 if profile.llc_bytes else None
    row("last-level cache MiB", mib, spec.l2_bytes / 2**20 if spec else None, "{:.0f}")
    return table


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_command)
