"""Where one submission's kernel runs, and how everything it started is ended.

A `Sandbox` is one notebook run's private folder and identity:

- when the grader runs as root, the kernel runs as a user of its own (a fresh uid and gid, no
  supplementary groups, no entry in /etc/passwd): it cannot read or write the grader's files, the
  other submissions' folders or the output folder, read the grader's memory (``/proc/<ppid>/mem``),
  signal the grader, or leave the set of processes that is killed at the end (a uid cannot be
  shed without root);
- otherwise (an ordinary user) the kernel runs as the grader's user; the grader then makes itself
  non-dumpable (`protect_grader`), so that same-user processes cannot read its memory, and finds
  the kernel's processes by a marker in their environment (`MARKER_VARIABLE`) and by session;
- in both cases the kernel starts in a session of its own, with stdin, stdout and stderr on
  /dev/null (a kernel never writes onto the grader's terminal) and no other inherited descriptor,
  in a folder (mode 0700) that only it can enter.

`kill_all` ends every process of the sandbox, those that left the kernel's session included; the
grader calls it after each notebook and before it writes any result.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARKER_VARIABLE = "TRNLAB_GRADE_SANDBOX"
_UID_RANGE = (1_000_000, 2_000_000_000)  # far above any real account's uid
_PR_SET_DUMPABLE = 4


_PR_SET_CHILD_SUBREAPER = 36


def protect_grader() -> None:
    """Make this process non-dumpable (processes of the same user can then neither ptrace it nor
    read ``/proc/<pid>/mem``; only root still can) and a child subreaper (a process a kernel
    started and detached, ``setsid`` and double fork, stays below the grader, where
    `kill_descendants` finds it, instead of moving under init)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        pass


_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522


def drop_capabilities() -> bool:
    """Give up every capability of this process and of whatever it starts (called in the kernel,
    before any student code). A kernel that runs as root then keeps root's uid but loses its
    powers over other processes: it can no longer read a non-dumpable grader's memory or ptrace
    it, and ``execve`` of a setuid program gains nothing. Returns whether it worked."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl, capset = libc.prctl, libc.capset
    except (OSError, AttributeError):  # not Linux: no capabilities to drop
        return False
    prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for capability in range(64):  # the bounding set first: dropping it needs CAP_SETPCAP
        prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable, twice (64 bits): all zero
    return capset(header, data) == 0


def kill_descendants(rounds: int = 50) -> int:
    """SIGKILL every process below this one (call when no kernel should be left); reap them."""
    me, killed = os.getpid(), 0
    if not os.path.isdir("/proc"):  # macOS: nothing to walk (docs/instructors.md)
        return killed
    for _ in range(rounds):
        parents = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    stat = Path(entry.path, "stat").read_text()
                except OSError:
                    continue
                fields = stat[stat.rfind(")") + 2:].split()
                if fields[0] != "Z":
                    parents[int(entry.name)] = int(fields[1])
        below = [pid for pid in parents if _is_below(pid, me, parents)]
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        _reap()
        if not below:
            break
        time.sleep(0.02)
    return killed


def _is_below(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    seen = 0
    while pid in parents and seen < 4096:
        pid, seen = parents[pid], seen + 1
        if pid == ancestor:
            return True
    return False


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def users_can_be_separated() -> str | None:
    """None if kernels can run as users of their own here, else why not (not root; Python or the
    package not readable by another user, e.g. installed under /root)."""
    from trnlab import REPO_ROOT

    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return "the grader does not run as root"
    uid = _UID_RANGE[0] - 1
    try:
        probe = subprocess.run([sys.executable, "-c", "import trnlab.course, ipykernel"], user=uid, group=uid,
                               extra_groups=[], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, close_fds=True, cwd="/", timeout=120,
                               env={**os.environ, "HOME": "/nonexistent", "PYTHONPATH": os.pathsep.join(
                                   filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))})
    except (OSError, subprocess.SubprocessError) as error:
        return f"another user cannot start {sys.executable}: {error}"
    if probe.returncode:
        last = probe.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
        return f"another user cannot import trnlab with {sys.executable}: {last[0]}"
    return None


def _processes() -> list[tuple[int, int, int, int]]:
    """(pid, real uid, process group, session) of every living process (zombies are already dead)."""
    found = []
    if not os.path.isdir("/proc"):  # macOS: only the kernel's process group can be found (`kill_all`)
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        uid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:")), -1)
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp session ...
        if fields[0] != "Z":
            found.append((int(entry.name), uid, int(fields[2]), int(fields[3])))
    return found


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


class Sandbox:
    """A private folder, and (as root) a private user, for one notebook run."""

    def __init__(self, separate_user: bool) -> None:
        self.marker = secrets.token_hex(12)
        self.uid: int | None = None
        self.sessions: set[int] = set()  # sessions of the kernels started in it
        self.root = Path(tempfile.mkdtemp(prefix="trnlab-grade-"))  # mode 0700
        if separate_user:
            self.uid = _UID_RANGE[0] + secrets.randbelow(_UID_RANGE[1] - _UID_RANGE[0])
            os.chown(self.root, self.uid, self.uid)
        self.home = self.folder("home")

    def folder(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(mode=0o700)
        self.give(path)
        return path

    def give(self, path: Path) -> None:
        """Hand a file or folder the grader made to the kernel's user."""
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        env = dict(base)
        env[MARKER_VARIABLE] = self.marker
        home = str(self.home)
        # A uid without a passwd entry: getpass and expanduser read these, caches go into the sandbox.
        env.update(HOME=home, IPYTHONDIR=f"{home}/.ipython", MPLCONFIGDIR=f"{home}/.matplotlib",
                   XDG_CACHE_HOME=f"{home}/.cache", XDG_CONFIG_HOME=f"{home}/.config", TMPDIR=home,
                   JUPYTER_RUNTIME_DIR=f"{home}/.runtime")
        if self.uid is not None:
            env.update(USER=f"student{self.uid}", LOGNAME=f"student{self.uid}")
        return env

    def popen_kwargs(self) -> dict:
        """How the kernel is started (passed through jupyter_client to subprocess.Popen)."""
        kwargs = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                      close_fds=True, umask=0o077)
        if self.uid is not None:
            kwargs.update(user=self.uid, group=self.uid, extra_groups=[])
        return kwargs

    def started(self, pid: int | None) -> None:
        if pid:
            try:
                self.sessions.add(os.getsid(pid))
            except OSError:
                pass

    def _members(self) -> list[int]:
        marker = f"{MARKER_VARIABLE}={self.marker}".encode()
        me = os.getpid()
        members = []
        for pid, uid, _group, session in _processes():
            if pid == me:
                continue
            if (self.uid is not None and uid == self.uid) or session in self.sessions or _has_marker(pid, marker):
                members.append(pid)
        return members

    def kill_all(self, rounds: int = 50) -> int:
        """SIGKILL every process of the sandbox until none is left; returns how many were killed."""
        killed = 0
        for session in self.sessions if not os.path.isdir("/proc") else ():  # macOS: the kernel's group
            try:
                os.killpg(session, signal.SIGKILL)
            except OSError:
                pass
        for _ in range(rounds):
            members = self._members()
            if not members:
                return killed
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except OSError:
                    pass
            time.sleep(0.02)
        return killed

    def close(self) -> int:
        killed = self.kill_all()
        shutil.rmtree(self.root, ignore_errors=True)
        return killed
