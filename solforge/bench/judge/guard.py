"""The evaluator checks that its own files have not changed under it.

A candidate that runs as the evaluator's user (no root to drop, or a GPU run that keeps
the uid) can write to the installed package. The judge has its modules in memory
already, but the next judge, the next runner, or its compile workers would load what was
written. So the judge takes a manifest of what it trusts when it starts, and compares
after every evaluation (``bench/judge/process.py``): any difference marks that evaluation
``REWARD_HACK`` (``evaluator_tampered``), and the judge refuses to evaluate anything
else: it can no longer trust its own code.

What the manifest covers:

- solforge's verdict-making subpackages (``bench``, ``sol``, ``problems``, ``kernels``
  and the package ``__init__``): every file's content hash and its inode change time
  (``ctime``: a write-then-restore still moves it, and only the kernel sets it);
- problem files evaluated so far (:meth:`FileGuard.add`), the same way (a problem file
  that disappears is not a change: a caller may delete the temporary problems it made);
- torch's and triton's importable files, by (size, mtime, ctime, inode): cheap, and a
  write or a new file (a ``.so`` shadowing a ``.py``) shows;
- bytecode: ``__pycache__`` files are written legitimately whenever some process
  imports a module for the first time, so a new or changed ``.pyc`` is accepted only if
  its code is exactly what its source compiles to (a poisoned ``.pyc`` carrying the
  source's timestamp would otherwise be loaded instead of the unchanged source);
- interpreter start-up hooks: ``*.pth``, ``sitecustomize.py`` and ``usercustomize.py``
  in the site directories.

The caller computes the digest of the solforge part before it starts the judge and the
judge refuses to start if its own differs (files changed between the two).

Not covered: other libraries, the interpreter and shared libraries outside torch and
triton, files changed before the caller started (nothing to compare with: reinstall), and
a change made and undone while no check runs that leaves content *and* ctime as they were
(ctime cannot be set back without changing the system clock, which needs root with
capabilities: hardened runners have none).
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import site
from pathlib import Path

import solforge

# what a verdict depends on: the evaluator and the layers below it (docs/ARCHITECTURE.md)
GUARDED_SUBPACKAGES = ("bench", "sol", "problems", "kernels", "records")
GUARDED_FILES = ("__init__.py", "env.py")
_IMPORTABLE = (".py", ".so", ".pyd", ".pth", ".pyc")
_HOOK_FILES = ("sitecustomize.py", "usercustomize.py")

Signature = tuple


class EvaluatorTampered(RuntimeError):
    """The evaluator's own files changed: no further verdict can be trusted."""


def package_roots() -> list[Path]:
    """The solforge directories (and files) whose contents the verdict depends on."""
    base = Path(solforge.__file__).resolve().parent
    return [*(base / f for f in GUARDED_FILES), *(base / sub for sub in GUARDED_SUBPACKAGES)]


def library_roots() -> list[Path]:
    roots = []
    for name in ("torch", "triton"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            roots.append(Path(spec.origin).resolve().parent)
    return roots


def hook_dirs() -> list[Path]:
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if isinstance(user, str):
        dirs.append(user)
    return [Path(d) for d in dirs if Path(d).is_dir()]


def _files(root: Path, suffixes: tuple[str, ...] | None) -> list[Path]:
    if root.is_file():
        return [root]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("include", "share", "test")]
        for f in filenames:
            if suffixes is None or f.endswith(suffixes):
                out.append(Path(dirpath) / f)
    return out


def _stat(p: Path) -> tuple[int, int, int, int]:
    st = p.stat()
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _content(p: Path) -> Signature:
    return (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_ctime_ns)


def pyc_matches_source(pyc: Path) -> bool:
    """Whether a cached bytecode file holds exactly what its source compiles to (an orphan
    ``.pyc``, whose source is gone, is never imported from ``__pycache__``: fine)."""
    try:
        source = Path(importlib.util.source_from_cache(str(pyc)))
    except ValueError:
        return False
    if not source.exists():
        return True
    try:
        data = pyc.read_bytes()
        if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
            return True  # another interpreter's bytecode: this one never loads it
        code = marshal.loads(data[16:])
        opt = 0
        if ".opt-" in pyc.name:
            opt = int(pyc.name.split(".opt-")[1].split(".")[0])
        want = compile(source.read_bytes(), str(source), "exec", dont_inherit=True,
                       optimize=opt)
        return code == want
    except Exception:
        return False


