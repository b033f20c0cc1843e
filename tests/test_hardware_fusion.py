"""Block tensors and loop fusion (trnlab/hardware/allocate.py `split_block_tensors`,
trnlab/hardware/fusion.py): each logical tile of a block tensor lives from its own first to its own
last instruction, as AWS's block-dimension guide describes; loops over a block tensor that outgrows
SBUF/PSUM in the order written are fused by reordering whole iterations, values unchanged; the
fusion is off under nki.compiler.skip_middle_end_transformations and refused when a dependence
forbids it. Kernels of our own in AWS's public style (tests/nki_kernels/fusion.py)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.hardware import errors
from trnlab.hardware.allocate import allocate, split_block_tensors
from trnlab.hardware.fusion import fused_order
from trnlab.hardware.program import Access, Buffer, Instruction, Program
from tests.nki_kernels import direct_allocation as allocation_kernels
from tests.nki_kernels import fusion as kernels

RNG = np.random.default_rng(11)
PSUM_BYTES = 16 * 1024           # per partition, Trn2 (docs/programs.md)


def _qk(d: int, s: int):
    q = RNG.standard_normal((d, s)).astype(np.float32)
    k = RNG.standard_normal((d, s)).astype(np.float32)
    return q, k, q.T @ k


@pytest.fixture(autouse=True)
def _program_order(monkeypatch):
    """These tests look at fusion's order itself: traced in program order (no list schedule after)."""
    monkeypatch.setattr(nki, "SCHEDULE", "program")


def test_a_fused_program_is_list_scheduled_after_fusion_and_keeps_numpys_values(monkeypatch):
    monkeypatch.setattr(nki, "SCHEDULE", None)           # the default order after fusion
    q, k, want = _qk(128, 1024)
    program = nki.trace(allocation_kernels.all_products_then_reduce, q, k)
    assert program.schedule == "fused+list"
    np.testing.assert_allclose(allocation_kernels.all_products_then_reduce(q, k), want.reshape(1024, 2, 512).max(-1),
                               rtol=1e-5)


def _tiles(program: Program, prefix: str) -> dict:
    """{block index: buffer} of the logical tiles split from the block tensor named `prefix`."""
    out = {}
    for b in program.buffers:
        if b.name.startswith(prefix + "[") and b.first >= 0:
            out[tuple(int(x) for x in b.name[len(prefix) + 1:-1].split(","))] = b
    return out


# -- per-block liveness ------------------------------------------------------------------------------
def test_each_tile_of_a_block_tensor_lives_from_its_own_first_to_its_own_last_instruction():
    x = RNG.standard_normal((8 * 128, 512)).astype(np.float32)
    program = nki.trace(kernels.exp_per_block, x)
    tiles = _tiles(program, "sbuf")
    assert sorted(tiles) == [(i,) for i in range(8)]
    for i in range(7):                                   # load, exp, store of block i, then block i + 1
        assert tiles[(i,)].last < tiles[(i + 1,)].first
    assert program.schedule == "program"                 # it fits as written: nothing reordered
    assert max(len([b for b in tiles.values() if b.first <= k <= b.last])
               for k in range(len(program))) == 1        # one 2 KiB tile live at a time, not all eight
    np.testing.assert_allclose(kernels.exp_per_block(x), np.exp(x), rtol=1e-6)


def _hand_block_program(first_index) -> Program:
    """A (4, par_dim(128), 2048) fp32 PSUM block tensor (32 KiB per partition), first touched with
    `first_index`, then each block read in turn."""
    tensor = Buffer(id=0, name="qk", memory="psum", shape=(4, 128, 2048), dtype="float32", partition_axis=1)
    out = Buffer(id=1, name="out", memory="sbuf", shape=(128, 2048), dtype="float32", partition_axis=0)
    instructions = [Instruction("memset", "dve", {"dst": Access(0, first_index)}, {"value": 0.0})]
    instructions += [Instruction("tensor_copy", "act", {"dst": Access(1, None), "src": Access(0, (i, slice(None), slice(None)))})
                     for i in range(4)]
    program = Program(name="hand", target="trn2", buffers=[tensor, out], instructions=instructions)
    for b in program.buffers:
        ks = [k for k, ins in enumerate(instructions) if any(a.buffer == b.id for a in ins.operands.values())]
        b.first, b.last = ks[0], ks[-1]
    return program


