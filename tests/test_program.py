"""The program layer: a kernel is traced into a program (plain data), allocated by liveness, and
replayed on a core of a multi-core device without Python tracing."""
import json

import numpy as np
import pytest

import trnlab.nki as nki
from trnlab import config
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import dtypes, errors, presets
from trnlab.hardware.device import Device, DeviceError
from trnlab.hardware.program import Program
from trnlab.kernels import matmul_ladder as ladder

RNG = np.random.default_rng(0)
X = RNG.standard_normal((128, 512)).astype(np.float32)
Y = RNG.standard_normal((128, 512)).astype(np.float32)


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out


CALLS = []


@nki.jit
def counted_copy(a):
    CALLS.append(1)                          # runs only when the kernel's Python runs (tracing)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a))
    return out


@nki.jit
def blocked_in_python_lists(a):
    """AWS's blocked tutorials keep every tile of a block in a Python list: 64 loads of 16 KiB per
    partition = 1 MiB per partition if Python lifetimes decided — far over 192-256 KiB of SBUF."""
    out = nl.ndarray((128, 4096), dtype=a.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in nl.affine_range(64):
        t = nl.ndarray((128, 4096), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[:, i * 4096:(i + 1) * 4096])
        nisa.dma_copy(dst=out, src=t)       # the tile's last use: its bytes are free after this
        tiles.append(t)
    return out


def test_a_traced_program_is_plain_data_instructions_and_a_buffer_table():
    program = nki.trace(add_kernel, X, Y)
    assert [i.opcode for i in program.instructions] == ["dma_copy", "dma_copy", "tensor_tensor", "dma_copy"]
    assert program.instructions[2].engine == "dve" and program.instructions[2].attrs["op"] == "add"
    roles = [b.role for b in program.buffers]
    assert roles.count("input") == 2 and roles.count("output") == 1
    tiles = [b for b in program.buffers if b.memory == "sbuf"]
    assert all(b.first >= 0 and b.last >= b.first and b.offset is not None for b in tiles)
    assert "add_kernel" in program.instructions[0].line
    listing = program.listing()
    assert "tensor_tensor" in listing and "dve (1 instructions)" in listing and "SBUF@" in listing


def test_programs_are_cached_per_shape_and_replay_runs_no_python():
    CALLS.clear()
    a = np.ones((128, 64), np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(counted_copy(a), a)
    assert len(CALLS) == 1                   # traced once, replayed three times
    counted_copy(np.ones((128, 32), np.float32))
    assert len(CALLS) == 2                   # a new shape is a new program


def test_program_json_round_trip_replays_to_the_same_numbers_and_times(tmp_path):
    program = nki.trace(add_kernel, X, Y)
    path = tmp_path / "add.json"
    program.save(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "trnlab.program" and doc["version"] == 2
    loaded = Program.load(path)
    a, b = Device("trn2", cores=1), Device("trn2", cores=1)
    run_a, run_b = a.run(program, X, Y), b.run(loaded, X, Y)
    np.testing.assert_array_equal(run_a.outputs, X + Y)
    np.testing.assert_array_equal(run_b.outputs, run_a.outputs)
    assert run_a.core.timeline.same_schedule(run_b.core.timeline)


def test_a_wrong_format_or_version_is_refused():
    doc = nki.trace(add_kernel, X, Y).to_json()
    with pytest.raises(ValueError, match="version"):
        Program.from_json(doc | {"version": 99})
    with pytest.raises(ValueError, match="not a trnlab program"):
        Program.from_json(doc | {"format": "neff"})


def test_allocation_follows_liveness_not_python_lifetimes():
    a = RNG.standard_normal((128, 64 * 4096)).astype(np.float32)
    program = nki.trace(blocked_in_python_lists, nki.ShapeDtype(a.shape, a.dtype), target="trn1")
    sbuf = presets.TRN1.core.sbuf_partition_bytes
    assert 64 * 4096 * 4 > sbuf                            # Python holds 1 MiB per partition of tiles
    assert program.peak_bytes("sbuf") <= sbuf
    out = nki.run(blocked_in_python_lists, a, target="trn1").outputs
    np.testing.assert_array_equal(out, a[:, 63 * 4096:])


def test_tiles_allocated_in_a_loop_rotate_over_several_buffers():
    """Multi-buffering: consecutive iterations' tiles get different addresses, so the next load
    does not wait for the previous iteration's readers (no WAR on the same bytes)."""
    program = nki.trace(ladder.matmul_tiled, nki.ShapeDtype((512, 128), "bfloat16"),
                        nki.ShapeDtype((512, 512), "bfloat16"))
    offsets = [b.offset for b in program.buffers if b.memory == "sbuf"]
    assert len(set(offsets[:8])) == 8


def test_overflow_names_the_instruction_and_the_tiles_live_there():
    @nki.jit
    def all_live(a):
        tiles = []
        for i in nl.affine_range(8):
            t = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.sbuf)    # 32 KiB per partition
            nisa.dma_copy(dst=t, src=a)
            tiles.append(t)
        out = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.shared_hbm)
        for t in tiles:
            nisa.dma_copy(dst=out, src=t)
        return out

    with pytest.raises(errors.SBUFOverflowError) as caught:
        nki.trace(all_live, nki.ShapeDtype((128, 8192), "float32"), target="trn1")   # 192 KiB
    message = str(caught.value)
    assert message.startswith("SBUF overflow") and "at instruction 6" in message
    assert "live there: 6 tiles, 192.0 KiB per partition" in message and "32.0 KiB" in message
    assert caught.value.kernel_location[1] > 0 and len(caught.value.live) == 6


def test_a_read_of_memory_never_written_names_the_kernel_line_at_replay():
    @nki.jit
    def uninitialised(a):
        out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=out, src=t)
        return out

    with pytest.raises(errors.UninitializedReadError) as caught:
        uninitialised(np.zeros((128, 16), np.float32))
    assert "at instruction 0 (dma_copy)" in str(caught.value)
    assert "nisa.dma_copy(dst=out, src=t)" in str(caught.value)


