"""pytest plugin that runs AWS's NKI Library tests on trnlab (loaded by benchmarks/nki_library.py).

Inside the library's own pytest run (``--test-mode simulation``) it:

- installs trnlab's zero-edit import hook (`trnlab.nki.zero_edit`), so the harness's
  ``nki_cpu_simulator.nki.*`` / ``nki.*`` / ``neuron_dtypes`` imports get trnlab, unmodified;
- stands in for the harness files the public repository lacks (``test/utils/scripts/`` and
  ``test/utils/perf_analysis_private.py``: remote-hardware locking and trace analysis, unused on
  a CPU) and sets the orchestrator's ``_compiled_kernel`` to None (simulation mode skips the
  compilation that sets it, and the output renaming reads it);
- runs a kernel of ``InferenceArgs(collective_ranks=N > 1)`` on all N ranks at once: the harness's
  simulation mode runs one rank only (its ``simulation_setup.simulate_kernel`` calls ``.items()`` on a
  ``PerRankLazyInputGenerator``, and a dict input runs on a lone core); the orchestrator's
  ``_run_simulator_inference`` is stood in for (one-rank tests run as the harness runs them, its
  ``simulation_setup.simulate_kernel``), and for such tests: each rank's inputs
  (``for_rank(r)``, or the one dict for every rank) go to `trnlab.nki.multi_rank_run` (AWS's
  ``nki.multi_rank_simulate``: a Cluster of N ranks, LNC = the test's ``logical_nc_config``), and rank r's
  outputs are written to ``output_worker_<r>/`` as the hardware path leaves them, so the harness's own
  ``OutputValidator`` compares every rank with the library's per-rank references;
- hands the harness each output in its placeholder's dtype as the harness's simulation path does
  (``np.asarray(output, dtype=...)``), except an MX x4 output declared as another type (the library's
  mxfp_load declares its float8_e4m3fn_x4 output float32): its bytes, as the chip's path reads the output
  file, since AWS's x4 types have no cast by value (`nki_library_outputs`);
- records every `trnlab.nki.run` (the call behind ``nki.cpu_simulate(kernel)[lnc](...)``) and every
  multi-rank run: its simulated latency and the library's QoR metrics (`trnlab.nki.qor`);
- keeps, per test file, the first ``NKILIB_MAX_FAST`` (0: every; -1: none) ``fast`` tests that the simulation mode runs
  (full mode: values, compared by the harness with the library's references; a file without
  ``fast`` tests: its first tests that the simulation mode runs) and the first
  ``NKILIB_MAX_TIMED`` (0: every) tests it skips for their size (the production shapes, those marked
  ``fast`` first), and runs them in that order while the file's timing-only tests have used less than
  ``NKILIB_TIMED_BUDGET`` CPU seconds (trnlab's and the harness's; 0: no budget); the rest are left
  out (not run, no record: the census line says how many the file lists);
  those run timing-only (no values) and end after the kernel ran, before the harness compares
  values it does not have (run with the harness's NKILIB_SIMULATION_RUN_ALL=1 so it keeps them);
  with ``NKILIB_FULL_LARGE=1`` (``--full-large``) they run in full mode too, values compared;
- with ``NKILIB_ONLY_EXCLUDED_FROM=<platform>`` (the runner's second pass, on trn3), keeps only the
  tests that platform does not run: those the library marks ``@pytest.mark.platforms(exclude=[...,
  <platform>])`` (the harness deselects them there) and those listed (one node id a line) in the file
  ``NKILIB_RERUN_NODEIDS`` (tests that skipped themselves on it, e.g. "MX is only supported on TRN3");
- keeps two clocks per test, in CPU seconds of the session's process (the machine may be shared, so
  wall time would count other programs' turns): trnlab's part (inside `trnlab.nki.run` or
  `trnlab.nki.multi_rank_run`: tracing, scheduling, costing and, in full mode, values) and the
  library's harness (everything else: its input generators, its PyTorch references, its comparison);
  each has its own limit, ``NKILIB_TEST_SECONDS`` (default 60) for trnlab's part and
  ``NKILIB_HARNESS_SECONDS`` (default 90) for the harness's, and a test past either stops as a
  timeout that names whose time ran out; ``NKILIB_WALL_SECONDS`` (default 1500) is a wall-clock backstop;
- limits the session's address space to ``NKILIB_MEMORY_GB`` (default 12: a test that needs more
  fails with MemoryError);
- writes one JSON line per test (with ``trnlab_cpu_s``, ``harness_cpu_s`` and their wall times), one per
  test file that fails to import, and one ``census`` line per test file (how many tests of each kind it
  lists at the session's platform, before the selection above), to ``NKILIB_RESULTS``.
"""
from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time
import types