def test_a_block_tensor_an_access_spans_stays_one_buffer_and_is_refused_by_name():
    program = _hand_block_program(None)                  # memset of the whole tensor: every block at once
    assert not split_block_tensors(program)
    with pytest.raises(errors.PSUMBlockTensorOverflowError, match="an access spans several blocks") as caught:
        allocate(program)
    assert "4 logical tiles of 8.0 KiB = 32.0 KiB" in str(caught.value)


def test_a_block_tensor_accessed_block_by_block_splits_into_tiles_that_fit():
    program = _hand_block_program((0, slice(None), slice(None)))
    assert split_block_tensors(program)
    allocate(program)
    tiles = _tiles(program, "qk")
    assert sorted(tiles) == [(0,), (1,), (2,), (3,)]
    assert program.buffers[0].first == -1                # the block tensor itself: no instruction left
    assert program.instructions[2].operands["src"].buffer == tiles[(1,)].id
    assert [(b.first, b.last) for _, b in sorted(tiles.items())] == [(0, 1), (2, 2), (3, 3), (4, 4)]


def test_the_traces_descriptions_carried_onto_the_tiles_are_what_describing_them_gives():
    # split_block_tensors renames the trace's per-instruction descriptions (compiled.py) instead of
    # describing the program again: the same tuples, PSUM bank ranges included
    from trnlab.hardware.describe import describe
    q, k, _ = _qk(128, 512)
    x = RNG.standard_normal((8 * 128, 512)).astype(np.float32)
    w = RNG.standard_normal((128, 512)).astype(np.float32)
    for program in (nki.trace(kernels.scores_minus_row_max, q, k), nki.trace(kernels.exp_per_block, x),
                    nki.trace(kernels.one_block_product, q[:, :128], w)):
        assert program.schedule == "program" and program.blocks
        carried = [ins.issue for ins in program.instructions]
        assert None not in carried
        assert carried == describe(program, program.spec)


# -- fusion ------------------------------------------------------------------------------------------
def test_loops_over_a_psum_block_tensor_twice_psum_are_fused_and_give_numpys_values():
    q, k, s = _qk(128, 1024)                              # (8, 2, par_dim(128), 512) fp32: 32 KiB
    np.testing.assert_allclose(kernels.scores_minus_row_max(q, k), s - s.max(axis=1, keepdims=True),
                               rtol=1e-5, atol=1e-4)
    program = nki.trace(kernels.scores_minus_row_max, q, k)
    assert program.schedule == "fused"
    assert program.peak_bytes("psum") <= PSUM_BYTES


def test_fusion_moves_each_consumer_iteration_up_to_just_after_its_producer_iteration():
    q, k, _ = _qk(128, 1024)
    program = nki.trace(kernels.scores_minus_row_max, q, k)
    tiles = _tiles(program, "psum")
    for i in range(7):
        group, following = [b for (r, _), b in tiles.items() if r == i], [b for (r, _), b in tiles.items() if r == i + 1]
        # row block i is written, reduced and subtracted before row block i + 1's first matmul
        assert max(b.last for b in group) < min(b.first for b in following)
    lines = [ins.source[1] for ins in program.instructions if ins.source]
    matmul_line = next(ins.source[1] for ins in program.instructions if ins.opcode == "nc_matmul")
    subtract_line = next(ins.source[1] for ins in program.instructions if ins.opcode == "tensor_scalar")
    # the kernel's three loops now interleave: matmuls come again after the first subtraction
    assert lines.index(subtract_line) < len(lines) - 1 - lines[::-1].index(matmul_line)


@settings(max_examples=6, deadline=None)
@given(st.integers(2, 4), st.sampled_from([64, 128]))
def test_fused_loops_give_numpys_values_for_any_number_of_column_blocks_and_head_size(blocks_of_512, d):
    q, k, s = _qk(d, 512 * blocks_of_512)                 # 4 x blocks_of_512 tiles per row block: always > PSUM
    out = kernels.scores_minus_row_max(q, k)
    np.testing.assert_allclose(out, s - s.max(axis=1, keepdims=True), rtol=1e-5, atol=1e-4)


def test_a_program_that_fits_as_written_keeps_its_order():
    q, k, s = _qk(128, 512)                               # (4, 1, par_dim(128), 512): 8 KiB, fits
    program = nki.trace(kernels.scores_minus_row_max, q, k)
    assert program.schedule == "program"
    np.testing.assert_allclose(kernels.scores_minus_row_max(q, k), s - s.max(axis=1, keepdims=True),
                               rtol=1e-5, atol=1e-4)