def test_regions_tag_instructions_and_break_the_profile_down():
    def two_kernels(a, b):
        with nki.region("first"):
            s = add_kernel(a, b)
        with nki.region("second"):
            return add_kernel(s, b)

    program = nki.trace(two_kernels, X, Y)
    assert program.regions() == ["first/add_kernel", "second/add_kernel"]
    device = Device("trn2", cores=1)
    run = device.run(program, X, Y)
    np.testing.assert_array_equal(run.outputs, (X + Y) + Y)            # fp32, in this order
    by_region = run.profile_by_region()
    assert set(by_region) >= {"first/add_kernel", "second/add_kernel"}
    total = sum(len(device.cores[0].timeline.region_records(f"{run.region}/{r}")) for r in ("first", "second"))
    assert total == len(program)


def test_a_device_has_the_chips_cores_and_launches_on_one_core_run_in_order():
    device = Device("trn2")
    assert len(device.cores) == presets.TRN2.cores == 8
    program = nki.trace(add_kernel, X, Y, target="trn2")
    first, second = device.run(program, X, Y, core=0), device.run(program, X, Y, core=0)
    assert second.start_ns >= first.start_ns + first.latency_ns - 1e-6
    other = device.run(program, X, Y, core=1)
    assert other.start_ns == 0.0                          # another core starts at once
    trace = device.chrome_trace()
    pids = {e["pid"] for e in trace["traceEvents"]}
    assert pids == {0, 1}
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert names == ["device0/core0", "device0/core1"]
    with pytest.raises(DeviceError, match="core 8 does not exist"):
        device.run(program, X, Y, core=8)


