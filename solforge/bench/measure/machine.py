"""The machine a figure is measured on: the device's name and the library versions.

Both go into the evaluation record and into every cache key of a measured figure
(baselines, work counts), so a figure from another card or another torch is never reused.

Not covered: clocks, drivers and power limits (``solforge calibrate`` measures what the
device reaches; ``sol/profile.py``).
"""

from __future__ import annotations

import platform

import torch


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({platform.processor() or platform.machine()})"


def library_versions() -> dict[str, str]:
    v = {"torch": torch.__version__, "cuda": str(torch.version.cuda or "none")}
    try:
        import triton

        v["triton"] = triton.__version__
    except Exception:
        v["triton"] = "none"
    return v
