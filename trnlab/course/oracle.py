"""The oracle: a separate Python process that judges a student's instant checks.

A notebook's ``check(...)`` runs the answer in the student's kernel (`exercises.collect`) and sends
the plain results here; this process redraws the cases from the seed, computes the expected values
and replies with the verdict and the hint. The expected values therefore never exist in the
student's process, whatever its code does with frames, ``gc`` or patched libraries.

    python -m trnlab.course.oracle        # one JSON request per line on stdin, one reply per line

One oracle is started per kernel, on the first check (or, in a Jupyter kernel, in the background
when ``trnlab.course`` is imported), and lives as long as the kernel. The grader does not use it:
it judges in its own process (`kernel_run.py`).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
from typing import Any

REPLY_TIMEOUT_S = 600.0  # a 05 check simulates several kernels; a dead oracle is noticed at once

_process: subprocess.Popen | None = None
_lock = threading.Lock()


def _start() -> subprocess.Popen:
    global _process
    if _process is None or _process.poll() is not None:
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        _process = subprocess.Popen([sys.executable, "-m", "trnlab.course.oracle"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
                                    bufsize=1)
    return _process


def prestart() -> None:
    """Start the oracle in the background (its imports take a few seconds); never raises."""
    try:
        with _lock:
            _start()
    except OSError:
        pass


def _stop() -> None:
    if _process is not None and _process.poll() is None:
        try:
            _process.stdin.close()
            _process.wait(timeout=5)
        except Exception:
            _process.kill()


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
    sys.exit(serve())