def test_cores_streaming_at_once_share_the_chips_hbm_bandwidth():
    """Eight cores each copying 8 MiB through HBM at once take longer than one core alone, and
    together they never move bytes faster than the chip's HBM bandwidth: every core's DMAs share it."""
    @nki.jit
    def stream(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[1] // 4096):
            t = nl.ndarray((128, 4096), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a[:, i * 4096:(i + 1) * 4096])
            nisa.dma_copy(dst=out[:, i * 4096:(i + 1) * 4096], src=t)
        return out

    shape = nki.ShapeDtype((128, 16384), "float32")
    program = nki.trace(stream, shape, target="trn2")
    alone = Device("trn2", mode="timing").run(program, None).latency_ns
    device = Device("trn2", mode="timing")
    runs = [device.run(program, None, core=c) for c in range(8)]
    together = max(r.start_ns + r.latency_ns for r in runs)
    assert together > 1.2 * alone
    moved = sum(r.profile().hbm_bytes for r in runs)
    assert moved / (together * 1e-9) <= presets.TRN2.hbm_bandwidth * 1.001


def test_a_tensor_of_another_device_is_refused():
    a, b = Device("trn2", cores=1), Device("trn2", cores=1)
    program = nki.trace(add_kernel, X, Y, target="trn2")
    x_on_a = a.tensor(X, name="x")
    np.testing.assert_array_equal(a.run(program, x_on_a, Y).outputs, X + Y)
    with pytest.raises(DeviceError, match="belongs to another device"):
        b.run(program, x_on_a, Y)


def test_device_print_prints_at_every_run_not_at_tracing(capsys):
    @nki.jit
    def show(a):
        t = nl.load(a)
        nl.device_print("tile:", t)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    program = nki.trace(show, nki.ShapeDtype((2, 2), "float32"))
    assert capsys.readouterr().out == ""
    Device("trn2", cores=1).run(program, np.eye(2, dtype=np.float32))
    assert "tile: [[1. 0.]" in capsys.readouterr().out


def test_the_hoist_schedule_hoists_loads_keeps_every_instruction_and_the_numbers(monkeypatch):
    from trnlab.hardware.instruction_order import hoist_loads
    monkeypatch.setattr(nki, "SCHEDULE", "program")
    lhsT = RNG.standard_normal((512, 128)).astype(np.float32)
    rhs = RNG.standard_normal((512, 1024)).astype(np.float32)
    program = nki.trace(ladder.matmul_tiled, lhsT, rhs)
    hoisted = hoist_loads(program, window=8)
    assert hoisted.schedule == "hoist" and sorted(map(id, hoisted.instructions)) == sorted(map(id, program.instructions))
    first_matmul = lambda p: next(k for k, i in enumerate(p.instructions) if i.opcode == "nc_matmul")
    assert first_matmul(hoisted) > first_matmul(program)        # more loads issued before the first matmul
    out = Device("trn2", cores=1).run(hoisted, lhsT, rhs).outputs
    np.testing.assert_array_equal(out, Device("trn2", cores=1).run(program, lhsT, rhs).outputs)


def test_a_hoist_schedule_that_does_not_fit_is_refused_with_the_overflow():
    from trnlab.hardware.instruction_order import hoist_loads
    program = nki.trace(blocked_in_python_lists, nki.ShapeDtype((128, 64 * 4096), "float32"), target="trn1")
    with pytest.raises(errors.SBUFOverflowError):
        hoist_loads(program, window=200)


def test_a_direct_allocation_keeps_the_address_the_kernel_gave():
    import trnlab.nki.compiler as ncc

    @nki.jit
    def placed(a):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
        nisa.dma_copy(dst=t, src=a)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    program = nki.trace(placed, X)
    tile = next(b for b in program.buffers if b.memory == "sbuf")
    assert tile.offset == 8192 and tile.placement["offset"] == 8192
    np.testing.assert_array_equal(Device("trn2", cores=1).run(program, X).outputs, X)


# -- the compiled timing replay: checked once (at trace), then a tight loop — the same timeline ------
from trnlab.hardware.fast import values_replay                    # noqa: E402
from trnlab.kernels import attention, norms                       # noqa: E402

SD = nki.ShapeDtype


def _timelines(program, checked: bool, target="trn2", cores: int = 1, launches: int = 2,
               resident: bool = False):
    """Every core's records and regions after `launches` rounds of launching `program` on each core,
    through the checked replay (every instruction issued to the core) or the compiled one."""
    from trnlab.hardware import device as device_module
    device = Device(target, mode="timing", cores=cores)
    args = [None] * len(program.inputs)
    if resident:
        args = [device.tensor(np.zeros(program.buffers[bid].shape, np.float32)) for _, bid in program.inputs]
    original = device_module.execute
    device_module.execute = lambda *a, **k: original(*a, **k, checked=checked)
    try:
        for _ in range(launches):
            for core in range(cores):
                device.run(program, *args, core=core)
    finally:
        device_module.execute = original
    return [(c.timeline.records, c.timeline.regions, c._free, c._now) for c in device.cores]


COMPILED_CASES = {
    "ladder tiled": (ladder.matmul_tiled, (SD((1024, 512), "bfloat16"), SD((1024, 1024), "bfloat16"))),
    "ladder hoisted": (ladder.matmul_hoisted, (SD((1024, 512), "bfloat16"), SD((1024, 1024), "bfloat16"))),
    "ladder block free": (ladder.matmul_block_free, (SD((1024, 512), "float32"), SD((1024, 1024), "float32"))),
    "attention": (attention.causal_attention, (SD((1, 2, 512, 64), "bfloat16"),) * 3),
    "layer norm": (norms.layer_norm, (SD((1024, 384), "float32"), SD((384,), "float32"), SD((384,), "float32"))),
}


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("case", sorted(COMPILED_CASES))
def test_compiled_replay_gives_the_same_timeline_as_the_checked_replay(case, target):
    kernel, args = COMPILED_CASES[case]
    program = nki.trace(kernel, *args, target=target)
    # three launches on one core: the later ones start on the bytes the earlier ones freed
    assert _timelines(program, False, target, launches=3) == _timelines(program, True, target, launches=3)


def test_compiled_replay_on_several_cores_sharing_hbm_gives_the_same_timelines():
    kernel, args = COMPILED_CASES["ladder tiled"]
    program = nki.trace(kernel, *args, target="trn2")
    fast = _timelines(program, False, cores=3, launches=2)
    assert fast == _timelines(program, True, cores=3, launches=2)
    assert len(fast[2][0]) == 2 * len(program)


@config.override(fast=True)          # a fast path's own behaviour
def test_compiled_replay_is_used_in_timing_and_in_full_mode():
    args = (SD((256, 320), "float32"), SD((320,), "float32"), SD((320,), "float32"))   # traced here only
    program = nki.trace(norms.layer_norm, *args, target="trn2")
    timing = Device("trn2", mode="timing", cores=1)
    timing.run(program, None, None, None)
    cache = program.derived.get("compiled")
    assert len(cache) == 1                                      # compiled once, for Trn2
    resolved = next(iter(cache.values()))
    x = RNG.standard_normal((256, 320)).astype(np.float32)
    g, b = np.ones(320, np.float32), np.zeros(320, np.float32)
    calls = []
    original = values_replay.run_values
    values_replay.run_values = lambda *a: calls.append(1) or original(*a)
    try:
        full = Device("trn2", mode="full", cores=1).run(program, x, g, b)
    finally:
        values_replay.run_values = original
    assert full.outputs is not None and calls == [1]            # values beside the compiled timing
    assert len(cache) == 1 and len(resolved._resolved) == 1     # the same compiled program


def _full_runs(program, args, checked: bool, target="trn2", launches: int = 2):
    """Outputs of each launch and the core's records, regions and clocks after `launches` full-mode
    launches, through the checked replay or the compiled one (timing) + values."""
    from trnlab.hardware import device as device_module
    device = Device(target, mode="full", cores=1)
    original = device_module.execute
    device_module.execute = lambda *a, **k: original(*a, **k, checked=checked)
    try:
        outputs = [device.run(program, *args).outputs for _ in range(launches)]
    finally:
        device_module.execute = original
    c = device.cores[0]
    return outputs, (c.timeline.records, c.timeline.regions, c._free, c._now)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("case", sorted(COMPILED_CASES))
def test_full_mode_compiled_replay_gives_the_same_values_and_timeline_as_the_checked_one(case, target):
    kernel, shapes = COMPILED_CASES[case]
    program = nki.trace(kernel, *shapes, target=target)
    rng = np.random.default_rng(7)
    args = [dtypes.cast(rng.standard_normal(s.shape), dtypes.as_dtype(s.dtype)) for s in shapes]
    fast_out, fast_timeline = _full_runs(program, args, False, target)
    slow_out, slow_timeline = _full_runs(program, args, True, target)
    assert fast_timeline == slow_timeline
    for a, b in zip(fast_out, slow_out):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


@config.override(fast=True)          # a fast path's own behaviour
def test_full_mode_compiled_replay_keeps_the_uninitialized_read_check():
    @nki.jit
    def reads_garbage(a):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:, 0:32], src=a[:, 0:32])
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)              # half of t was never written
        return out

    program = nki.trace(reads_garbage, SD((128, 64), "float32"))
    device = Device("trn2", mode="full", cores=1)
    with pytest.raises(errors.UninitializedReadError):
        device.run(program, np.zeros((128, 64), np.float32))
    assert len(device.cores[0].timeline.records) == 0       # values first: no records were made