import pytest
from nki_library_clocks import Clocks, TestTimeLimit
from nki_library_outputs import as_placeholder

RESULTS = os.environ.get("NKILIB_RESULTS")
MAX_FAST = int(os.environ.get("NKILIB_MAX_FAST", "4"))
MAX_TIMED = int(os.environ.get("NKILIB_MAX_TIMED", "2"))
TIMED_BUDGET = float(os.environ.get("NKILIB_TIMED_BUDGET", "0"))     # CPU s per file for its timing-only tests
TEST_SECONDS = float(os.environ.get("NKILIB_TEST_SECONDS", "60"))         # trnlab's part, CPU s
HARNESS_SECONDS = float(os.environ.get("NKILIB_HARNESS_SECONDS", "90"))  # the harness's part, CPU s
WALL_SECONDS = int(os.environ.get("NKILIB_WALL_SECONDS", "1500"))         # a backstop, wall s
FULL_LARGE = os.environ.get("NKILIB_FULL_LARGE") == "1"
ONLY_EXCLUDED_FROM = os.environ.get("NKILIB_ONLY_EXCLUDED_FROM", "")
_platform = {"target": ""}  # the session's --platform-target, written into every record


def _rerun_nodeids() -> set:
    path = os.environ.get("NKILIB_RERUN_NODEIDS")
    if not path or not os.path.exists(path):
        return set()
    with open(path) as f:
        return {line.strip() for line in f if line.strip()}


def _excluded_from(item, platform: str) -> bool:
    """Whether the library marks this test not to run on `platform` (its ``platforms(exclude=...)``)."""
    marker = item.get_closest_marker("platforms")
    excluded = (marker.kwargs.get("exclude") or []) if marker else []
    return any(str(p) == platform for p in excluded)


class TimedOnly(BaseException):
    """Ends a timing-only test after the kernel ran (a BaseException: the harness catches Exception)."""


def _install_hook() -> None:
    if "nki" in sys.modules:            # an alias already in place (a development stand-in)
        return
    from trnlab.nki import zero_edit
    zero_edit.install()


def _importable(name: str) -> bool:
    import importlib.util
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ModuleNotFoundError, ValueError):
        return False


def _stand_in_missing_harness_files() -> None:
    import enum
    if not _importable("test.utils.scripts"):
        scripts = types.ModuleType("test.utils.scripts")
        scripts.__path__ = []
        locks = types.ModuleType("test.utils.scripts.remote_lock_scripts")

        class LockStatus(enum.Enum):         # remote core locking: never reached on a CPU
            ALLOCATED = 0

            @property
            def exit_code(self) -> int:
                return self.value

            @classmethod
            def from_exit_code(cls, code):
                return cls.ALLOCATED

        class LockResult:
            def __init__(self, status=None, **fields):
                self.status = status
                self.__dict__.update(fields)

        locks.LockStatus, locks.LockResult = LockStatus, LockResult
        sys.modules["test.utils.scripts"] = scripts
        sys.modules["test.utils.scripts.remote_lock_scripts"] = locks
    if not _importable("test.utils.perf_analysis_private"):
        private = types.ModuleType("test.utils.perf_analysis_private")
        private.analyze_trace = lambda *args, **kwargs: None
        sys.modules["test.utils.perf_analysis_private"] = private


def _limit_memory() -> None:
    """A test that needs more than NKILIB_MEMORY_GB of address space fails with MemoryError instead
    of the machine's OOM killer ending the whole session (and other programs)."""
    import resource
    limit = int(float(os.environ.get("NKILIB_MEMORY_GB", "12")) * 2**30)
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # if the machine runs out all the same (sessions run at once, --jobs), the OOM killer ends this
    # session before other programs of the same size
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("500")
    except OSError:
        pass


_limit_memory()
_install_hook()
_stand_in_missing_harness_files()

