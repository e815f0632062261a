"""Whether the installed solforge may be used at all: its files against two records.

The guard (``guard.py``) compares the evaluator's files with the manifest a judge took
when it started, so it sees what changes *during* a run. Two records reach further:

- **the install's own record**: a wheel install lists every file with its SHA-256 in its
  ``*.dist-info/RECORD``; a package file that no longer matches it was changed after
  installation, by anyone, at any time before this process started;
- **the judge's tamper mark**: when a judge finds its files changed it writes, outside the
  package (``<cache>/guard/``), which files changed and what they hold now. Every later
  start compares: a file that still holds what the mark says is still tampered, whatever
  kind of install it is (a source checkout has no RECORD; its files change legitimately
  when its owner edits them, which clears the mark: the content then differs from the
  tampered one).

:func:`install_refusal` is checked before a judge starts (``evaluator.py``,
``judge/process.py``) and before a planner's run starts (``solforge optimize``,
``Planner.loop``): a tampered install is never used silently by a later command.

Not covered: a change made before the first judge ran on a source checkout (no RECORD,
no mark: reinstall or ``git status`` tell); a candidate that rewrites the RECORD or the
mark as well as the files, where the filesystem view cannot be had (the guard still sees
the change in that run, and the mark is written after the candidate is dead).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import time
from pathlib import Path

import solforge
from solforge import env


def package_root() -> Path:
    return Path(solforge.__file__).resolve().parent


def mark_path(root: Path | None = None) -> Path:
    """Where the tamper mark of the package at ``root`` lives (outside the package)."""
    root = root or package_root()
    name = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return env.cache_dir() / "guard" / f"tampered-{name}.json"


def _sha(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "missing"


def mark_tampered(changed: list[str], root: Path | None = None) -> None:
    """Remember that these files changed (``guard.changed()``'s lines: "PATH (what)")."""
    paths = [c.rsplit(" (", 1)[0] for c in changed]
    mark = mark_path(root)
    old = _read(mark)
    files = {**old.get("files", {}), **{p: _sha(Path(p)) for p in paths}}
    mark.parent.mkdir(parents=True, exist_ok=True)
    tmp = mark.with_suffix(".tmp")
    tmp.write_text(json.dumps({"files": files, "at": old.get("at", time.time())}, indent=1))
    tmp.replace(mark)


def _read(mark: Path) -> dict:
    try:
        data = json.loads(mark.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def still_tampered(root: Path | None = None) -> list[str]:
    """Files the mark names that still hold what the judge found; a mark whose files all
    changed since (reinstalled, checked out again) is removed."""
    mark = mark_path(root)
    files = _read(mark).get("files", {})
    if not files:
        return []
    left = [p for p, sha in files.items() if _sha(Path(p)) == sha]
    if not left:
        mark.unlink(missing_ok=True)
    return left


def record_mismatches(dist: importlib.metadata.Distribution, root: Path) -> list[str]:
    """Files of the package at ``root`` that differ from ``dist``'s RECORD (none for an
    editable install, whose RECORD lists only its path hook)."""
    out = []
    for f in dist.files or []:
        if f.hash is None or f.hash.mode != "sha256":
            continue
        path = Path(dist.locate_file(f)).resolve()
        if root not in path.parents:
            continue
        try:
            digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest())
        except OSError:
            out.append(f"{path} (missing)")
            continue
        if digest.rstrip(b"=").decode() != f.hash.value:
            out.append(f"{path} (modified)")
    return out


def _installed() -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution("solforge")
    except importlib.metadata.PackageNotFoundError:
        return None


def install_refusal(root: Path | None = None) -> str:
    """'' when the installed package may be used; else why not and what to do."""
    root = root or package_root()
    left = still_tampered(root)
    if left:
        more = f" and {len(left) - 6} more" if len(left) > 6 else ""
        return ("an earlier evaluation found the evaluator's own files changed, and they "
                f"still are: {'; '.join(left[:6])}{more}. No verdict can be trusted: "
                "reinstall solforge (pip install --force-reinstall, or restore a source "
                f"checkout's files), and the mark {mark_path(root)} clears itself; if you "
                "made that change yourself and keep it, remove the mark.")
    dist = _installed()
    changed = record_mismatches(dist, root) if dist is not None else []
    if changed:
        more = f" and {len(changed) - 6} more" if len(changed) > 6 else ""
        return ("the installed solforge no longer matches its install record "
                f"(RECORD): {'; '.join(changed[:6])}{more}. No verdict can be trusted: "
                "reinstall solforge (pip install --force-reinstall solforge).")
    return ""


__all__ = ["install_refusal", "mark_path", "mark_tampered", "record_mismatches",
           "still_tampered"]