def test_full_mode_compiled_replay_continues_the_random_stream_like_the_checked_one():
    @nki.jit
    def drop(a):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dropout(dst=t, data=t, prob=0.5)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    program = nki.trace(drop, SD((128, 64), "float32"))
    x = np.ones((128, 64), np.float32)
    fast, fast_timeline = _full_runs(program, [x], False, launches=3)
    slow, slow_timeline = _full_runs(program, [x], True, launches=3)
    assert fast_timeline == slow_timeline
    assert not np.array_equal(fast[0], fast[1])              # the stream goes on between launches
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)


def test_a_program_loaded_from_json_is_described_again_and_replays_the_same(tmp_path):
    kernel, args = COMPILED_CASES["ladder hoisted"]
    program = nki.trace(kernel, *args, target="trn2")
    program.save(tmp_path / "p.json")
    loaded = Program.load(tmp_path / "p.json")
    assert all(i.issue is None for i in loaded.instructions)       # descriptions are not saved
    assert _timelines(loaded, False) == _timelines(program, True)


def test_resident_inputs_read_only_replay_compiled_and_record_their_reads():
    kernel, args = (ladder.matmul_tiled, (SD((512, 128), "float32"), SD((512, 512), "float32")))
    program = nki.trace(kernel, *args, target="trn2")
    assert _timelines(program, False, resident=True) == _timelines(program, True, resident=True)