class FileGuard:
    """A manifest of the evaluator's files and a way to compare the disk with it."""

    def __init__(self, roots: list[Path] | None = None, libraries: list[Path] | None = None,
                 hooks: list[Path] | None = None) -> None:
        self.roots = package_roots() if roots is None else list(roots)
        self.libraries = library_roots() if libraries is None else list(libraries)
        self.hooks = hook_dirs() if hooks is None else list(hooks)
        self.extra: list[Path] = []
        self.manifest = self._scan()

    # -- scanning --------------------------------------------------------------------------
    def _scan(self) -> dict[str, Signature]:
        m: dict[str, Signature] = {}
        for root in [*self.roots, *self.extra]:
            for p in _files(root, None):
                if p.suffix == ".pyc" or "__pycache__" in p.parts:
                    self._pyc(m, p)
                else:
                    self._put(m, p, _content)
        for root in self.libraries:
            for p in _files(root, _IMPORTABLE):
                if p.suffix == ".pyc":
                    self._pyc(m, p)
                else:
                    self._put(m, p, _stat)
        for d in self.hooks:
            for p in [*d.glob("*.pth"), *(d / f for f in _HOOK_FILES)]:
                if p.is_file():
                    self._put(m, p, _content)
        return m

    @staticmethod
    def _put(m: dict[str, Signature], p: Path, how) -> None:
        try:
            m[str(p)] = how(p)
        except OSError:
            pass

    def _pyc(self, m: dict[str, Signature], p: Path) -> None:
        try:
            m[str(p)] = ("pyc", *_stat(p))
        except OSError:
            pass

    def add(self, path: Path) -> None:
        """Guard one more file (a problem file the judge has loaded)."""
        path = Path(path).resolve()
        if str(path) not in self.manifest and path.is_file():
            self.extra.append(path)
            self._put(self.manifest, path, _content)

    # -- checking --------------------------------------------------------------------------
    def changed(self) -> list[str]:
        """Files added, removed or modified since the manifest was taken (new or rewritten
        bytecode that matches its source is accepted into the manifest instead)."""
        now = self._scan()
        out = []
        for path in sorted(set(now) | set(self.manifest)):
            old, new = self.manifest.get(path), now.get(path)
            if old == new:
                continue
            if new is not None and new[0] == "pyc" and pyc_matches_source(Path(path)):
                self.manifest[path] = new
                continue
            if new is None and old is not None and (old[0] == "pyc" or Path(path) in self.extra):
                # a cache entry, or a problem file its caller cleaned up: nothing loads it
                self.manifest.pop(path)
                continue
            what = "added" if old is None else "removed" if new is None else "modified"
            out.append(f"{path} ({what})")
        return out

    def digest(self) -> str:
        """A hash of the solforge part of the manifest (what the caller compares)."""
        h = hashlib.sha256()
        guarded = [str(r) for r in self.roots]
        for path in sorted(self.manifest):
            sig = self.manifest[path]
            if sig[0] != "pyc" and any(path.startswith(r) for r in guarded):
                h.update(f"{path}\0{sig[0]}\n".encode())
        return h.hexdigest()


def solforge_digest() -> str:
    """The digest the caller hands to a judge it starts (solforge's files only)."""
    return FileGuard(libraries=[], hooks=[]).digest()


def describe(changed: list[str], limit: int = 8) -> str:
    more = f" and {len(changed) - limit} more" if len(changed) > limit else ""
    return ("the evaluator's own files changed during this evaluation: "
            + "; ".join(changed[:limit]) + more
            + ". No further verdict can be trusted: reinstall solforge (and torch/triton if "
              "they are named) and start a new evaluator.")


__all__ = ["EvaluatorTampered", "FileGuard", "describe", "package_roots",
           "pyc_matches_source", "solforge_digest"]
