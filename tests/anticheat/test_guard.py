"""The evaluator's own files: a candidate cannot write them (the runner's filesystem
view), and where it can, the judge sees it and every later command refuses.

Hacks that rewrite the evaluator run against a *copy* of the package in a temporary
directory (a separate Python process imports solforge from there, and so do its judge
and runners), so the repository is never touched. The detection tests turn the view off
(``SOLFORGE_FS_VIEW=0``), as on a machine that cannot give it. The guard's rules and the
install record are tested on small directories.
"""

from __future__ import annotations

import hashlib
import json
import os
import py_compile
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solforge.bench.evaluator import Evaluator
from solforge.bench.judge.guard import EvaluatorTampered, FileGuard, pyc_matches_source
from solforge.bench.runner.sandbox import capabilities
from solforge.records.options import EvalOptions

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TINY = FIXTURES / "problems" / "tiny_linear.py"

_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import solforge
assert solforge.__file__.startswith(sys.argv[1]), solforge.__file__
from solforge.bench.evaluator import Evaluator
from solforge.bench.judge.guard import EvaluatorTampered
from solforge.records.options import EvalOptions
problem, honest, hack = sys.argv[2:5]
out = []
with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=60, timeout_s=60,
                           seed=4)) as ev:
    for sol in (honest, hack, honest):
        try:
            r = ev.evaluate(problem, sol)
            out.append({"status": r.status.value, "flags": r.flags, "message": r.message})
        except EvaluatorTampered as e:
            out.append({"refused": str(e)})
    out[-1]["containment"] = r.containment if "status" in out[-1] else None
try:  # a later command on the same install
    if sys.argv[5:] == ["no-later"]:
        raise SystemExit(print("RESULT " + json.dumps(out + [{}])))
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=60, timeout_s=60,
                               seed=4)) as ev:
        out.append({"later": ev.evaluate(problem, honest).status.value})
except EvaluatorTampered as e:
    out.append({"later_refused": str(e)})