def test_a_list_scheduled_copy_compiles_its_own_order():
    from trnlab.hardware.instruction_order import list_schedule
    kernel, args = COMPILED_CASES["ladder tiled"]
    program = nki.trace(kernel, *args, target="trn2")
    _timelines(program, False, launches=1)                       # the original compiled first
    hoisted = list_schedule(program)
    assert _timelines(hoisted, False) == _timelines(hoisted, True)


@config.override(fast=True)          # a fast path's own behaviour
def test_the_cyclic_gc_is_paused_while_tracing_and_restored_after():
    import gc
    from trnlab.hardware import _gc
    seen = []

    @nki.jit
    def probe(a):
        seen.append(gc.isenabled())
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    assert gc.isenabled()
    nki.trace(probe, SD((128, 64), "float32"))
    with _gc.paused():
        with _gc.paused():                       # nested: still paused when the inner one ends
            pass
        assert not gc.isenabled()
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:                                         # a caller's own choice is kept
        with _gc.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_view_rebound_to_a_fresh_tensor_is_the_view_parsed_on_it():
    from hypothesis import given, settings, strategies as st
    from trnlab.hardware.core import NeuronCore
    from trnlab.hardware.tensor import View, fresh_like

    core = NeuronCore("trn2", mode="full")
    proto = core.sbuf.allocate((128, 6, 40), "bfloat16", "tile")
    slots = ("index", "shape", "box", "basic", "part_start", "partitions", "part_first", "size",
             "nbytes", "free_size")

    @settings(max_examples=60, deadline=None)
    @given(st.integers(0, 127), st.integers(1, 128), st.integers(0, 5), st.integers(0, 39),
           st.integers(1, 40))
    def check(p0, np_, a, f0, nf):
        index = (slice(p0, min(p0 + np_, 128)), a, slice(f0, min(f0 + nf, 40)))
        fresh = fresh_like(proto, core.sbuf)
        rebound, parsed = View(proto, index).on(fresh), View(fresh, index)
        assert rebound.tensor is fresh
        assert all(getattr(rebound, s) == getattr(parsed, s) for s in slots)
        assert fresh.written is not None and not fresh.written.any()      # nothing written yet
        assert fresh.full.tensor is fresh and fresh.offset == proto.offset

    check()


