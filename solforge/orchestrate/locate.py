"""What a report, the dashboard or the CI gate is pointed at: a run directory, its
``ledger.sqlite``, a ``.tgz`` of a run (as ``benchmarks/results/`` keeps them), or an export
(``solforge export RUN --out OUT``: ``solutions/``, ``records/``, ``problems/``).

A ``.tgz`` is unpacked into a temporary directory that lives as long as the
:class:`Located` (a context manager); the run inside is the directory holding
``ledger.sqlite``, and an export beside it (``records/`` in a sibling directory) supplies
reference sources whose recorded paths do not exist on this machine.

Not covered: archives other than gzip'd tar, several runs in one archive (the first
ledger found, in path order, is used), remote paths.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


class LocateError(ValueError):
    """The path is none of the things a report reads; the message says what was found."""


@dataclass
class Located:
    """A run directory and/or an export directory found at ``given``."""

    given: Path
    run_dir: Path | None = None
    export_dir: Path | None = None
    _tmp: Path | None = field(default=None, repr=False)

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self, path: str | Path) -> str:
        """``path`` as a reader should see it: a file unpacked from the archive is named
        ``ARCHIVE:member``, not by its temporary location."""
        if self._tmp is not None:
            try:
                return f"{self.given}:{Path(path).relative_to(self._tmp)}"
            except ValueError:
                pass
        return str(path)

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def is_export(d: Path) -> bool:
    return (d / "records").is_dir() and (d / "solutions").is_dir()


def locate(path: str | Path) -> Located:
    """Find the run and/or export at ``path`` (see the module docstring)."""
    p = Path(path)
    if not p.exists():
        raise LocateError(f"{p}: no such file or directory")
    if p.is_file() and p.name == "ledger.sqlite":
        return Located(p, run_dir=p.parent, export_dir=_export_beside(p.parent))
    if p.is_file() and (p.name.endswith(".tgz") or p.name.endswith(".tar.gz")):
        return _unpack(p)
    if p.is_dir():
        if (p / "ledger.sqlite").is_file():
            return Located(p, run_dir=p, export_dir=_export_beside(p))
        if is_export(p):
            return Located(p, export_dir=p)
    raise LocateError(f"{p}: not a solforge run (no ledger.sqlite), nor an export (no "
                      "records/ and solutions/), nor a .tgz of a run")


def _export_beside(run_dir: Path) -> Path | None:
    parent = run_dir.parent
    try:
        siblings = sorted(d for d in parent.iterdir() if d.is_dir() and d != run_dir)
    except OSError:
        return None
    return next((d for d in siblings if is_export(d)), None)


def _unpack(archive: Path) -> Located:
    tmp = Path(tempfile.mkdtemp(prefix="solforge-run-"))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            # the data filter refuses absolute paths, links out of the tree and devices
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:  # Python before 3.10.12 / 3.11.4: the same refusals, by hand
                for m in tar.getmembers():
                    if m.name.startswith("/") or ".." in Path(m.name).parts or not (
                            m.isfile() or m.isdir()):
                        raise tarfile.TarError(f"refusing member {m.name!r}")
                tar.extractall(tmp)
    except (tarfile.TarError, OSError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise LocateError(f"{archive}: cannot unpack ({type(e).__name__}: {e})") from None
    ledgers = sorted(tmp.rglob("ledger.sqlite"))
    exports = sorted(d for d in tmp.rglob("records") if is_export(d.parent))
    run_dir = ledgers[0].parent if ledgers else None
    export_dir = exports[0].parent if exports else None
    if run_dir is None and export_dir is None:
        shutil.rmtree(tmp, ignore_errors=True)
        raise LocateError(f"{archive}: holds no ledger.sqlite and no export")
    return Located(archive, run_dir=run_dir, export_dir=export_dir, _tmp=tmp)
