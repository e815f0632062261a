"""What a CPU runner forked from the runner zygote (``zygote.py``) must not inherit from it:
module state that holds a path of the zygote's own directories (its working directory,
HOME, TMPDIR and build caches at import). Left there, a forked runner would write its
caches into the zygote's directory, or read files from it, instead of its own.

:func:`stray_paths` finds such state (the zygote checks itself once, after its imports,
and refuses to fork when any is found outside :data:`REPOINTED`); :func:`repoint` points
the places of :data:`REPOINTED` at a child's own directory, in the child, after the fork.
It also gives the child's NumPy generator a fresh seed (Python's ``random`` reseeds
itself after a fork).

Not covered: state that holds such a path in a form the scan does not read (computed by a
property, or deeper than ``depth`` containers): the scan reads module globals and what
they hold without running any of their code.
"""

from __future__ import annotations

import linecache
import os
import sys
import tempfile
import types
from collections import deque
from pathlib import PurePath
from typing import Any

# Module state that keeps a path of the zygote's directories (its working directory at
# import, or HOME, TMPDIR and the build caches), pointed at the child's own in every child
# (``repoint``); anywhere else, the zygote refuses (``unfit``). Torch's config modules
# take some defaults from the working directory (``debug_dir_root``, ``cutlass_dir``).
REPOINTED = ("sys.path", "sys.argv", "sys.orig_argv", "sys.path_importer_cache", "os.environ",
             "posix.environ", "site.USER_BASE", "site.USER_SITE", "sysconfig._CONFIG_VARS",
             "multiprocessing.process.ORIGINAL_DIR", "torch._dynamo.package.DynamoCache",
             "inspect.modulesbyfile", "inspect._filesbymodname", "linecache.cache")
# ... and places that follow ``sys.path`` by themselves: a namespace package's path is
# computed again when the parent path it was computed from changes
FOLLOWS_SYS_PATH = ".__path__._last_parent_path"


def stray_paths(own_dir: str) -> list[str]:
    """Where module state holds a path of ``own_dir`` (as given, or resolved: the
    working directory's spelling) that no child points at its own."""
    return [p for d in spellings(own_dir) for p in kept_paths(d)
            if not p.startswith(REPOINTED) and not p.endswith(FOLLOWS_SYS_PATH)
            and not _config_default(p)]


def spellings(path: str) -> list[str]:
    return list(dict.fromkeys((path, os.path.realpath(path))))


def _config_default(place: str) -> bool:
    """Whether ``place`` is the default of an entry of a torch config module (those
    ``repoint`` rewrites)."""
    module, sep, rest = place.partition("._config.")
    return bool(sep) and rest.endswith(".default") and _is_config_module(
        sys.modules.get(module))


def _is_config_module(module: Any) -> bool:
    config = sys.modules.get("torch.utils._config_module")
    return config is not None and isinstance(module, config.ConfigModule)


def kept_paths(needle: str, depth: int = 5) -> list[str]:
    """Where the modules' state holds a string (or path) containing ``needle``: module
    globals and what they hold, ``depth`` levels down (containers, instances' own
    attributes, read without running any code of theirs: no lazy import is triggered)."""
    found: list[str] = []
    seen: set[int] = set()
    paths = (str, bytes, PurePath)
    containers = (list, tuple, set, frozenset, deque)

    def walk(obj: Any, where: str, left: int) -> None:
        kind = type(obj)
        if issubclass(kind, paths):
            text = obj if kind is str else os.fsdecode(obj)
            if needle in text:
                found.append(where)
            return
        if left <= 0 or id(obj) in seen or issubclass(kind, (types.ModuleType, type)):
            return
        seen.add(id(obj))
        if issubclass(kind, dict):
            for k, v in list(dict.items(obj)):
                walk(k, where, left - 1)
                walk(v, f"{where}.{k}" if type(k) is str else where, left - 1)
        elif issubclass(kind, containers):
            for v in list(obj):
                walk(v, where, left - 1)
        else:
            try:
                attrs = object.__getattribute__(obj, "__dict__")
            except Exception:  # noqa: BLE001 - no instance dictionary (or a refusing one)
                return
            if type(attrs) is dict:
                walk(attrs, where, left - 1)

    for name, module in list(sys.modules.items()):
        try:
            attrs = object.__getattribute__(module, "__dict__")
        except Exception:  # noqa: BLE001 - not a module-like object
            continue
        if type(attrs) is not dict:
            continue
        for k, v in list(dict.items(attrs)):
            if k.startswith("__") and k not in ("__path__", "__file__"):
                continue
            walk(v, f"{name}.{k}", depth)
    return found


def repoint(workdir: str, old: str) -> None:
    """Point the :data:`REPOINTED` state of this (forked) child, which holds the zygote's
    directory ``old``, at the child's own ``workdir``."""
    import site
    import sysconfig

    pairs = list(zip(spellings(old), spellings(workdir), strict=False))
    for was, now in pairs:
        sys.path[:] = [now if p == was else p for p in sys.path]
        sys.path_importer_cache.pop(was, None)
    site.USER_BASE = None
    site.USER_SITE = None
    site.getusersitepackages()  # computed again from this child's HOME
    cfg = getattr(sysconfig, "_CONFIG_VARS", None)
    if isinstance(cfg, dict) and "userbase" in cfg:
        cfg["userbase"] = site.USER_BASE
    tempfile.tempdir = None
    linecache.clearcache()  # caches keyed by file paths (a relative name joins the cwd)
    inspect = sys.modules.get("inspect")
    if inspect is not None:
        inspect.modulesbyfile.clear()  # type: ignore[attr-defined]
        inspect._filesbymodname.clear()  # type: ignore[attr-defined]
    mp = sys.modules.get("multiprocessing.process")
    if mp is not None:
        mp.ORIGINAL_DIR = os.getcwd()  # type: ignore[attr-defined]
    for module in list(sys.modules.values()):
        if _is_config_module(module):
            for entry in module._config.values():
                for was, now in pairs:
                    if isinstance(entry.default, str) and was in entry.default:
                        entry.default = entry.default.replace(was, now)
            if hasattr(module, "_is_dirty"):
                module._is_dirty = True
    package = sys.modules.get("torch._dynamo.package")
    cache = getattr(package, "DynamoCache", None)
    if cache is not None:
        package.DynamoCache = type(cache)(os.path.join(  # type: ignore[union-attr]
            package.cache_dir(), "dynamo"))  # type: ignore[union-attr]
    np = sys.modules.get("numpy")
    if np is not None:  # its global generator was seeded once, in the zygote
        np.random.seed()