# -- one timing model: the compiled replay and the checked core agree on any program -------------------
def _mixed_kernel(script):
    """A kernel issuing `script`: each step (action, i, j, k) of small numbers picks an instruction
    and its operands among the tiles made so far — loads and stores (whole tiles and column halves),
    SBUF-to-SBUF copies, matmuls accumulating into PSUM tiles, transposes, and Vector, Scalar and
    GpSimd instructions reading and overwriting tiles (so RAW, WAR and WAW on overlapping boxes,
    PSUM banks, shared ports, reused bytes all occur)."""
    engines = (nisa.vector_engine, nisa.gpsimd_engine, nisa.scalar_engine)

    def mixed(a, b):
        out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        sb = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)]
        nisa.dma_copy(dst=sb[0], src=a[0:128, :])
        st = [nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)]
        nisa.dma_copy(dst=st[0], src=b[0:128, 0:128])
        ps = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)]

        def half(tile, k):                     # a whole tile or one of its column halves
            return tile if k == 0 else tile[:, (k - 1) * 256:k * 256]

        for action, i, j, k in script:
            if action == 0:                                        # load a new tile
                t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=half(t, k % 3), src=half(a[(i % 2) * 128:(i % 2 + 1) * 128, :], k % 3))
                sb.append(t)
            elif action == 1:                                      # store a tile (or half of one)
                rows = (j % 2) * 128
                nisa.dma_copy(dst=half(out[rows:rows + 128, :], k % 3), src=half(sb[i % len(sb)], k % 3))
            elif action == 2:                                      # SBUF -> SBUF copy into a tile
                nisa.dma_copy(dst=sb[i % len(sb)], src=sb[j % len(sb)])
            elif action == 3:                                      # matmul, accumulating or a new group
                if k % 3 == 0:
                    ps.append(nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum))
                if k % 4 == 1:
                    w = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
                    nisa.dma_copy(dst=w, src=b[(i % 2) * 128:(i % 2 + 1) * 128, 0:128])
                    st.append(w)
                moving = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
                nisa.tensor_copy(dst=moving, src=sb[j % len(sb)], engine=engines[k % 3])
                nisa.nc_matmul(dst=ps[-1], stationary=st[i % len(st)], moving=moving)
            elif action == 4:                                      # PSUM -> SBUF on an engine
                dst = sb[j % len(sb)] if k % 2 else nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                if not k % 2:
                    sb.append(dst)
                nisa.tensor_copy(dst=half(dst, i % 3), src=half(ps[i % len(ps)], i % 3),
                                 engine=(nisa.vector_engine, nisa.scalar_engine)[k % 2])
            elif action == 5:                                      # element-wise, in place or not
                dst = sb[k % len(sb)]
                nisa.tensor_tensor(dst=half(dst, i % 3), data1=half(sb[i % len(sb)], i % 3),
                                   data2=half(sb[j % len(sb)], i % 3), op=nl.add,
                                   engine=engines[k % 2])
            elif action == 6:                                      # activation on the Scalar engine
                src = ps[i % len(ps)] if j % 2 else sb[i % len(sb)]
                nisa.activation(dst=sb[k % len(sb)], op=nl.exp, data=src)
            elif action == 7:                                      # transpose through the Tensor engine
                t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_transpose(dst=t, data=sb[i % len(sb)][:, (j % 4) * 128:(j % 4 + 1) * 128])
                if k % 2:                                          # read back by the Vector engine
                    nisa.tensor_copy(dst=sb[i % len(sb)][:, 0:128], src=t)
            elif action == 8:                                      # a fill on any engine
                nisa.memset(dst=half(sb[i % len(sb)], j % 3), value=0.0, engine=engines[k % 3])
            else:              # engines at once on fresh tiles: they contend for the shared ports
                pair = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf) for _ in range(2)]
                nisa.memset(dst=pair[0], value=1.0, engine=nisa.gpsimd_engine)
                nisa.tensor_copy(dst=half(pair[1], j % 3), src=half(ps[i % len(ps)], j % 3),
                                 engine=nisa.vector_engine)
                nisa.activation(dst=half(sb[j % len(sb)], j % 3), op=nl.exp, data=half(ps[i % len(ps)], j % 3))
                sb.extend(pair)
        nisa.dma_copy(dst=out[0:128, :], src=sb[-1])
        return out

    return mixed


