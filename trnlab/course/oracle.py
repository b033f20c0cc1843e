"""The oracle: a separate Python process that judges a student's instant checks.

A notebook's ``check(...)`` runs the answer in the student's kernel (`exercises.collect`) and sends
the plain results here; this process redraws the cases from the seed, computes the expected values
and replies with the verdict and the hint. The expected values therefore never exist in the
student's process, whatever its code does with frames, ``gc`` or patched libraries.

    python -m trnlab.course.oracle        # one JSON request per line on stdin, one reply per line

One oracle is started per kernel, on the first check, and lives as long as the kernel. Nothing is
started when ``trnlab.course`` is imported. The oracle holds nothing of the kernel's: its standard
streams are its own pipes (stderr to /dev/null), every other descriptor is closed (the kernel's
ZeroMQ sockets stay the kernel's), and it runs in a session of its own, so a signal to the kernel's
process group (an interrupt from Jupyter or nbgrader) does not reach it. It ends when its stdin
closes — at the kernel's exit, or when the kernel is killed — and the kernel's exit waits for it
at most `STOP_WAIT_S`. The grader does not use it: it judges in its own process (`kernel_run.py`).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
from typing import Any

REPLY_TIMEOUT_S = 600.0  # a 05 check simulates several kernels; a dead oracle is noticed at once
STOP_WAIT_S = 2.0  # at the kernel's exit: then the oracle is killed, so shutdown never waits longer

_process: subprocess.Popen | None = None
_lock = threading.Lock()


def _start() -> subprocess.Popen:
    global _process
    if _process is None or _process.poll() is not None:
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        _process = subprocess.Popen([sys.executable, "-m", "trnlab.course.oracle"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
                                    start_new_session=True, env=env, text=True, bufsize=1)
    return _process


def _stop() -> None:
    process = _process
    if process is not None and process.poll() is None:
        try:
            process.stdin.close()
            process.wait(timeout=STOP_WAIT_S)
        except Exception:
            process.kill()
            process.wait(timeout=STOP_WAIT_S)


atexit.register(_stop)


def ask(request: dict) -> dict:
    """Send one request, wait for its reply."""
    with _lock:
        for attempt in range(2):  # an oracle that died (killed, out of memory) is started again once
            process = _start()
            try:
                process.stdin.write(json.dumps(request) + "\n")
                process.stdin.flush()
                ready, _, _ = select.select([process.stdout], [], [], REPLY_TIMEOUT_S)
                line = process.stdout.readline() if ready else ""
            except (BrokenPipeError, OSError):
                line = ""
            if line:
                return json.loads(line)
            process.kill()
        raise RuntimeError("the checking process did not answer")


def judge_remotely(ex: Any, seed: int, payload: str):
    from trnlab.course.exercises import CheckResult

    reply = ask({"exercise": ex.id, "seed": seed, "payload": payload})
    status = str(reply.get("status", "not_graded"))
    passed = status == "passed"
    return CheckResult(ex.id, passed, ex.points if passed else 0, ex.points, str(reply.get("message", "")), status)


def serve() -> int:
    from trnlab.course import exercises

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is the kernel's business, not the judge's
    replies, sys.stdout = sys.stdout, sys.stderr  # whatever a checker prints must not corrupt the replies
    exercises.load_all(strict=False)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            ex = exercises.get(str(request["exercise"]))
            result = exercises.judge(ex, int(request["seed"]), str(request["payload"]))
            reply = {"status": result.status, "message": result.message}
        except Exception as error:  # a malformed request: say so, keep serving
            reply = {"status": "not_graded", "message": f"could not be judged: {type(error).__name__}: {error}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    code = serve()
    os._exit(code)  # stdin closed: the kernel is leaving; nothing to clean up, so no slow interpreter teardown
