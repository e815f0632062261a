"""A candidate's kept build caches follow it into the next runner's directory.

TorchInductor's cached output code sets ``os.environ['TRITON_CACHE_DIR']`` to the runner
that compiled it; loaded in a fresh runner whose view makes that directory read-only, it
failed a compiled winner's re-measurement (H100, session 18). ``caches.seed`` rewrites the
building runner's directory to the new one's, byte for byte, in files and link targets.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path

from solforge.bench.runner import caches


def _runner_dir(parent: Path) -> Path:
    """A working directory named as the sandbox names them (``RunnerProcess``)."""
    d = Path(tempfile.mkdtemp(prefix="solforge-runner-", dir=parent))
    (d / "cache").mkdir()
    return d


def test_a_kept_cache_is_rewritten_to_the_next_runners_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path / "root"))
    first, second = _runner_dir(tmp_path), _runner_dir(tmp_path)
    assert first != second and len(str(first)) == len(str(second))
    # what inductor leaves: output code naming the runner's caches, inside a pickle
    code = (f"os.environ['TRITON_CACHE_DIR'] = '{first}/cache/triton'\n"
            f"os.environ['TORCHINDUCTOR_CACHE_DIR'] = '{first}/cache/inductor'\n")
    entry = first / "cache" / "inductor" / "fxgraph" / "ab" / "entry"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(pickle.dumps({"source_code": code, "n": 3}))
    (first / "cache" / "triton").mkdir()
    (first / "cache" / "triton" / "kernel.cubin").write_bytes(b"\x00\x01" + str(first).encode())
    os.symlink(f"{first}/cache/triton/kernel.cubin", first / "cache" / "inductor" / "link")
    (first / "cache" / "inductor" / "plain.txt").write_text("nothing to rewrite")

    key = "k" * 24
    caches.keep(key, first / "cache")
    assert caches.store(key).with_name(key + caches.ORIGIN).read_text() == str(first)
    caches.seed(key, second / "cache")

    got = pickle.loads((second / "cache" / "inductor" / "fxgraph" / "ab" / "entry").read_bytes())
    assert got["source_code"] == code.replace(str(first), str(second)) and got["n"] == 3
    assert (second / "cache" / "triton" / "kernel.cubin").read_bytes() == \
        b"\x00\x01" + str(second).encode()
    assert os.readlink(second / "cache" / "inductor" / "link") == \
        f"{second}/cache/triton/kernel.cubin"
    assert (second / "cache" / "inductor" / "plain.txt").read_text() == "nothing to rewrite"
    for p in (second / "cache").rglob("*"):
        if p.is_file() and not p.is_symlink():
            assert str(first).encode() not in p.read_bytes(), p
    assert not (second / "cache" / caches.ORIGIN).exists()
    # the store itself keeps the first runner's paths: the next seed rewrites them again
    assert str(first).encode() in (caches.store(key) / "triton" / "kernel.cubin").read_bytes()


def test_relocate_leaves_paths_of_another_length_alone(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"/tmp/solforge-runner-abcdefgh/cache")
    assert caches.relocate(tmp_path, "/tmp/solforge-runner-abcdefgh", "/tmp/x") == 0
    assert f.read_bytes() == b"/tmp/solforge-runner-abcdefgh/cache"
    assert caches.relocate(tmp_path, "/tmp/solforge-runner-abcdefgh",
                           "/tmp/solforge-runner-12345678") == 1
    assert f.read_bytes() == b"/tmp/solforge-runner-12345678/cache"
