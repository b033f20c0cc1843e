"""The fast paths beside the reference simulator (trnlab.hardware.fast, the `fast` switch of
trnlab.config): with them off the reference runs alone and gives the same timelines, record for
record, and the same output bits; their effects on the user's process (the cyclic collector, BLAS's
thread count) last one run, even one that raises. And a `Program`'s directives survive a save and
load, while its derived caches cannot outlive a change."""
from __future__ import annotations

import copy
import gc
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware import _blas, gemm, presets, replay
from trnlab.hardware.program import Program
from trnlab.kernels import KERNELS
from trnlab.kernels.workload import gpt_arguments

ROOT = Path(__file__).resolve().parent.parent


def _records(run) -> list:
    """Every timeline record's fields (as the golden check hashes them)."""
    tl = run.timeline
    return [(r.engine, r.opcode, r.start_ns, r.end_ns, r.ready_ns, r.flops, r.hbm_bytes, r.sbuf_bytes,
             r.psum_bytes, r.waited_for) for r in (tl[i] for i in range(len(tl)))]


def _concrete(args, name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    out = []
    for x in args:
        if isinstance(x, nki.ShapeDtype):
            if "int" in str(x.dtype):
                out.append(rng.integers(0, 64, size=x.shape).astype(np.int32))
            else:
                out.append(rng.standard_normal(x.shape).astype(np.float32))
        else:
            out.append(x)
    return out


def _both_ways(run):
    """run() with the fast paths on, then with the reference alone."""
    with config.override(fast=True):
        fast = run()
    with config.override(fast=False):
        reference = run()
    return fast, reference


FULL = ["matmul", "linear_backward", "softmax", "layer_norm_backward", "causal_attention", "cross_entropy"]


@pytest.mark.parametrize("name", FULL)
def test_a_library_kernel_in_full_mode_gives_the_reference_timeline_and_bits(name):
    args = _concrete(gpt_arguments(batch=1, seq=128, d_model=128, n_head=4, vocab=64, dtype="float32")[name], name)
    kernel = KERNELS[name][0]
    fast, reference = _both_ways(lambda: nki.run(kernel, *args, target="trn2"))
    assert _records(fast) == _records(reference)
    for a, b in zip(fast.outputs if isinstance(fast.outputs, tuple) else [fast.outputs],
                    reference.outputs if isinstance(reference.outputs, tuple) else [reference.outputs]):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("target", ["trn1", "trn3"])
def test_every_library_kernel_timing_only_gives_the_reference_timeline(target):
    args = gpt_arguments(batch=2, seq=128, d_model=128, n_head=4, vocab=64)
    for name, (kernel, _) in KERNELS.items():
        fast, reference = _both_ways(lambda: nki.run(kernel, *args[name], target=target, timing_only=True))
        assert _records(fast) == _records(reference), name


def test_the_gemm_gives_the_reference_bits_and_timeline():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((256, 384)).astype(np.float32)
    B = rng.standard_normal((384, 1024)).astype(np.float32)
    (c_fast, core_fast), (c_ref, core_ref) = _both_ways(lambda: gemm.run_gemm(A, B))
    assert c_fast.tobytes() == c_ref.tobytes()
    assert core_fast.timeline.same_schedule(core_ref.timeline)


def test_the_reference_alone_runs_no_fast_path(monkeypatch):
    """With the switch off, a replay issues every instruction to the core: no values replay, no
    worker thread, no collector pause, no BLAS switch."""
    from trnlab.hardware.fast import psum_pool, values_replay
    used = []
    monkeypatch.setattr(values_replay, "run_values", lambda *a: used.append("values replay"))
    monkeypatch.setattr(psum_pool.Products, "flush", lambda *a: used.append("psum pool"))
    monkeypatch.setattr(gc, "disable", lambda: used.append("gc.disable"))
    monkeypatch.setattr(_blas, "_find", lambda: used.append("blas") or False)
    args = _concrete(gpt_arguments(batch=1, seq=128, d_model=128, n_head=4, vocab=64, dtype="float32")["matmul"], "m")
    with config.override(fast=False):
        run = nki.run(KERNELS["matmul"][0], *args, target="trn2")
    assert used == [] and run.outputs is not None


@nki.jit
def _raises_in_its_trace(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    seen.append((gc.isenabled(), _threads()))
    raise RuntimeError("the kernel's own error")


seen: list = []


def _threads():
    api = _blas._find()
    return api[1]() if api else None


@pytest.mark.parametrize("fast", [True, False])
def test_the_collector_and_blas_threads_come_back_after_a_run_that_raises(fast):
    seen.clear()
    threads_before = _threads()
    assert gc.isenabled()
    with config.override(fast=fast):
        with pytest.raises(RuntimeError, match="own error"):
            _raises_in_its_trace(np.ones((128, 64), np.float32))
        with pytest.raises(ZeroDivisionError):     # a values run (BLAS single-threaded) that raises
            with _blas.single_threaded():
                seen.append((gc.isenabled(), _threads()))
                1 / 0
    assert seen[0][0] is (not fast)                 # paused inside a fast trace only
    if threads_before is not None and threads_before != 1:
        assert seen[-1][1] == (1 if fast else threads_before)
    assert gc.isenabled() and _threads() == threads_before


@pytest.mark.parametrize("fast", [True, False])
def test_scheduling_pauses_the_collector_only_on_the_fast_path(fast, monkeypatch):
    """The list schedule creates only objects that stay alive: on the fast path the collector is
    paused while it runs (hardware/_gc.py), and enabled again afterwards."""
    from trnlab.hardware import instruction_order, list_schedule
    from trnlab.hardware.fast import list_schedule as fast_list_schedule
    monkeypatch.setattr(nki, "SCHEDULE", "program")
    args = gpt_arguments(batch=1, seq=128, d_model=128, n_head=4, vocab=64, dtype="float32")["matmul"]
    program = nki.trace(KERNELS["matmul"][0], *args, target="trn2")
    if fast:                              # (the fast path's own list_order: fast/list_schedule.py)
        list_schedule = fast_list_schedule
    order = list_schedule.list_order
    during = []
    monkeypatch.setattr(list_schedule, "list_order", lambda *a, **k: during.append(gc.isenabled()) or order(*a, **k))
    with config.override(fast=fast):
        scheduled = instruction_order.scheduled(program, "list")
    assert during == [not fast] and gc.isenabled()
    assert scheduled.schedule == "list" and len(scheduled) == len(program)


def test_blas_threads_default_leaves_blas_alone(monkeypatch):
    monkeypatch.setenv("TRNLAB_BLAS_THREADS", "default")
    monkeypatch.setattr(_blas, "_find", lambda: pytest.fail("BLAS was switched"))
    with config.override(fast=True), _blas.single_threaded():
        pass


# -- Program: directives saved, derived caches dropped on change ---------------------------------------
def _add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    nl.store(out, nl.add(x, y))
    return out


_add_kernel = nki.jit(_add)
X = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)


def test_every_directive_survives_a_save_and_load():
    from dataclasses import replace
    program = copy.copy(nki.trace(_add_kernel, X, X))      # (not the traced program nki keeps)
    program.no_reorder = True
    program.inlined_regions = frozenset({"inner", "other"})
    program.blocks = {3: (1, (0,)), 4: (1, (1,))}
    program.spec = replace(presets.TRN2.core, sbuf_partition_bytes=96 * 1024)
    loaded = Program.loads(program.dumps())
    for name in ("no_reorder", "inlined_regions", "blocks", "spec", "matmul_dtypes", "schedule", "allocated"):
        assert getattr(loaded, name) == getattr(program, name), name
    assert loaded.matmul_dtypes == program.matmul_dtypes
    plain = nki.trace(_add_kernel, X, X)
    assert Program.loads(plain.dumps()).spec is None          # a preset's spec: its name says it


def test_a_version_1_program_loads_with_the_default_directives():
    doc = nki.trace(_add_kernel, X, X).to_json()
    for key in ("no_reorder", "inlined_regions", "blocks", "spec", "matmul_dtypes"):
        del doc[key]
    loaded = Program.from_json(doc | {"version": 1})
    assert (loaded.no_reorder, loaded.inlined_regions, loaded.blocks, loaded.spec) == (False, frozenset(), {}, None)
    tensors = replay.execute(loaded, _core(), [X, X])
    assert np.array_equal(replay.read_outputs(loaded, tensors, True), X + X)


def _core():
    from trnlab.hardware.device import Device
    return Device("trn2", cores=1, mode="full").cores[0]


def test_a_derived_cache_is_never_used_after_the_program_changes():
    program = copy.copy(nki.trace(_add_kernel, X, X))
    plan = replay.plan(program)
    assert replay.plan(program) is plan                       # cached
    program.changed()
    assert "plan" not in program.derived
    assert replay.plan(program) is not plan                   # made again
    plan = replay.plan(program)
    twin = copy.copy(program)                                 # a copy shares no cache
    assert "plan" not in twin.derived and replay.plan(twin) is not plan
    program.instructions = list(program.instructions)         # a new instruction list: a new cache
    assert "plan" not in program.derived
    replay.plan(program)
    program.buffers = list(program.buffers)                   # a new buffer table: a new cache
    assert "plan" not in program.derived


# -- CI runs the kernel and program tests with the reference alone too -------------------------------
# (chosen to keep this under two minutes on two cores; docs/programs.md names them)
REFERENCE_FILES = ["tests/test_program.py", "tests/test_nki_kernels.py", "tests/test_kernels_matmul.py",
                   "tests/test_schedule_list.py", "tests/test_hardware_gemm.py"]


@pytest.mark.skipif(os.environ.get("TRNLAB_FAST") == "0", reason="already the reference run")
def test_the_kernel_and_program_tests_pass_with_the_fast_paths_off():
    env = dict(os.environ, TRNLAB_FAST="0", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "-o", "addopts=", *REFERENCE_FILES], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