_runs: list = []          # a summary (`_summary`) of each kernel run of the test running now
_split: dict = {}         # the running test's CPU and wall seconds, trnlab's and the harness's (`Clocks.stop`)
_mode = {"now": "full"}   # the running test's mode: "full" or "timing"


def _summary(run) -> dict:
    """What the results file needs of a kernel run, taken now: holding the run would keep its device
    (every HBM tensor's values) alive while the harness computes its reference and compares (the
    NKI Library's rmsnorm_quant at [2, 19968, 8704] then ran out of the 12 GiB in AWS's reference)."""
    from trnlab.nki.qor import qor
    summary = {"latency_us": run.latency_ns / 1e3, "qor": qor(run),
               "lnc": getattr(run, "lnc", None) or len(getattr(run, "cores", None) or [run.core]),
               "target": run.core.spec.name}
    if getattr(run, "world_size", None):
        summary["ranks"] = run.world_size
    return summary


def _record_runs() -> None:
    """Wrap trnlab.nki.run: remember each run; in timing mode run timing-only and stop the test."""
    import trnlab.nki as tnki
    original = tnki.run

    def run(kernel, *args, timing_only=None, **kwargs):
        timing = _mode["now"] == "timing"
        with _clocks.trnlab():
            result = original(kernel, *args, timing_only=True if timing else timing_only, **kwargs)
        _runs.append(_summary(result))
        if timing:
            raise TimedOnly()
        return result

    tnki.run = run
    simulate = tnki.simulate_kernel

    def simulate_kernel(kernel, *args, **kwargs):
        # nki.cpu_simulate places NumPy inputs on a full-mode device to update them in place; a
        # production shape runs timing-only instead, on a device of its own
        if _mode["now"] == "timing":
            return run(kernel, *args, **kwargs).outputs
        outputs = simulate(kernel, *args, **kwargs)
        # the run's device (every HBM tensor's values) is now garbage held in cycles (tensor <-> memory)
        # that trnlab's collector pause moved to the oldest generation: free it before the harness
        # computes its reference (rmsnorm_quant [2, 19968, 8704] ran out of the 12 GiB in AWS's reference)
        gc.collect()
        return outputs

    tnki.simulate_kernel = simulate_kernel


_record_runs()
_clocks = Clocks(TEST_SECONDS, HARNESS_SECONDS, kernel_ran=lambda: bool(_runs))


def _simulate_ranks(kernel_under_test) -> list:
    """Run a collective_ranks > 1 test's kernel on all its ranks: per rank, {output name: array}."""
    import trnlab.nki as tnki
    from test.utils.common_dataclasses import PerRankLazyInputGenerator, normalize_golden_output
    ranks = kernel_under_test.inference_args.collective_ranks
    inputs = kernel_under_test.kernel_input or {}
    per_rank = [inputs.for_rank(r) if isinstance(inputs, PerRankLazyInputGenerator) else inputs for r in range(ranks)]
    # the harness strips the graph compiler's alias suffix before simulating (simulation_setup.simulate_kernel)
    per_rank = [((), {k.removesuffix(".must_alias_input"): v for k, v in d.items()}) for d in per_rank]
    os.environ["NKI_NC_VERSION"] = kernel_under_test.compiler_input.platform_target.get_nc_gen()
    kernel = kernel_under_test.kernel_func
    lnc = kernel_under_test.compiler_input.logical_nc_config
    if lnc > 1:
        kernel = tnki.jit(kernel)[tnki.language.nc(lnc)]
    timing = _mode["now"] == "timing"
    with _clocks.trnlab():
        run = tnki.multi_rank_run(kernel, world_size=ranks, per_rank_inputs=per_rank, timing_only=timing)
    _runs.append(_summary(run))
    if timing:
        raise TimedOnly()
    if kernel_under_test.validation_args is None:       # as the harness's own simulation path refuses it
        raise ValueError("Simulation mode requires validation_args to verify outputs")
    golden = kernel_under_test.validation_args.golden_output
    outputs = []
    for r, result in enumerate(run.outputs):
        result = [] if result is None else list(result) if isinstance(result, (list, tuple)) else [result]
        names = normalize_golden_output(golden, rank_id=r)
        if len(result) != len(names):
            raise RuntimeError(f"rank {r}: kernel returned {len(result)} outputs but expected {len(names)}: "
                               f"{list(names)}")
        outputs.append({n: as_placeholder(o, g) for n, o, g in zip(names, result, names.values())})
    return outputs


