"""The sandbox a submission's kernel runs in (trnlab/course/sandbox.py), tested on its own.

The kernel itself cannot run as another user on every machine (its Python must be readable by that
user; here it may live under /root): these tests run ordinary programs (sleep, cat) as the
sandbox's user instead, which is what the claims in docs/instructors.md rest on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trnlab.course.sandbox import Sandbox

as_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")


def _run_as(sandbox: Sandbox, *command: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), capture_output=True, text=True, timeout=30, cwd="/",
                          user=sandbox.uid, group=sandbox.uid, extra_groups=[], **kwargs)


@as_root
def test_a_sandbox_user_owns_its_folder_and_nothing_else(tmp_path):
    first, second = Sandbox(separate_user=True), Sandbox(separate_user=True)
    try:
        assert first.uid != second.uid and first.root.stat().st_uid == first.uid
        assert first.root.stat().st_mode & 0o777 == 0o700
        secret = first.home / "answer.txt"
        secret.write_text("42")
        first.give(secret)
        assert _run_as(first, "cat", str(secret)).stdout == "42"
        assert _run_as(second, "cat", str(secret)).returncode != 0  # another submission cannot read it
        out = tmp_path / "out"
        out.mkdir(mode=0o755)
        assert _run_as(first, "touch", str(out / "grades.csv")).returncode != 0  # nor write the results
        private = tmp_path / "checks.py"
        private.write_text("hidden")
        private.chmod(0o600)
        assert _run_as(first, "cat", str(private)).returncode != 0  # nor read a private checks file
        assert _run_as(first, "cat", f"/proc/{os.getpid()}/mem").returncode != 0  # nor the grader's memory
        assert _run_as(first, "kill", "-0", str(os.getpid())).returncode != 0  # nor signal the grader
    finally:
        first.close()
        second.close()


@as_root
def test_every_process_of_a_sandbox_user_is_killed_even_in_a_session_of_its_own():
    sandbox = Sandbox(separate_user=True)
    try:
        process = subprocess.Popen(["sleep", "300"], user=sandbox.uid, group=sandbox.uid, extra_groups=[],
                                   start_new_session=True, env={}, cwd="/")
        assert sandbox.kill_all() >= 1
        assert process.wait(timeout=10) != 0
    finally:
        sandbox.close()


def test_a_process_that_left_the_kernels_session_is_found_by_the_marker_in_its_environment():
    sandbox = Sandbox(separate_user=False)
    try:
        env = sandbox.env(dict(os.environ))
        process = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
        assert sandbox.kill_all() >= 1
        assert process.wait(timeout=10) != 0
    finally:
        sandbox.close()


def test_the_grader_outlives_nothing_it_started_even_through_setsid_and_a_double_fork(tmp_path):
    """A process that double-forks out of its session and drops its environment stays below the
    grader (a child subreaper), where kill_descendants finds it."""
    pid_file = tmp_path / "pid"
    script = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from trnlab.course.sandbox import kill_descendants, protect_grader
        protect_grader()
        escape = "import os, time\\nif os.fork(): os._exit(0)\\nos.setsid()\\nif os.fork(): os._exit(0)\\n" \\
                 "open({str(pid_file)!r}, 'w').write(str(os.getpid()))\\ntime.sleep(300)\\n"
        subprocess.run([sys.executable, "-c", escape], env={{}}, start_new_session=True)
        while not os.path.exists({str(pid_file)!r}):
            time.sleep(0.05)
        time.sleep(0.2)
        print(kill_descendants())
    """)
    path = os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert finished.returncode == 0, finished.stderr
    pid = int(pid_file.read_text())
    time.sleep(0.2)
    alive = Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    if alive:
        os.kill(pid, 9)
    assert not alive and int(finished.stdout) >= 1
