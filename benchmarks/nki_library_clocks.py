"""Two CPU clocks per test for benchmarks/nki_library_plugin.py: trnlab's part and the library's harness's.

A test of AWS's NKI Library spends its time in two places: trnlab (inside a kernel run: tracing,
scheduling, costing and, in full mode, the values) and the library's own harness (everything else: its
input generators, its PyTorch references, its comparison). Issue 21's limit (60 s a production shape)
is about the first, so each part is measured, and limited, on its own. Both are CPU seconds of the
test's process (`time.process_time`, every thread): on a machine shared with other programs, wall time
counts their turns too. The limits are enforced by the process's CPU-time timer (``ITIMER_PROF``,
SIGPROF), which the clocks re-arm with the remaining budget of the part that runs.
"""
from __future__ import annotations

import contextlib
import signal
import time
from typing import Callable


class TestTimeLimit(BaseException):
    """A test's part (trnlab's or the harness's) ran past its CPU-second limit, or the test past the
    wall-clock backstop (a BaseException: the harness catches Exception)."""


class Clocks:
    """The running test's clocks and limits. `kernel_ran()` says whether a kernel has run yet in the
    test (to tell, when the harness's budget runs out, whether it was generating inputs or checking)."""

    def __init__(self, trnlab_seconds: float, harness_seconds: float, kernel_ran: Callable[[], bool]) -> None:
        self.trnlab_seconds, self.harness_seconds, self.kernel_ran = trnlab_seconds, harness_seconds, kernel_ran
        self.test_cpu0 = self.test_wall0 = self.trnlab_cpu = self.trnlab_wall = 0.0
        self.depth, self.phase = 0, "harness"

    def install(self) -> None:
        """Make SIGPROF (the CPU-time timer) end the test with `TestTimeLimit`."""
        signal.signal(signal.SIGPROF, self.over)

    def start(self) -> None:
        """A test starts: both clocks at zero, the harness's running."""
        self.test_cpu0, self.test_wall0 = time.process_time(), time.perf_counter()
        self.trnlab_cpu = self.trnlab_wall = 0.0
        self.depth, self.phase = 0, "harness"       # depth: nested kernel runs (a multi-rank run's ranks) count once
        signal.setitimer(signal.ITIMER_PROF, self.harness_seconds)

    def stop(self) -> dict:
        """Disarm the timer; the test's split so far, in CPU and wall seconds."""
        signal.setitimer(signal.ITIMER_PROF, 0)
        cpu, wall = time.process_time() - self.test_cpu0, time.perf_counter() - self.test_wall0
        return {"trnlab_cpu_s": round(self.trnlab_cpu, 2), "harness_cpu_s": round(max(cpu - self.trnlab_cpu, 0.0), 2),
                "trnlab_wall_s": round(self.trnlab_wall, 2), "harness_wall_s": round(max(wall - self.trnlab_wall, 0.0), 2)}

    @contextlib.contextmanager
    def trnlab(self):
        """A kernel run: trnlab's clock and limit while it lasts (the limit is per test: a test's runs
        share it), the harness's remaining budget again after."""
        if self.depth:
            self.depth += 1
            try:
                yield
            finally:
                self.depth -= 1
            return
        harness_left = signal.getitimer(signal.ITIMER_PROF)[0]
        self.depth, self.phase = 1, "trnlab"
        signal.setitimer(signal.ITIMER_PROF, max(self.trnlab_seconds - self.trnlab_cpu, 1e-3))
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            yield
        finally:
            self.trnlab_cpu += time.process_time() - cpu0
            self.trnlab_wall += time.perf_counter() - wall0
            self.depth, self.phase = 0, "harness"
            signal.setitimer(signal.ITIMER_PROF, max(harness_left, 1e-3))

    def over(self, signum, frame):
        """SIGPROF: the running part's budget is spent."""
        if self.phase == "trnlab":
            raise TestTimeLimit(f"trnlab's part (tracing, costing, values) over {self.trnlab_seconds:g} CPU s")
        where = ("after the kernel ran (references, comparison)" if self.kernel_ran()
                 else "before any kernel ran (input generation)")
        raise TestTimeLimit(f"the library's harness over {self.harness_seconds:g} CPU s {where}")