def _simulate_one(kernel_under_test) -> dict:
    """A one-rank test's kernel on the simulator, {output name: array}, as the harness's
    ``simulation_setup.run_simulator_inference`` runs it (its ``simulate_kernel``), the outputs kept
    by `nki_library_outputs.as_placeholder`."""
    from test.utils import simulation_setup
    from test.utils.common_dataclasses import normalize_golden_output
    os.environ["NKI_NC_VERSION"] = kernel_under_test.compiler_input.platform_target.get_nc_gen()
    outputs = simulation_setup.simulate_kernel(kernel_under_test.kernel_func, kernel_under_test.kernel_input or {},
                                               kernel_under_test.compiler_input.logical_nc_config)
    if kernel_under_test.validation_args is None:       # as the harness's own simulation path refuses it
        raise ValueError("Simulation mode requires validation_args to verify outputs")
    names = normalize_golden_output(kernel_under_test.validation_args.golden_output)
    if len(outputs) != len(names):
        raise RuntimeError(f"kernel returned {len(outputs)} outputs but expected {len(names)}: {list(names)}")
    return {n: as_placeholder(o, g) for n, o, g in zip(names, outputs, names.values())}


def _stand_in_simulation(orchestrator) -> None:
    cls = orchestrator.Orchestrator
    if getattr(cls._run_simulator_inference, "_trnlab", False):
        return
    from test.utils.common_dataclasses import INF_ARTIFACT_DIR_NAME
    from test.utils.exceptions import InferenceException
    from test.utils.metrics_collector import MetricName

    def _run_simulator_inference(self, kernel_under_test):
        one = kernel_under_test.inference_args.collective_ranks <= 1
        try:
            with self.emitter.get_collector().timer(MetricName.SIMULATION_TIME):
                outputs = _simulate_one(kernel_under_test) if one else _simulate_ranks(kernel_under_test)
        except Exception as e:
            raise InferenceException(str(e)) from e
        if one:
            return self._dump_output_tensors(outputs) if outputs else None
        base = os.path.join(self.fs_config.artifacts_output_directory_path, INF_ARTIFACT_DIR_NAME)
        for r, tensors in enumerate(outputs):        # as the hardware path leaves per-rank outputs
            self.__dump_tensors__(os.path.join(base, f"output_worker_{r}"), tensors, lambda n: n)
        return base
    _run_simulator_inference._trnlab = True
    cls._run_simulator_inference = _run_simulator_inference


def _patch_orchestrator() -> None:
    orchestrator = sys.modules.get("test.utils.test_orchestrator")
    if orchestrator is None:
        return
    if not hasattr(orchestrator.Orchestrator, "_compiled_kernel"):
        orchestrator.Orchestrator._compiled_kernel = None
    _stand_in_simulation(orchestrator)


def pytest_configure(config) -> None:
    _platform["target"] = str(config.getoption("--platform-target", default="") or "")
    _patch_orchestrator()


def _large(item) -> bool:
    """Whether the library's simulation mode skips this test for its size (its own rule)."""
    from test.utils.simulation_setup import _LARGE_SHAPE_PATTERNS
    return bool(item.get_closest_marker("slow_simulation")) or any(p in item.name for p in _LARGE_SHAPE_PATTERNS)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items) -> None:
    _patch_orchestrator()                  # the test files have imported the orchestrator by now
    eligible = items
    if ONLY_EXCLUDED_FROM:      # the second pass: only what the first platform did not run
        rerun = _rerun_nodeids()
        eligible = [i for i in items if _excluded_from(i, ONLY_EXCLUDED_FROM) or i.nodeid in rerun]
    by_file: dict = {}
    for item in eligible:
        by_file.setdefault(str(item.fspath), []).append(item)
    chosen = []
    for file_items in by_file.values():
        full = [i for i in file_items if i.get_closest_marker("fast") and not _large(i)]
        if not full:            # a file without fast tests: its first tests at sizes simulation mode runs
            full = [i for i in file_items if not _large(i)]
        large = [i for i in file_items if _large(i)]
        timed = sorted(large, key=lambda i: not i.get_closest_marker("fast"))     # fast ones first, stable
        if RESULTS:             # what the file lists, before the limits below
            _write({"nodeid": file_items[0].nodeid.split("::")[0], "mode": "census", "outcome": "listed",
                    "error": "", "wall_s": 0.0, "runs": 0, "platform": _platform["target"],
                    "small": len(full), "production": len(large),
                    "production_fast": sum(1 for i in large if i.get_closest_marker("fast"))})
        for item in (full[:MAX_FAST or None] if MAX_FAST >= 0 else []):
            item._nkilib_mode = "full"
            chosen.append(item)
        for item in timed[:MAX_TIMED or None]:
            item._nkilib_mode = "full" if FULL_LARGE else "timing"
            chosen.append(item)
    keep = set(map(id, chosen))
    config.hook.pytest_deselected(items=[i for i in items if id(i) not in keep])
    items[:] = [i for i in items if id(i) in keep]