print("RESULT " + json.dumps(out))
"""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "site"
    shutil.copytree(ROOT / "solforge", copy / "solforge",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return copy / "solforge"


def _run_in_copy(tmp_path: Path, hack: str, later: bool = True, **env_extra: str
                 ) -> list[dict]:
    pkg = tmp_path / "site" / "solforge"
    if not pkg.exists():
        _copy(tmp_path)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["SOLFORGE_SPARES"] = "2"  # three evaluations back to back; nothing timed is checked
    env.update(env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(pkg.parent), str(TINY),
         str(FIXTURES / "solutions" / "tiny_good_pytorch.py"), str(FIXTURES / "hacks" / hack),
         *([] if later else ["no-later"])],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(line[0][len("RESULT "):])


@pytest.mark.parametrize("hack, changed", [("evaluator_tamper.py", "compare.py"),
                                           ("pyc_poison.py", "compare.cpython")])
def test_tampering_is_caught_and_the_judge_refuses_afterwards(tmp_path, hack, changed):
    """Without the filesystem view (a machine that cannot give it): the write succeeds,
    the judge sees it, refuses, and so does a later command on the same install."""
    real = ROOT / "solforge" / "bench" / "measure" / "compare.py"
    before = _digest(real)
    honest, tampered, after, later = _run_in_copy(tmp_path, hack, SOLFORGE_FS_VIEW="0")
    assert _digest(real) == before  # the repository was never the target
    assert honest["status"] == "PASSED" and honest["flags"] == []  # no false alarm first
    assert tampered["status"] == "REWARD_HACK", tampered
    assert "evaluator_tampered" in tampered["flags"]
    assert changed in tampered["message"] and "reinstall" in tampered["message"]
    assert "refused" in after and "reinstall" in after["refused"]
    assert "still are" in later.get("later_refused", ""), later
    assert changed in later["later_refused"]


def _stats(root: Path, pattern: str) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.glob(pattern)
            if p.is_file()}


def _contents(root: Path) -> dict[str, str]:
    return {str(p): _digest(p) for p in root.rglob("*") if p.is_file()}


@pytest.mark.skipif(not capabilities()["fs_view"], reason="this machine cannot give runners "
                    "a read-only filesystem view (not root, or no mount namespace)")
def test_a_candidate_writes_nothing_outside_its_own_directories(tmp_path):
    """The tamper test of issue 21: a candidate appends to every .py of the installed
    solforge and tries torch's files and the user's home; every file stays byte-identical,
    no file appears, and since nothing changed the judge goes on (no refusal)."""
    import pwd

    import torch

    pkg = _copy(tmp_path)
    lib = Path(torch.__file__).parent
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    before = (_contents(pkg), _stats(lib, "*.py"), _stats(home, ".*"))
    try:
        honest, hack, after, _ = _run_in_copy(tmp_path, "tamper_everything.py", later=False)
    finally:
        made = [p for p in (lib / "_solforge_was_here.py", home / "._solforge_was_here")
                if p.exists()]
        for p in made:  # only where the view failed: leave the machine as it was
            p.unlink()
    assert not made, made
    assert (_contents(pkg), _stats(lib, "*.py"), _stats(home, ".*")) == before
    assert hack["status"] == "RUNTIME_ERROR", hack
    total = len(list(pkg.rglob("*.py")))
    assert f"solforge written=0/{total} torch+home opened=0 created=0 own_dir=ok" in \
        hack["message"], hack["message"][:600]
    assert honest["status"] == "PASSED" and after["status"] == "PASSED", (honest, after)
    assert after["containment"] == ""


def test_judge_refuses_to_start_on_files_changed_since_the_caller_started():
    ev = Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=60))
    ev.digest = "0" * 64  # what the caller saw differs from what the judge finds
    try:
        with pytest.raises(EvaluatorTampered, match="changed"):
            ev.evaluate(TINY, FIXTURES / "solutions" / "tiny_good_pytorch.py")
        with pytest.raises(EvaluatorTampered):  # and it stays refused
            ev.evaluate(TINY, FIXTURES / "solutions" / "tiny_good_pytorch.py")
    finally:
        ev.close()


# --- the guard's rules -----------------------------------------------------------------

def _package(tmp_path: Path) -> tuple[Path, Path]:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    mod = pkg / "mod.py"
    mod.write_text("def f(x):\n    return x + 1\n")
    hooks = tmp_path / "site-packages"
    hooks.mkdir()
    return pkg, hooks


def test_honest_bytecode_is_accepted(tmp_path):
    pkg, hooks = _package(tmp_path)
    g = FileGuard(roots=[pkg], libraries=[], hooks=[hooks])
    py_compile.compile(str(pkg / "mod.py"))  # any process importing it writes this
    assert g.changed() == []
    assert g.changed() == []  # and it is now part of the manifest


def test_poisoned_bytecode_is_caught(tmp_path):
    pkg, hooks = _package(tmp_path)
    g = FileGuard(roots=[pkg], libraries=[], hooks=[hooks])
    pyc = Path(py_compile.compile(str(pkg / "mod.py")))
    honest = pyc.read_bytes()
    evil = compile("def f(x):\n    return x + 2\n", str(pkg / "mod.py"), "exec")
    import marshal

    pyc.write_bytes(honest[:16] + marshal.dumps(evil))  # the source's timestamp kept
    assert not pyc_matches_source(pyc)
    assert any("mod.cpython" in c for c in g.changed())


def test_write_then_restore_is_caught(tmp_path):
    pkg, hooks = _package(tmp_path)
    g = FileGuard(roots=[pkg], libraries=[], hooks=[hooks])
    mod = pkg / "mod.py"
    text = mod.read_text()
    time.sleep(0.01)
    mod.write_text(text + "# x\n")
    mod.write_text(text)  # same content again, but the inode changed time moved
    assert [c for c in g.changed() if "mod.py" in c]


def test_changes_after_clean_checks_are_caught_though_unchanged_parts_are_not_reread(
        tmp_path):
    """The guard re-lists a directory only when its own stat moved and re-hashes a file
    only when its stat moved: after checks that found nothing, a rewrite of the same size
    with its mtime set back, a file in a new subdirectory, a library file rewritten and a
    rename are all still seen, and no hash is taken of what did not move."""
    pkg, hooks = _package(tmp_path)
    lib = tmp_path / "lib"
    (lib / "sub").mkdir(parents=True)
    (lib / "sub" / "k.py").write_text("K = 1\n")
    g = FileGuard(roots=[pkg], libraries=[lib], hooks=[hooks])
    assert g.changed() == [] and g.changed() == []
    reads: list[str] = []
    real_open = open

    def counting_open(path, *a, **kw):
        reads.append(str(path))
        return real_open(path, *a, **kw)

    import builtins

    builtins.open = counting_open
    try:
        assert g.changed() == []
    finally:
        builtins.open = real_open
    assert not [r for r in reads if r.startswith(str(pkg))], reads  # nothing re-hashed
    mod = pkg / "mod.py"
    st = mod.stat()
    text = mod.read_text()
    evil = text.replace("1", "2") if "1" in text else text[:-1] + "#"
    assert len(evil) == len(text) and evil != text
    time.sleep(0.01)
    mod.write_text(evil)
    os.utime(mod, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and mtime as before
    (pkg / "deep").mkdir()
    (pkg / "deep" / "new.py").write_text("x = 1\n")
    (lib / "sub" / "k.py").write_text("K = 2\n")
    os.rename(lib / "sub" / "k.py", lib / "sub" / "k2.py")
    changed = g.changed()
    assert any(c.endswith("mod.py (modified)") for c in changed), changed
    assert any(c.endswith("new.py (added)") for c in changed), changed
    assert any(c.endswith("k.py (removed)") for c in changed), changed
    assert any(c.endswith("k2.py (added)") for c in changed), changed


def test_new_startup_hook_and_shadowing_extension_are_caught(tmp_path):
    pkg, hooks = _package(tmp_path)
    g = FileGuard(roots=[pkg], libraries=[], hooks=[hooks])
    (hooks / "zz_evil.pth").write_text("import os\n")
    (pkg / "mod.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    changed = g.changed()
    assert any("zz_evil.pth (added)" in c for c in changed)
    assert any(".so (added)" in c for c in changed)


def test_problem_files_are_guarded_but_may_be_cleaned_up(tmp_path):
    pkg, hooks = _package(tmp_path)
    g = FileGuard(roots=[pkg], libraries=[], hooks=[hooks])
    problem = tmp_path / "problem.py"
    problem.write_text("class Model: pass\n")
    g.add(problem)
    problem.write_text("class Model: pass  # easier now\n")
    assert [c for c in g.changed() if "problem.py (modified)" in c]
    g = FileGuard(roots=[pkg], libraries=[], hooks=[hooks])
    g.add(problem)
    problem.unlink()
    assert g.changed() == []


def test_unchanged_installation_reports_nothing():
    g = FileGuard()
    assert g.changed() == []


def test_the_layers_a_verdict_rests_on_are_guarded():
    """The record format, the knobs module and every package below the evaluator are in
    the guard's roots (docs/ARCHITECTURE.md); a change to any of them is seen."""
    import solforge
    from solforge.bench.judge.guard import package_roots

    base = Path(solforge.__file__).resolve().parent
    roots = set(package_roots())
    for part in ("bench", "sol", "problems", "kernels", "records", "env.py", "__init__.py"):
        assert base / part in roots, part
    watched = FileGuard(libraries=[], hooks=[]).manifest
    for f in (base / "records" / "evaluation.py", base / "env.py",
              base / "bench" / "judge" / "pipeline.py", base / "bench" / "runner" / "process.py"):
        assert str(f) in watched, f


