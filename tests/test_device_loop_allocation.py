"""Allocation of programs with loops the device runs (a `program.Loop`: the body once, repeated when
the program runs): tiles placed by liveness, each body a region live across all its iterations, and
SBUF tiles spilled to HBM when they do not fit and the `spill` switch is on (trnlab/hardware/spill.py,
ASSUMED), as for straight-line programs.

Our own kernels in the style of AWS's NKI 0.7 pages: a row-tile loop bounded by a register loaded
from a kernel input (`nl.fori_loop` / `nl.dynamic_range`), on a core with little SBUF."""
import warnings

import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware import presets
from trnlab.hardware.errors import SBUFOverflowError
from trnlab.hardware.instruction_order import check_disjoint
from trnlab.hardware.spill import NOTE, SpillWarning

from nki_kernels.run_time_loops import register_from

P = 128
KiB = 1024
SMALL_SBUF = presets.TRN2.core.derive(sbuf_partition_bytes=20 * KiB)


@nki.jit
def double_rows(a, row_tiles, chunk: int = 512):
    """out[:128 t] = 2 a[:128 t] (t = row_tiles), out[128 t:] = 0, for a [M, H] fp32: a fori_loop over
    row tiles whose body loads, doubles and stores each [128, chunk] column chunk — 2 tiles per chunk,
    H / chunk chunks; only a few chunks' tiles are live at once."""
    M, H = a.shape
    out = nl.ndarray((M, H), dtype=a.dtype, buffer=nl.shared_hbm)
    zeros = nl.ndarray((P, H), dtype=a.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    for m in range(M // P):
        nisa.dma_copy(dst=out[m * P:(m + 1) * P, :], src=zeros)

    def body(i):
        for h in range(H // chunk):
            rows = [[H, P], [1, chunk]]                        # [128 partitions, chunk] at row tile i
            x = nl.ndarray((P, chunk), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a.ap(pattern=rows, offset=h * chunk, scalar_offset=i, indirect_dim=0))
            y = nl.ndarray((P, chunk), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=out.ap(pattern=rows, offset=h * chunk, scalar_offset=i, indirect_dim=0), src=y)

    nl.fori_loop(0, register_from(row_tiles), body, P)           # i: 0, 128, ... (a register)
    return out


def _zeros_and_three_times(bias, H):
    """A zeroed [128, H] fp32 accumulator and 3 bias ([128, H]), both computed on chip before a loop."""
    acc = nl.ndarray((P, H), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    b = nl.ndarray((P, H), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=bias)
    scaled = nl.ndarray((P, H), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=scaled, data=b, op0=nl.multiply, operand0=3.0)
    return acc, scaled


@nki.jit
def sum_rows_plus_scaled_bias(a, row_tiles, bias):
    """out = (sum of the first t row tiles of a [M, H]) + 3 bias, t = row_tiles: an accumulator
    carried across a dynamic_range loop (set before it, updated in every iteration, read after it),
    and 3 bias, computed on chip before the loop and read only after it — each [128, H] fp32."""
    M, H = a.shape
    out = nl.ndarray((P, H), dtype=nl.float32, buffer=nl.shared_hbm)
    acc, scaled = _zeros_and_three_times(bias, H)
    for i in nl.dynamic_range(0, register_from(row_tiles), P):
        x = nl.ndarray((P, H), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a.ap(pattern=[[H, P], [1, H]], offset=0, scalar_offset=i, indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=nl.add)
    nisa.tensor_tensor(dst=acc, data1=acc, data2=scaled, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit
def add_scaled_bias_to_rows(a, row_tiles, bias):
    """out[:128 t, :W] = a[:128 t, :W] + 2 bias[:, :W] (W = 1024), out[:128 t, W:] = a[:128 t, W:],
    t = row_tiles, out[128 t:] = 0, for a [M, 2048] fp32 and bias [128, 1536]: 2 bias[:, :W] (4 KiB per
    partition) computed from the loaded bias (6 KiB) before the loop, then added to each row tile
    (8 KiB) in a fori_loop; the bias tile dies before the loop, the scaled one lives through it."""
    M, H = a.shape
    W = 1024
    out = nl.ndarray((M, H), dtype=a.dtype, buffer=nl.shared_hbm)
    b = nl.ndarray((P, bias.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=bias)
    scaled = nl.ndarray((P, W), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=scaled, data=b[:, 0:W], op0=nl.multiply, operand0=2.0)
    for m in range(M // P):
        nisa.dma_copy(dst=out[m * P:(m + 1) * P, :], src=a[m * P:(m + 1) * P, :])

    def body(i):
        rows = [[H, P], [1, H]]                                # [128 partitions, H] at row tile i
        x = nl.ndarray((P, H), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a.ap(pattern=rows, offset=0, scalar_offset=i, indirect_dim=0))
        nisa.tensor_tensor(dst=x[:, 0:W], data1=x[:, 0:W], data2=scaled, op=nl.add)
        nisa.dma_copy(dst=out.ap(pattern=rows, offset=0, scalar_offset=i, indirect_dim=0), src=x)

    nl.fori_loop(0, register_from(row_tiles), body, P)
    return out


@nki.jit
def sum_rows_repeated(a, row_tiles, repeats, bias):
    """out = repeats x (sum of the first t row tiles of a [M, H]) + 3 bias, t = row_tiles: a fori_loop
    over row tiles around a dynamic_range that adds the row tile `repeats` times into a partial sum
    (the outer body's tile, carried over the inner loop), added to an accumulator carried over both."""
    M, H = a.shape
    out = nl.ndarray((P, H), dtype=nl.float32, buffer=nl.shared_hbm)
    acc, scaled = _zeros_and_three_times(bias, H)
    n_inner = register_from(repeats)

    def body(i):
        part = nl.ndarray((P, H), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=part, value=0.0)
        for _ in nl.dynamic_range(n_inner):
            x = nl.ndarray((P, H), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a.ap(pattern=[[H, P], [1, H]], offset=0, scalar_offset=i, indirect_dim=0))
            nisa.tensor_tensor(dst=part, data1=part, data2=x, op=nl.add)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=part, op=nl.add)

    nl.fori_loop(0, register_from(row_tiles), body, P)
    nisa.tensor_tensor(dst=acc, data1=acc, data2=scaled, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


RNG = np.random.default_rng(7)
A_WIDE = RNG.normal(size=(512, 4096)).astype(np.float32)          # rows of 16 KiB per partition
A_SUM = RNG.normal(size=(512, 2048)).astype(np.float32)           # [128, 2048] fp32 tiles: 8 KiB
BIAS = RNG.normal(size=(P, 2048)).astype(np.float32)


def _sum(t: int) -> np.ndarray:
    return A_SUM[:t * P].reshape(t, P, 2048).sum(axis=0, initial=0.0) + 3 * BIAS


def _overlap(b, c) -> bool:
    return b.offset < c.offset + c.partition_bytes and c.offset < b.offset + b.partition_bytes


def _written_by(program, opcode: str):
    """The SBUF tile the program's first `opcode` instruction writes."""
    ins = next(ins for ins in program.instructions if ins.opcode == opcode)
    return program.buffers[ins.operands["dst"].buffer]


def _body_tiles(program, loop) -> list:
    return [b for b in program.buffers
            if b.memory == "sbuf" and b.first >= 0 and loop.begin <= b.first and b.last < loop.end]


@pytest.mark.parametrize("t", [0, 1, 3])
def test_tiles_that_fit_only_by_liveness_run_in_a_device_loop(t):
    # the body's 16 tiles of [128, 512] fp32 hold 32 KiB per partition, SBUF 20 KiB: they run
    # because each is live only from its load to its store, and its bytes serve the next chunk
    program = nki.trace(double_rows, A_WIDE, np.array([[t * P]], np.int32), target=SMALL_SBUF)
    (loop,) = program.loops
    body = _body_tiles(program, loop)
    assert sum(b.partition_bytes for b in body) > SMALL_SBUF.sbuf_partition_bytes
    assert not any(ins.line.startswith(NOTE) for ins in program.instructions)      # nothing spilled
    run = nki.run(double_rows, A_WIDE, np.array([[t * P]], np.int32), target=SMALL_SBUF)
    expected = np.zeros_like(A_WIDE)
    expected[:t * P] = 2 * A_WIDE[:t * P]
    np.testing.assert_array_equal(run.outputs, expected)


@pytest.mark.parametrize("t", [0, 2, 4])
def test_a_device_loop_program_that_does_not_fit_is_spilled_and_its_values_are_unchanged(t):
    # live in the loop: acc and 3 bias (8 KiB per partition each) and the body's row tile: 24 KiB of 20
    with config.override(spill=True), warnings.catch_warnings():
        warnings.simplefilter("ignore", SpillWarning)      # (said once, when the program is traced)
        run = nki.run(sum_rows_plus_scaled_bias, A_SUM, np.array([[t * P]], np.int32), BIAS, target=SMALL_SBUF)
    np.testing.assert_allclose(run.outputs, _sum(t), rtol=1e-5, atol=1e-5)
    assert run.profile().spilled_bytes > 0


def test_a_tile_carried_across_a_device_loop_is_spilled_only_outside_it():
    small = SMALL_SBUF.derive()                           # (a core of its own: traced again, warning)
    with config.override(spill=True), pytest.warns(SpillWarning, match="spilled to HBM"):
        program = nki.trace(sum_rows_plus_scaled_bias, A_SUM, np.array([[2 * P]], np.int32), BIAS, target=small)
    (loop,) = program.loops
    spills = [ins for ins in program.instructions if ins.line.startswith(NOTE)]
    body = program.instructions[loop.begin:loop.end]
    assert spills and not any(ins.line.startswith(NOTE) for ins in body)
    acc, scaled = _written_by(program, "memset"), _written_by(program, "tensor_scalar")
    # acc, spilled before the loop, comes back before it and keeps its bytes over every iteration;
    # 3 bias goes out before the loop and comes back after it
    assert [ins.line.split()[1] for ins in spills if f"{acc.name!r} of" in ins.line] == ["store", "reload"]
    reloads = [k for k, ins in enumerate(program.instructions)
               if ins.line.startswith(f"{NOTE}reload {scaled.name!r} of")]
    assert reloads and all(k >= loop.end for k in reloads)


@pytest.mark.parametrize("t,repeats", [(0, 2), (2, 3), (3, 0)])
def test_nested_device_loops_that_do_not_fit_are_spilled_and_their_values_are_unchanged(t, repeats):
    # 28 KiB of SBUF; in the inner body acc, 3 bias, the partial sum and the row tile (8 KiB each)
    target = presets.TRN2.core.derive(sbuf_partition_bytes=28 * KiB)
    args = (A_SUM, np.array([[t * P]], np.int32), np.array([[repeats]], np.int32), BIAS)
    with config.override(spill=True), warnings.catch_warnings():
        warnings.simplefilter("ignore", SpillWarning)
        program = nki.trace(sum_rows_repeated, *args, target=target)
        run = nki.run(sum_rows_repeated, *args, target=target)
    outer, inner = program.loops
    assert outer.begin < inner.begin and inner.end < outer.end
    assert any(ins.line.startswith(NOTE) for ins in program.instructions)
    assert not any(ins.line.startswith(NOTE) for ins in program.instructions[outer.begin:outer.end])
    np.testing.assert_allclose(run.outputs, repeats * (_sum(t) - 3 * BIAS) + 3 * BIAS, rtol=1e-5, atol=1e-5)
    with config.override(spill=False), pytest.raises(SBUFOverflowError):
        nki.trace(sum_rows_repeated, *args, target=target)


def test_without_spilling_the_overflow_is_refused_at_the_kernel_line():
    with config.override(spill=False), pytest.raises(SBUFOverflowError, match="SBUF") as refused:
        nki.trace(sum_rows_plus_scaled_bias, A_SUM, np.array([[P]], np.int32), BIAS, target=SMALL_SBUF)
    assert "test_device_loop_allocation.py" in str(refused.value)


@pytest.mark.parametrize("spill", [False, True])
def test_a_tile_live_across_a_device_loop_is_not_reused_inside_it(spill):
    # with room (spill off) and spilled (spill on): the accumulator's bytes are the accumulator's in
    # every iteration — no tile of the body may take them, though the body's tiles die each iteration
    target = presets.TRN2.core.derive(sbuf_partition_bytes=40 * KiB) if not spill else SMALL_SBUF
    with config.override(spill=spill), warnings.catch_warnings():
        warnings.simplefilter("ignore", SpillWarning)
        program = nki.trace(sum_rows_plus_scaled_bias, A_SUM, np.array([[3 * P]], np.int32), BIAS, target=target)
        run = nki.run(sum_rows_plus_scaled_bias, A_SUM, np.array([[3 * P]], np.int32), BIAS, target=target)
    (loop,) = program.loops
    carried = [b for b in program.buffers if b.memory == "sbuf" and b.first >= 0
               and b.first < loop.begin and b.last >= loop.end]
    acc = next(program.buffers[ins.operands["dst"].buffer] for ins in program.instructions[loop.begin:loop.end]
               if ins.opcode == "tensor_tensor")              # (spilled: the tile it came back in)
    assert acc in carried
    body = _body_tiles(program, loop)
    assert body
    assert not any(_overlap(b, c) for b in body for c in carried)
    np.testing.assert_allclose(run.outputs, _sum(3), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("t", [0, 2, 4])
def test_device_loop_tiles_that_fit_but_not_in_next_fit_order_are_packed(t):
    # 16 KiB of SBUF: next fit leaves the scaled bias (4 KiB, live through the loop) at 6 KiB, after
    # the 6 KiB bias that died before the loop, so no 8 KiB gap is left for the row tile, though
    # 12 KiB are live at once; packed by size, the row tile goes first. Nothing is spilled.
    target = presets.TRN2.core.derive(sbuf_partition_bytes=16 * KiB)
    a, bias = A_SUM, RNG.normal(size=(P, 1536)).astype(np.float32)
    with config.override(spill=False):
        program = nki.trace(add_scaled_bias_to_rows, a, np.array([[t * P]], np.int32), bias, target=target)
        run = nki.run(add_scaled_bias_to_rows, a, np.array([[t * P]], np.int32), bias, target=target)
    (loop,) = program.loops
    scaled = _written_by(program, "tensor_scalar")
    (row,) = _body_tiles(program, loop)
    assert not _overlap(row, scaled) and row.offset + row.partition_bytes <= target.sbuf_partition_bytes
    check_disjoint(program)                                 # no two tiles live at once share a byte
    assert not any(ins.line.startswith(NOTE) for ins in program.instructions)
    expected = a.copy()
    expected[:t * P, :1024] += 2 * bias[:, :1024].reshape(1, P, 1024).repeat(t, 0).reshape(t * P, 1024)
    np.testing.assert_allclose(run.outputs, expected, rtol=1e-6, atol=1e-6)


def test_a_tile_shared_with_the_code_around_a_loop_is_in_use_over_the_whole_loop():
    # what the spill scan sees (spill._use_spans): an outer loop over instructions 10..29 and an inner
    # one over 15..19; a use inside the loop of a tile also used outside it covers the loop, the
    # outermost such; a tile of one body alone keeps its uses as they are
    from trnlab.hardware.program import Loop, Program
    from trnlab.hardware.spill import _use_spans
    program = Program("spans", "trn2", loops=[Loop(10, 30, 0, {"register": 0}), Loop(15, 20, 0, {"register": 1})])
    spans = _use_spans(program, {1: [5, 16, 25], 2: [12, 17, 25], 3: [16, 18], 4: [3, 40]})
    assert spans[1] == ([5, 10], [5, 29])              # used before the outer loop and in it
    assert spans[2] == ([12, 15, 25], [12, 19, 25])    # in the outer body, around the inner loop
    assert spans[3] == ([16, 18], [16, 18])            # the inner body's alone
    assert spans[4] == ([3, 40], [3, 40])              # live over the loops, not used in them
