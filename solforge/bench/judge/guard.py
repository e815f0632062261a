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
_PYCACHE = f"{os.sep}__pycache__{os.sep}"

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


_SKIPPED_DIRS = ("include", "share", "test")


class _Tree:
    """Lists the files under the guarded roots and hashes their contents, re-reading only
    what moved since the last scan: a directory is listed again when its own (mtime,
    ctime, inode) changed, which adding, removing or renaming an entry always does, and a
    file is hashed again when its (size, mtime, ctime, inode) changed, which any write
    does (``ctime`` cannot be set back: the module docstring). Every scan still stats
    every directory and every file, so what is detected is what a full re-read would
    detect; the re-reading is what is saved (a judge checks after each phase of every
    evaluation: about 60 ms a check over torch's and triton's 5,000 files, before)."""

    def __init__(self) -> None:
        self._dirs: dict[str, tuple[tuple[int, int, int], list[str], list[str]]] = {}
        self._hashes: dict[str, tuple[tuple[int, int, int, int], str]] = {}

    def files(self, root: Path | str, suffixes: tuple[str, ...] | None) -> list[str]:
        """Every file under ``root`` (itself, if a file) whose name ends in one of
        ``suffixes`` (any, if None). As ``os.walk``: symbolic links to directories are not
        followed; ``include``, ``share`` and ``test`` directories are skipped."""
        top = str(root)
        if os.path.isfile(top):
            return [top]
        out: list[str] = []
        stack = [top]
        while stack:
            d = stack.pop()
            try:
                st = os.stat(d)
            except OSError:
                continue
            sig = (st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            seen = self._dirs.get(d)
            if seen is None or seen[0] != sig:
                names: list[str] = []
                subdirs: list[str] = []
                try:
                    with os.scandir(d) as it:
                        for e in it:
                            try:
                                is_dir = e.is_dir()
                            except OSError:
                                is_dir = False
                            if not is_dir:
                                names.append(e.path)
                            elif e.name not in _SKIPPED_DIRS and not e.is_symlink():
                                subdirs.append(e.path)
                except OSError:
                    self._dirs.pop(d, None)
                    continue
                seen = self._dirs[d] = (sig, names, subdirs)
            stack.extend(seen[2])
            out.extend(f for f in seen[1] if suffixes is None or f.endswith(suffixes))
        return out

    def content(self, path: str) -> Signature:
        """(sha256 of the bytes, ctime): hashed again only if the file's stat moved."""
        st = os.stat(path)
        key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        known = self._hashes.get(path)
        if known is None or known[0] != key:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            after = os.stat(path)  # written while read: hash again at the next scan
            if (after.st_size, after.st_mtime_ns, after.st_ctime_ns, after.st_ino) != key:
                self._hashes.pop(path, None)
                return (digest, after.st_ctime_ns)
            known = self._hashes[path] = (key, digest)
        return (known[1], st.st_ctime_ns)


def _stat(p: Path | str) -> tuple[int, int, int, int]:
    st = os.stat(p)
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


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
        self._tree = _Tree()
        self.manifest = self._scan()

    # -- scanning --------------------------------------------------------------------------
    def _scan(self) -> dict[str, Signature]:
        m: dict[str, Signature] = {}
        tree = self._tree
        for root in [*self.roots, *self.extra]:
            for p in tree.files(root, None):
                if p.endswith(".pyc") or _PYCACHE in p:
                    self._pyc(m, p)
                else:
                    self._put(m, p, tree.content)
        for root in self.libraries:
            for p in tree.files(root, _IMPORTABLE):
                if p.endswith(".pyc"):
                    self._pyc(m, p)
                else:
                    self._put(m, p, _stat)
        for d in self.hooks:
            for p in [*d.glob("*.pth"), *(d / f for f in _HOOK_FILES)]:
                if p.is_file():
                    self._put(m, str(p), tree.content)
        return m

    @staticmethod
    def _put(m: dict[str, Signature], p: str, how) -> None:
        try:
            m[p] = how(p)
        except OSError:
            pass

    def _pyc(self, m: dict[str, Signature], p: str) -> None:
        try:
            m[p] = ("pyc", *_stat(p))
        except OSError:
            pass

    def add(self, path: Path) -> None:
        """Guard one more file (a problem file the judge has loaded)."""
        path = Path(path).resolve()
        if str(path) not in self.manifest and path.is_file():
            self.extra.append(path)
            self._put(self.manifest, str(path), self._tree.content)

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
