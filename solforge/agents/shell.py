"""An agent's shell command, contained the way the evaluator contains a candidate.

:func:`run_contained` runs ``/bin/sh -c COMMAND`` in the agent's workspace with what a
candidate runner gets (``solforge.bench.runner.sandbox``): an environment rebuilt from the
runner allowlist (API keys and credentials gone), a private HOME and TMPDIR, the
:class:`~solforge.bench.runner.sandbox.SandboxConfig` resource limits (CPU seconds, file size,
open files, no core dumps; address space on a CPU device), no network (a fresh network
namespace where the OS allows one), a new session; and, as root on a CPU device where it
works, ``nobody``'s uid. On timeout the whole process group and every descendant are
killed. It holds the device's timing slot (``solforge.bench.measure.slots``) for the whole
command, so nothing an agent runs overlaps another candidate's timing on that device.
Where the machine allows it (root), the runners' filesystem view
(``solforge.bench.runner.fsview``): everything read-only except the workspace, the
command's private HOME (its TMPDIR and build caches inside) and the machine's slot
directory, and on a hardened device (``sandbox.hardened``: a CPU) no capabilities, so the
view cannot be undone. The installed solforge, torch, the user's home, the run directory
and its ledger are then out of a command's reach; :attr:`CommandResult.containment` says
when they are not.

Not covered: host memory on a GPU device (the address-space limit is CPU-only, as for
runners, and nothing here plays the judge's resident-memory watchdog); what a command
reads (what the user running solforge can read, the installed corpus included); writes
where the view cannot be had (not root), or undone by a command that keeps its
capabilities (a GPU device without ``SOLFORGE_HARDEN_GPU=1``); the judge hashes its own
files and flags changes. See docs/THREAT_MODEL.md for the rest.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from solforge import env
from solforge.bench import (
    OutputTail,
    SandboxConfig,
    device_slot,
    kill_tree,
    runner_env,
    slot_env,
)
from solforge.bench.runner import fsview, sandbox


@dataclass
class CommandResult:
    """What a command did: exit code (None: killed at the timeout), output, seconds."""

    exit_code: int | None
    output: str
    seconds: float
    timed_out: bool = False
    network_isolated: bool = False
    slot_wait_s: float = 0.0
    containment: str = ""  # '' when the command had the read-only view; else why not

    def describe(self) -> str:
        """The report an agent reads."""
        if self.timed_out:
            head = f"killed at the time limit, after {self.seconds:.1f} s"
        elif self.exit_code is not None and self.exit_code < 0:
            try:
                name = signal.Signals(-self.exit_code).name
            except ValueError:
                name = str(-self.exit_code)
            head = f"killed by signal {name} after {self.seconds:.1f} s"
        else:
            head = f"exit code {self.exit_code} after {self.seconds:.1f} s"
        return f"{head}\n{self.output}" if self.output else f"{head} (no output)"


def _preexec(cfg: SandboxConfig, device: str, drop: bool, view: fsview.View | None,
             strip_caps: bool) -> None:
    """The runner's limits and view (``sandbox.set_limits``), between fork and exec."""
    libc = sandbox._libc()
    sandbox.set_limits(cfg, device, view)
    if drop:
        sandbox._drop_to_nobody()
        resource.setrlimit(resource.RLIMIT_NPROC, (512, 512))
    if libc is not None:
        if strip_caps:
            sandbox._drop_capabilities(libc)
        libc.prctl(sandbox._PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def _containment(view: fsview.View | None, strip_caps: bool, drop: bool, cfg: SandboxConfig
                 ) -> str:
    if view is None:
        wanted = cfg.fs_view if cfg.fs_view is not None else env.fs_view()
        why = fsview.available() if wanted else f"turned off ({env.FS_VIEW}=0)"
        return f"no read-only filesystem view: {why}"
    if not (strip_caps or drop):
        return "read-only filesystem view, but the command keeps its capabilities"
    return ""


def _chown_tree(root: Path, uid: int) -> None:
    for p in [root, *root.rglob("*")]:
        try:
            os.chown(p, uid, uid, follow_symlinks=False)
        except OSError:
            pass


def run_contained(command: str, cwd: Path, device: str = "cpu", timeout_s: float = 300.0,
                  config: SandboxConfig | None = None, max_output_chars: int = 12000,
                  hold_slot: bool = True) -> CommandResult:
    """Run ``command`` with ``/bin/sh`` in ``cwd``, contained (see the module docstring).

    Output (stdout and stderr together) keeps its head and tail within
    ``max_output_chars``. The device's slot is held while the command runs, unless
    ``hold_slot`` is False (the caller holds it already, or the command cannot use the
    device).
    """
    cfg = config or SandboxConfig()
    cwd = Path(cwd).resolve()
    home = Path(tempfile.mkdtemp(prefix="solforge-agent-home-"))
    (home / "tmp").mkdir()
    (home / "cache").mkdir()
    drop = cfg.drop_privileges
    if drop is None:
        drop = device == "cpu" and sandbox.can_drop_privileges()
    drop = bool(drop and os.geteuid() == 0)
    if drop:  # the workspace is the agent's: nobody may write it, nothing else
        _chown_tree(home, 65534)
        _chown_tree(cwd, 65534)
    env = runner_env(device, home, cfg.extra_env)
    if hold_slot:  # evaluations the command starts run inside this hold, not after it
        env.update(slot_env(device))
    netns = cfg.isolate_network and _netns_available()
    view = sandbox.fs_view_for(cfg, device, [cwd, home])
    strip_caps = os.geteuid() == 0 and not drop and sandbox.hardened(device)
    slot = device_slot(device) if hold_slot else contextlib.nullcontext(0.0)
    try:
        with slot as waited:
            t0 = time.monotonic()
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=lambda: _preexec(cfg, device, drop, view, strip_caps))
            tail = OutputTail(proc.stdout, head=max_output_chars // 3,
                              tail=max_output_chars - max_output_chars // 3)
            code, timed_out = _wait_unreaped(proc.pid, timeout_s)
            # whatever it left running (background jobs included) goes with it; the
            # command's own pid is still a zombie here, so it cannot name another process
            kill_tree(proc.pid)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            seconds = time.monotonic() - t0
            text = tail.text()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return CommandResult(exit_code=None if timed_out else code, output=text,
                         seconds=seconds, timed_out=timed_out, network_isolated=netns,
                         slot_wait_s=float(waited or 0.0),
                         containment=_containment(view, strip_caps, drop, cfg))


def _wait_unreaped(pid: int, timeout_s: float) -> tuple[int | None, bool]:
    """Wait for ``pid`` to exit without reaping it: (its return code, timed out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        except ChildProcessError:
            return None, False
        if info is not None and info.si_pid == pid:
            if info.si_code == os.CLD_EXITED:
                return info.si_status, False
            return -info.si_status, False
        time.sleep(0.02)
    return None, True


@functools.lru_cache(maxsize=1)
def _netns_available() -> bool:
    return bool(sandbox.capabilities().get("network_namespace", False))