def test_compiled_replay_equals_the_checked_core_on_generated_programs():
    """The property behind the compiled replay: on any program (hypothesis writes small kernels of
    mixed instructions), any preset, one or two cores and several launches, it produces the checked
    core's timeline record for record and leaves the cores in the same state."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    step = st.tuples(st.integers(0, 9), st.integers(0, 7), st.integers(0, 7), st.integers(0, 11))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(step, min_size=4, max_size=40), st.sampled_from(["trn1", "trn2", "trn3"]),
           st.integers(1, 2), st.integers(1, 3))
    def check(script, target, cores, launches):
        program = nki.trace(_mixed_kernel(script), SD((256, 512), "float32"), SD((256, 512), "bfloat16"),
                            target=target)
        fast = _timelines(program, False, target, cores=cores, launches=launches)
        assert fast == _timelines(program, True, target, cores=cores, launches=launches)

    check()


def test_compiled_replay_equals_the_checked_core_with_dma_queues_named():
    """Transfers on queues the program names (as a compiler may) beside ones on the queue free first."""
    import copy
    from dataclasses import replace
    kernel, args = COMPILED_CASES["ladder tiled"]
    traced = nki.trace(kernel, *args, target="trn2")
    program = copy.copy(traced)
    program.instructions = [
        replace(ins, attrs={**ins.attrs, "queue": k % 5}, issue=None)
        if ins.opcode == "dma_copy" and k % 3 == 0 else ins for k, ins in enumerate(traced.instructions)]
    program.issue_spec = None            # (a new instruction list: program.derived is empty already)
    fast = _timelines(program, False, launches=3)
    assert fast == _timelines(program, True, launches=3)
    engines = {r[0] for r in fast[0][0] if r[1] == "dma_copy"}
    assert {4, 5, 6, 7, 8} <= engines and len(engines) > 5       # named queues and chosen ones


def test_the_replays_heap_of_dma_queues_picks_the_queue_the_core_picks():
    """The compiled replay keeps the DMA queues in a heap of (free time, queue); its top must be
    engines.first_free_queue's answer (the lowest-numbered of the queues free first), ties
    included, as transfers end and queues free up in any order."""
    from heapq import heapify, heapreplace
    from hypothesis import given, settings, strategies as st
    from trnlab.hardware.engines import first_free_queue

    @settings(max_examples=100, deadline=None)
    @given(st.integers(1, 16), st.lists(st.sampled_from([0.0, 1.0, 2.5, 2.5, 7.0]), max_size=60))
    def check(queues, durations):
        free = [0.0] * queues
        heap = [(f, q) for q, f in enumerate(free)]
        heapify(heap)
        for d in durations:
            q = first_free_queue(free)
            assert heap[0] == (free[q], q)
            free[q] += d
            heapreplace(heap, (free[q], q))

    check()


def test_compiled_replay_follows_a_changed_cost_model_like_the_checked_core():
    """A change to the cost model or to a scheduling constant changes both paths alike (they call
    the same functions): on cores derived from Trn2 with other DMA latencies, bandwidths, engine
    overheads, queue counts and port sharing, the compiled replay still equals the checked core."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    step = st.tuples(st.integers(0, 9), st.integers(0, 7), st.integers(0, 7), st.integers(0, 11))
    changes = st.fixed_dictionaries({
        "dma_latency_ns": st.sampled_from([1.0, 700.0, 2600.0]),
        "dma_descriptor_ns": st.sampled_from([10.0, 150.0, 900.0]),
        "dma_engine_bandwidth": st.sampled_from([4e9, 17e9, 60e9]),
        "hbm_bandwidth": st.sampled_from([50e9, 410e9, 3e12]),
        "dma_queues": st.sampled_from([1, 3, 16]),
        "vector_static_cycles": st.sampled_from([0, 100, 1000]),
        "matmul_min_cycles": st.sampled_from([1, 64, 512]),
        "stationary_load_speedup": st.sampled_from([1, 4]),
        "sbuf_port_shared": st.booleans(),
        "psum_port": st.sampled_from(["core", "bank", "none"]),
    })

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(step, min_size=8, max_size=40), changes, st.integers(1, 3))
    def check(script, change, launches):
        spec = presets.TRN2.core.derive(**change)
        program = nki.trace(_mixed_kernel(script), SD((256, 512), "float32"), SD((256, 512), "bfloat16"),
                            target=spec)
        assert _timelines(program, False, spec, launches=launches) == _timelines(program, True, spec,
                                                                                 launches=launches)

    check()


@config.override(fast=True)          # a fast path's own behaviour
def test_a_program_is_compiled_and_resolved_once_for_every_later_launch():
    from trnlab.hardware import replay_timing
    program = nki.trace(ladder.matmul_tiled, SD((256, 128), "bfloat16"), SD((256, 1024), "bfloat16"),
                        target="trn2")
    device = Device("trn2", mode="timing", cores=1)
    device.run(program, None, None)
    compiled = replay_timing.compiled_for(program, device.cores[0].spec)
    resolved = dict(compiled._resolved)
    for _ in range(3):
        device.run(program, None, None)
    assert replay_timing.compiled_for(program, device.cores[0].spec) is compiled     # described once
    assert all(compiled._resolved.get(k) is r for k, r in resolved.items())         # resolved once per layout
