"""The device profile: the ceilings a speed-of-light bound is computed against.

A profile comes from one of two places. ``solforge calibrate`` measures the device and stores
the result as JSON (``$SOLFORGE_CACHE/devices/<slug>.json``, default ``~/.cache/solforge``);
otherwise the datasheet table (``devices.py``) supplies figures for known GPUs. A stored
calibration wins over the table. An unknown device has no profile: one warning, and the
caller reports SOL as unknown.

Not covered: profiles shared between machines (the cache is local), invalidation when the
driver or PyTorch changes (a profile records the PyTorch version it was measured with;
re-run ``solforge calibrate`` after an upgrade), and MIG slices (see ``devices.py``).
"""

from __future__ import annotations

import os
import re
import tempfile
import warnings
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from solforge import env
from solforge.sol.devices import DeviceSpec, match_device

PROFILE_SCHEMA = "solforge.device/1"


class DeviceProfile(BaseModel):
    """The ceilings of one device: peak rate per unit, DRAM bandwidth, launch floor, cache."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(PROFILE_SCHEMA, alias="schema")
    name: str = Field(description="the device name PyTorch reports, or 'cpu'")
    source: Literal["table", "calibrated"]
    peaks_tflops: dict[str, float] = Field(
        description="dense peak per unit (fp32, tf32, bf16, fp16, fp8, int8, fp4) in TFLOP/s "
        "(TOP/s for int8); 'fp32' is the plain SIMT rate, also used for elementwise and "
        "reduction work")
    bandwidth_gbs: float = Field(description="DRAM bandwidth in GB/s (1e9 bytes), read + write")
    empty_kernel_ms: float | None = Field(
        None, description="device time of an empty kernel (CPU: of a trivial op call); the "
        "floor no measured call can go below. None for datasheet profiles")
    llc_bytes: int | None = Field(None, description="last-level cache (GPU L2, CPU L3) in bytes")
    measured_at: datetime | None = Field(None, description="when calibrated (None: datasheet)")
    torch_version: str | None = Field(None, description="PyTorch that measured it")
    host: str = Field("", description="what was measured: GPU properties, CPU model, threads")
    citation: str = Field("", description="datasheet the table figures come from")
    notes: list[str] = Field(default_factory=list, description="units skipped, and why")

    def peak(self, unit: str) -> float | None:
        """Peak rate of ``unit`` in TFLOP/s, or None if the device has no such unit."""
        rate = self.peaks_tflops.get(unit)
        return rate if rate and rate > 0 else None

    def to_json(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


def profile_from_spec(spec: DeviceSpec, device_name: str | None = None) -> DeviceProfile:
    """A datasheet profile for a table row (named as the device reports itself, if given)."""
    return DeviceProfile(
        name=device_name or spec.name, source="table", peaks_tflops=dict(spec.peaks_tflops),
        bandwidth_gbs=spec.bandwidth_gbs, llc_bytes=spec.l2_bytes,
        host=f"datasheet row {spec.name!r}", citation=spec.citation,
    )


def slug(device_name: str) -> str:
    """A file-name-safe form of a device name: 'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "device"


def profile_path(device_name: str) -> Path:
    return env.cache_dir() / "devices" / f"{slug(device_name)}.json"


def resolve_device_name(device: str) -> str:
    """Turn 'cuda', 'cuda:1', 'cpu' or 'cpu (...)' into the name profiles are stored under;
    other strings (a name PyTorch reported earlier) pass through unchanged."""
    d = device.strip()
    if d == "cpu" or d.startswith("cpu "):  # the evaluator's records say "cpu (x86_64)"
        return "cpu"
    if d == "cuda" or re.fullmatch(r"cuda:\d+", d):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r} asked for, but PyTorch sees no CUDA device")
        index = int(d.split(":")[1]) if ":" in d else torch.cuda.current_device()
        return torch.cuda.get_device_name(index)
    return d


def save_profile(profile: DeviceProfile, path: Path | None = None) -> Path:
    """Write ``profile`` as JSON (atomically) to ``path`` or its cache location."""
    path = Path(path) if path else profile_path(profile.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".profile-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        f.write(profile.model_dump_json(by_alias=True, indent=2))
    os.replace(tmp, path)
    return path


def read_profile(path: Path) -> DeviceProfile:
    return DeviceProfile.model_validate_json(Path(path).read_text())


_warned: set[str] = set()


def load_profile(device_name: str) -> DeviceProfile | None:
    """The ceilings of ``device_name``: a stored calibration, else the datasheet table, else
    None with one warning per device name (SOL is then unknown, never guessed)."""
    name = resolve_device_name(device_name)
    path = profile_path(name)
    if path.exists():
        try:
            return read_profile(path)
        except (ValidationError, ValueError) as e:
            _warn_once(f"bad:{path}", f"solforge: ignoring unreadable device profile {path} "
                       f"({e.__class__.__name__}); re-run `solforge calibrate`")
    spec = match_device(name)
    if spec is not None:
        return profile_from_spec(spec, name)
    where = "cuda" if name != "cpu" else "cpu"
    _warn_once(name, f"solforge: no speed-of-light ceilings for device {name!r} (not in the "
               f"datasheet table, no calibration stored at {path}); SOL is reported as unknown. "
               f"Run `solforge calibrate --device {where}` on that machine to measure it.")
    return None


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
