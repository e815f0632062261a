"""``solforge apply RUN_OR_EXPORT SCRIPT [ARGS]``: a model script run with the kept solutions
swapped into every model it calls.

The script runs in this process (``runpy``, as ``python SCRIPT ARGS`` would, ``__name__``
``"__main__"``) with one global forward pre-hook: the first time a module is called at the
top (no other module's forward in flight), it is patched with :func:`apply.apply` when it
holds every module path of at least one kept problem, with the class that problem names;
other modules are left alone and never looked at again. The patches stay for the script's
life; :class:`ScriptResult` holds each patched model's counts.

Not covered: scripts that spawn processes (the children are not patched) and models whose
first call happens under ``torch.compile`` before any eager call (the hook is then traced
once, at the compiled call, which is when the patch lands).
"""

from __future__ import annotations

import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.nn as nn
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)

from solforge.models import MIN_SPEEDUP
from solforge.models.apply import Kept, Patch, apply, kept_solutions


@dataclass
class ScriptResult:
    patches: list[Patch] = field(default_factory=list)
    exit_code: int = 0

    def report(self) -> list[dict[str, Any]]:
        return [{"model": type(p.model).__name__, "modules": p.stats(), "refused": p.refused}
                for p in self.patches]


def _fits(module: nn.Module, kept: list[Kept]) -> bool:
    named = {n: f"{type(m).__module__}.{type(m).__qualname__}"
             for n, m in module.named_modules()}
    return any(all(named.get(p) == k.extracted.get("class")
                   for p in k.extracted.get("module_paths", []))
               for k in kept)


def run_script(source: str | Path, script: Path, argv: list[str],
               min_speedup: float = MIN_SPEEDUP) -> ScriptResult:
    """Run ``script`` with ``argv`` (module docstring); its exit status is kept.
    ``min_speedup``: as :func:`apply.apply`'s."""
    kept = kept_solutions(source)
    result = ScriptResult()
    seen: set[int] = set()
    depth = [0]

    def pre(module: nn.Module, args: tuple) -> None:
        if depth[0] == 0 and id(module) not in seen:
            seen.add(id(module))
            if _fits(module, kept):
                result.patches.append(apply(module, kept, min_speedup=min_speedup))
        depth[0] += 1

    def post(module: nn.Module, args: tuple, out: Any) -> None:
        depth[0] = max(0, depth[0] - 1)

    handles = [register_module_forward_pre_hook(pre), register_module_forward_hook(post)]
    old_argv = sys.argv
    sys.argv = [str(script), *argv]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        result.exit_code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old_argv
        for h in handles:
            h.remove()
    return result
