"""Build caches of one candidate: Triton's, torch extensions', inductor's, CuTe DSL's and
NVRTC's.

A runner's caches live in its own working directory (``<workdir>/cache``, the only
place its filesystem view lets it write besides its temporary directory; see
``fsview.py``), so no candidate reads or writes another's compiled kernels or autotuning
choices. They are kept per candidate, keyed by the solution file's content: before the
runner serves a candidate the judge copies that candidate's cache in (:func:`seed`), and
after the runner is killed copies it back (:func:`keep`). So an ahead-of-time build
(the builder runner, with the GPU hidden) is not compiled again by the runner that
evaluates, nor is a winner re-measured in a fresh runner.

Copies, not shared mounts: the judge never lets a live runner reach the store, and what
it copies back are regular files and links as links (a link is followed later only with
the next runner's own permissions). A cache over :data:`KEEP_MB` is not kept (the next
runner of that candidate compiles again).

Absolute paths: what the compilers cache names the runner that built it. TorchInductor's
cached output code sets ``os.environ['TRITON_CACHE_DIR']`` (and its own cache directory) to
the building runner's paths, so a fresh runner that loaded it sent Triton to a directory
its view makes read-only: ``OSError: [Errno 30] Read-only file system:
'/tmp/solforge-runner-…'`` at the first call, and a winner compiled with ``torch.compile``
failed its re-measurement (H100, session 18). :func:`keep` records the building runner's
working directory beside the store (``ORIGIN``) and :func:`seed` rewrites it, byte for byte,
to the new runner's in every copied file and link target. Both are ``mkdtemp`` names of one
length in one temporary directory, so a pickled or compiled string keeps its length and
every length prefix stays right.

Not covered: disk space across candidates (one store per candidate is never pruned; the
cache root can be removed at any time); a candidate's own cache poisoned by itself (its
code decides its kernels anyway); runners whose working directories differ in length (a
store kept under another temporary directory): their paths are left as they are, and a
compiler that follows one recompiles or fails as before.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

from solforge import env

KEEP_MB = 2048
# beside a store: the working directory of the runner whose cache it is
ORIGIN = ".origin"


def key(solution: Path) -> str:
    """The store's name for a candidate: its file's content hash."""
    return hashlib.sha256(Path(solution).read_bytes()).hexdigest()[:24]


def store(candidate: str) -> Path:
    return env.cache_dir() / "candidates" / candidate


def _size_mb(root: Path) -> float:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total / (1 << 20)


def _chown(root: Path, uid: int) -> None:
    for p in [root, *root.rglob("*")]:
        try:
            os.chown(p, uid, uid, follow_symlinks=False)
        except OSError:
            pass


def _special(dirpath: str, names: list[str]) -> list[str]:
    """Names that are neither files, directories nor links (a FIFO would block a copy)."""
    out = []
    for n in names:
        try:
            mode = os.lstat(os.path.join(dirpath, n)).st_mode
        except OSError:
            out.append(n)
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            out.append(n)
    return out


def seed(candidate: str, cache: Path, uid: int | None = None) -> None:
    """Copy the candidate's kept caches into a runner's ``cache`` directory."""
    src = store(candidate)
    if src.is_dir():
        shutil.copytree(src, cache, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(ORIGIN))
        origin = src.with_name(src.name + ORIGIN)
        if origin.is_file():
            relocate(cache, origin.read_text(), str(cache.parent))
    if uid is not None:
        _chown(cache, uid)


def relocate(root: Path, old: str, new: str) -> int:
    """Rewrite ``old`` to ``new`` in every regular file and link target under ``root``
    (module docstring); only when both have one length and differ. Returns how many files
    and links changed."""
    a, b = old.encode(), new.encode()
    if len(a) != len(b) or a == b or not a:
        return 0
    changed = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                if os.path.islink(path):
                    target = os.readlink(path)
                    if old in target:
                        os.unlink(path)
                        os.symlink(target.replace(old, new), path)
                        changed += 1
                    continue
                with open(path, "rb") as f:
                    data = f.read()
                if a in data:
                    with open(path, "r+b") as f:
                        f.write(data.replace(a, b))
                    changed += 1
            except OSError:
                continue  # a file it cannot rewrite keeps the old path (recompiles)
    return changed


def keep(candidate: str, cache: Path) -> None:
    """Copy a dead runner's ``cache`` back as the candidate's store (replacing it)."""
    if not cache.is_dir() or not any(cache.iterdir()) or _size_mb(cache) > KEEP_MB:
        return
    dest = store(candidate)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(cache, tmp, symlinks=True, ignore=_special)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
        dest.with_name(dest.name + ORIGIN).write_text(str(cache.parent))
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["KEEP_MB", "ORIGIN", "keep", "key", "relocate", "seed", "store"]