def test_an_install_that_no_longer_matches_its_record_is_refused(tmp_path):
    """A wheel install's RECORD names every file's hash: a file changed since (by anyone,
    before this process started) is found; a judge's tamper mark outlives the judge and
    clears itself once the files are restored."""
    import base64
    import importlib.metadata

    from solforge.bench.judge.install import (
        install_refusal,
        mark_path,
        mark_tampered,
        record_mismatches,
        still_tampered,
    )

    pkg = tmp_path / "solforge"
    pkg.mkdir()
    mod = pkg / "a.py"
    mod.write_text("x = 1\n")
    info = tmp_path / "solforge-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: solforge\nVersion: 0.0\n")
    h = base64.urlsafe_b64encode(hashlib.sha256(b"x = 1\n").digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(f"solforge/a.py,sha256={h},6\n"
                                 "solforge-0.0.dist-info/RECORD,,\n")
    dist = importlib.metadata.PathDistribution(info)
    root = pkg.resolve()
    assert record_mismatches(dist, root) == []
    mod.write_text("x = 2\n")
    assert record_mismatches(dist, root) == [f"{mod.resolve()} (modified)"]

    mark_tampered([f"{mod} (modified)"], root=root)  # what a judge does when it sees it
    assert still_tampered(root) == [str(mod)]
    assert "still are" in install_refusal(root) and str(mod) in install_refusal(root)
    mod.write_text("x = 1\n")  # reinstalled
    assert still_tampered(root) == [] and not mark_path(root).exists()
    assert install_refusal(root) == ""