def pytest_collectreport(report) -> None:
    if report.failed and RESULTS:
        errors = [ln[1:].strip() for ln in str(report.longrepr).splitlines() if ln.startswith("E ")]
        error = (errors[-1] if errors else _first_line(report))[:300]
        _write({"nodeid": report.nodeid, "mode": "import", "outcome": "error", "error": error,
                "wall_s": 0.0, "runs": 0, "platform": _platform["target"]})


def _write(record: dict) -> None:
    # one write() of the whole line on an O_APPEND file: sessions run at once (--jobs) share the file
    fd = os.open(RESULTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def _alarm(signum, frame):
    raise TestTimeLimit(f"over {WALL_SECONDS} s of wall time (the backstop)")


_timed_spent: dict = {}   # per test file: CPU s its timing-only tests have used (NKILIB_TIMED_BUDGET)
_left_out: set = set()    # node ids of timing-only tests left out for the budget


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    _runs.clear()
    _split.clear()
    _mode["now"] = getattr(item, "_nkilib_mode", "full")
    file = item.nodeid.split("::")[0]
    if _mode["now"] == "timing" and TIMED_BUDGET and _timed_spent.get(file, 0.0) >= TIMED_BUDGET:
        _left_out.add(item.nodeid)
        pytest.skip(f"left out: the file's timing-only tests used {TIMED_BUDGET:g} CPU s")
    signal.signal(signal.SIGALRM, _alarm)
    _clocks.install()
    signal.alarm(WALL_SECONDS)
    _clocks.start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield
    _split.update(_clocks.stop())        # the split up to the end of the test's call


def pytest_runtest_teardown(item) -> None:
    signal.alarm(0)
    signal.setitimer(signal.ITIMER_PROF, 0)


def pytest_runtest_logfinish(nodeid, location) -> None:
    if nodeid in _left_out:
        return                  # nothing ran: no memory to give back (a collection costs seconds on a big heap)
    # pytest keeps the last failure's traceback (sys.last_*, for post-mortem debugging), and with it
    # the failed kernel run's arrays: drop it so the next test has the session's memory back
    sys.last_type = sys.last_value = sys.last_traceback = None
    _runs.clear()
    gc.collect()


def _first_line(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    for prefix in ("test.utils.exceptions.InferenceException: ", "test.utils.exceptions.ValidationException: "):
        line = line.replace(prefix, "mismatch: " if "Validation" in prefix else "")
    return line[:300]


def pytest_runtest_logreport(report) -> None:
    if report.when != "call" and not (report.when == "setup" and (report.failed or report.skipped)):
        return
    outcome = report.outcome
    error = ""
    if report.failed:
        error = _first_line(report)
        if "TimedOnly" in error and _runs:
            outcome, error = "timed", ""
        elif "TestTimeLimit" in error:
            outcome = "timeout"
        elif "ValidationException" in error or "mismatch" in error.lower():
            outcome = "mismatch"
        else:
            outcome = "error"
    elif report.skipped:
        error = _first_line(report)
    run = _runs[-1] if _runs else None
    record = {"nodeid": report.nodeid, "mode": _mode["now"], "outcome": outcome, "error": error,
              "wall_s": round(report.duration, 2), "runs": len(_runs), "platform": _platform["target"]}
    if report.nodeid in _left_out:
        return
    record.update(_split or _clocks.stop())
    if _mode["now"] == "timing":
        file = report.nodeid.split("::")[0]
        _timed_spent[file] = _timed_spent.get(file, 0.0) + record["trnlab_cpu_s"] + record["harness_cpu_s"]
    if run is not None:
        record.update(run)
    if RESULTS:
        _write(record)
