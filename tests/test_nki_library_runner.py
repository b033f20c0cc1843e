"""The NKI Library runner's bookkeeping (benchmarks/nki_library.py and nki_library_clocks.py): how many
of a file's production shapes were timed, trnlab's CPU seconds kept apart from the library harness's,
and whose part ran out when a test stops. Nothing here runs the library or is timed."""
import importlib.util
import signal
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


runner = _load("nki_library")
clocks = _load("nki_library_clocks")

FILE = "integration/nkilib/core/cumsum/test_cumsum.py"


def _test(name: str, mode: str, outcome: str, trnlab: float, harness: float, latency: float = 10.0,
          error: str = "") -> dict:
    return {"nodeid": f"{FILE}::{name}", "mode": mode, "outcome": outcome, "error": error, "wall_s": 1.0,
            "runs": 1, "platform": "trn2", "trnlab_cpu_s": trnlab, "harness_cpu_s": harness, "latency_us": latency}


def _census(production: int) -> dict:
    return {"nodeid": FILE, "mode": "census", "outcome": "listed", "error": "", "wall_s": 0.0, "runs": 0,
            "platform": "trn2", "small": 3, "production": production, "production_fast": 0}


def test_a_row_says_how_many_of_the_listed_production_shapes_were_timed():
    records = [_census(14), _test("a", "timing", "timed", 0.5, 2.0, 30.0), _test("b", "timing", "timed", 3.0, 0.1, 1085.0)]
    row = runner.file_row("core/cumsum/cumsum", "trn2", records)
    assert row["timing"] == "timed 2/2 of 14 listed"
    assert row["timing_us"] == "30.0–1085.0"
    assert row["timing_cpu"] == "3.0 / 2.0"     # the slowest trnlab part, the slowest harness part
    every = runner.file_row("core/cumsum/cumsum", "trn2", [_census(2)] + records[1:])
    assert every["timing"] == "timed 2/2"


def test_the_summary_tells_a_slow_harness_from_slow_costing():
    records = [_census(3), _test("a", "timing", "timed", 1.0, 0.2),
               _test("b", "timing", "timeout", 61.0, 0.3, error="trnlab's part (tracing, costing, values) over 60 CPU s"),
               _test("c", "timing", "timeout", 0.0, 121.0,
                     error="the library's harness over 120 CPU s before any kernel ran (input generation)")]
    text = runner.timing_summary(records)
    assert "3 listed, 3 run timing-only, 1 timed" in text
    assert "timeouts: 1 in trnlab's costing, 1 in the library's harness" in text


def test_results_from_before_the_split_still_render():
    old = {"nodeid": f"{FILE}::a", "mode": "full", "outcome": "passed", "error": "", "wall_s": 1.0, "runs": 1,
           "platform": "trn2", "latency_us": 4.3}
    row = runner.file_row("core/cumsum/cumsum", "trn2", [old])
    assert row["full"] == "pass 1/1" and row["full_cpu"] == ""
    assert "`test_cumsum.py::a`" in runner.details([old])


def _spin_until_stopped():
    """Spend CPU until the clocks' timer stops the test (a bounded loop: no test waits on speed)."""
    x = 0
    for _ in range(10**9):
        x += 1
    raise AssertionError("the CPU-time limit never fired")


@pytest.fixture
def sigprof():
    previous = signal.getsignal(signal.SIGPROF)
    yield
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.signal(signal.SIGPROF, previous)


def test_trnlabs_part_has_its_own_cpu_limit(sigprof):
    c = clocks.Clocks(trnlab_seconds=0.05, harness_seconds=1000, kernel_ran=lambda: False)
    c.install()
    c.start()
    with pytest.raises(clocks.TestTimeLimit, match="trnlab's part"):
        with c.trnlab():
            _spin_until_stopped()
    split = c.stop()
    assert split["trnlab_cpu_s"] >= 0.05 - 0.01 and split["harness_cpu_s"] < split["trnlab_cpu_s"] + 1


def test_the_harness_running_out_says_whether_a_kernel_had_run(sigprof):
    for ran, where in ((False, "before any kernel ran"), (True, "after the kernel ran")):
        c = clocks.Clocks(trnlab_seconds=1000, harness_seconds=0.05, kernel_ran=lambda: ran)
        c.install()
        c.start()
        with pytest.raises(clocks.TestTimeLimit, match=f"the library's harness over 0.05 CPU s {where}"):
            _spin_until_stopped()
        c.stop()


def test_a_kernel_run_pauses_the_harness_budget(sigprof):
    # the harness's 0.2 s are not used up by a kernel run of 0.3 s: the timer counts trnlab's part apart
    c = clocks.Clocks(trnlab_seconds=0.3, harness_seconds=0.2, kernel_ran=lambda: True)
    c.install()
    c.start()
    with pytest.raises(clocks.TestTimeLimit, match="trnlab's part"):
        with c.trnlab():
            _spin_until_stopped()
    assert c.phase == "harness" and signal.getitimer(signal.ITIMER_PROF)[0] > 0.1
    c.stop()