def test_skip_middle_end_transformations_keeps_the_loops_as_written_and_refuses_by_name():
    q, k, _ = _qk(128, 1024)
    with pytest.raises(errors.PSUMBlockTensorOverflowError) as caught:
        kernels.scores_minus_row_max_as_written(q, k)
    message = str(caught.value)
    assert "8 x 2 logical tiles of 2.0 KiB = 32.0 KiB per partition, PSUM holds 16.0 KiB" in message
    assert "marked nki.compiler.skip_middle_end_transformations" in message
    assert caught.value.kernel_location[1] > 0            # the producer loop's matmul line
    with pytest.raises(errors.PSUMBlockTensorOverflowError, match="skip_middle_end_transformations"):
        kernels.scores_minus_row_max_as_written[1](q, k)  # kernel[grid] keeps the directive


def test_loops_over_an_sbuf_block_tensor_larger_than_sbuf_are_fused_too():
    x = (RNG.standard_normal((32 * 128, 2048)) * 0.1).astype(np.float32)   # 32 x 8 KiB = 256 KiB per partition
    np.testing.assert_allclose(kernels.load_exp_then_double(x), 2 * np.exp(x), rtol=1e-6)
    assert nki.trace(kernels.load_exp_then_double, x).schedule == "fused"
    with pytest.raises(errors.SBUFBlockTensorOverflowError, match="skip_middle_end_transformations"):
        kernels.load_exp_then_double_as_written(x)       # the directive below @nki.jit


def test_a_consumer_needing_every_block_first_cannot_be_fused_and_the_refusal_says_why():
    q, k, _ = _qk(128, 1024)
    with pytest.raises(errors.PSUMBlockTensorOverflowError) as caught:
        kernels.scores_minus_partition_max(q, k)
    message = str(caught.value)
    assert "loop fusion (trnlab.hardware.fusion) did not help" in message
    assert "depends on one of group 7" in message         # the reduction over all 8 row blocks


def test_fusing_a_fused_program_again_moves_nothing():
    q, k, _ = _qk(128, 1024)
    fused = nki.trace(kernels.scores_minus_row_max, q, k)
    tensor = next(b.id for b in fused.buffers if b.name == "psum")
    order, why = fused_order(fused, tensor)
    assert order is None and "already fused" in why


def _exact_conflict(program: Program, a, b) -> bool:
    """Do instructions a and b touch a common element of a buffer, one of them writing it?"""
    from trnlab.hardware.allocate import _box
    from trnlab.hardware.program import WRITES

    def regions(ins):
        for name, access in ins.operands.items():
            shape = program.buffers[access.buffer].shape
            index = access.index if access.index is None or isinstance(access.index, tuple) else (access.index,)
            yield access.buffer, _box(index, shape), name in WRITES
    for buffer, box, writes in regions(a):
        for other, other_box, other_writes in regions(b):
            if buffer == other and (writes or other_writes) and all(
                    lo1 < hi2 and lo2 < hi1 for (lo1, hi1, _), (lo2, hi2, _) in zip(box, other_box)):
                return True
    return False


@settings(max_examples=5, deadline=None)
@given(st.sampled_from(["psum", "sbuf"]), st.integers(2, 3))
def test_the_fused_order_keeps_every_pair_of_dependent_instructions_in_order(memory, size):
    import trnlab.hardware.fusion as fusion
    seen = []
    real = fusion.reorder

    def recording(program, order, name):
        seen.append((program, list(order)))
        return real(program, order, name)
    fusion.reorder = recording
    try:
        if memory == "psum":
            q, k, _ = _qk(64, 512 * size)
            kernel, args = kernels.scores_minus_row_max, (q, k)
        else:
            x = (RNG.standard_normal((16 * size * 128, 2048)) * 0.1).astype(np.float32)
            kernel, args = kernels.load_exp_then_double, (x,)
        nki._PROGRAMS.clear()                             # trace again, so that the fusion runs
        nki.trace(kernel, *args)
    finally:
        fusion.reorder = real
    program, order = seen[-1]
    position = {k: i for i, k in enumerate(order)}
    instructions = program.instructions
    moved = [k for k in range(len(order)) if order[k] != k]
    assert moved                                          # something was reordered
    for a in range(len(instructions)):
        for b in range(a + 1, len(instructions)):
            if position[a] > position[b]:                 # reordered pair: must be independent
                assert not _exact_conflict(program, instructions[a], instructions[b]), (a, b)
