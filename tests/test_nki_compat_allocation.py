"""Direct allocation (nki.compiler sbuf/psum.mod_alloc) follows liveness, as AWS's kernels with direct
allocation expect: tiles the kernel placed may share bytes when no instruction uses both, sharing
bytes while both are live is refused by name, each logical tile of a rotating PSUM block starts its
own accumulation group, and a block tensor larger than PSUM runs with its loops fused. Kernels of our own in
AWS's public style (tests/nki_kernels/direct_allocation.py)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.hardware import errors
from trnlab.hardware.allocate import allocate
from trnlab.hardware.program import Buffer, Instruction, Program
from tests.nki_kernels import direct_allocation as kernels

RNG = np.random.default_rng(7)


def test_direct_allocations_of_other_shapes_share_psum_banks_when_never_live_together():
    x = RNG.standard_normal((128, 512)).astype(np.float32)
    w = RNG.standard_normal((128, 512)).astype(np.float32)
    program = nki.trace(kernels.transpose_then_product, x, w)
    psum = [b for b in program.buffers if b.memory == "psum" and b.first >= 0]
    # the block tensor's four tiles are buffers of their own, one per bank (num_bank_tiles=(4,))
    blocks_t = sorted((b for b in psum if b.shape == (128, 128)), key=lambda b: b.first)
    product = next(b for b in psum if b.shape == (128, 512))
    assert [b.offset for b in blocks_t] == [0, 2048, 4096, 6144]
    assert product.offset == blocks_t[0].offset == 0                    # the same bank 0, another shape
    assert blocks_t[0].last < product.first                            # one after the other
    expected = sum(x[:, i * 128:(i + 1) * 128] @ w for i in range(4))
    np.testing.assert_allclose(kernels.transpose_then_product(x, w), expected, rtol=1e-4, atol=1e-3)
    assert nki.run(kernels.transpose_then_product, x, w, timing_only=True).latency_us > 0


def test_direct_allocations_live_together_on_the_same_bytes_are_refused_naming_both_and_where():
    a = RNG.standard_normal((128, 512)).astype(np.float32)
    b = RNG.standard_normal((128, 512)).astype(np.float32)
    with pytest.raises(errors.DirectAllocationOverlapError) as caught:
        kernels.two_live_tiles_on_one_bank(a, b)
    error = caught.value
    assert len(error.tiles) == 2 and error.tiles[0] != error.tiles[1]
    message = str(error)
    assert all(repr(name) in message for name in error.tiles)
    assert "share bytes 0-1024" in message and "nc_matmul" in message
    assert "second[...] = nisa.nc_matmul" in message                     # the kernel line
    assert isinstance(error, errors.HardwareError)


def test_each_logical_tile_of_a_rotating_psum_block_starts_its_own_accumulation_group():
    # the four row blocks' accumulators all sit on bank 3: without a group per logical tile, block
    # i would add to what block i - 1 left there
    a = RNG.standard_normal((512, 512)).astype(np.float32)
    b = RNG.standard_normal((512, 256)).astype(np.float32)
    np.testing.assert_allclose(kernels.row_block_products(a, b), a.T @ b, rtol=1e-4, atol=1e-3)


def test_psum_block_tensor_larger_than_psum_runs_with_its_two_loops_fused():
    # 8 x 2 tiles of 2 KiB (32 KiB per partition, twice PSUM), all written before the second loop:
    # the loops are fused (trnlab.hardware.fusion); the refusal under skip_middle_end_transformations
    # is tests/test_hardware_fusion.py's
    q = RNG.standard_normal((128, 1024)).astype(np.float32)
    np.testing.assert_allclose(kernels.all_products_then_reduce(q, q), (q.T @ q).reshape(1024, 2, 512).max(-1),
                               rtol=1e-5)
    assert nki.trace(kernels.all_products_then_reduce, q, q).schedule == "fused+list"   # then list-scheduled
    small = q[:, :512]                                                  # 4 x 1 tiles: 8 KiB fit as written
    np.testing.assert_allclose(kernels.all_products_then_reduce(small, small),
                               (small.T @ small).reshape(512, 1, 512).max(-1), rtol=1e-5)
    assert nki.trace(kernels.all_products_then_reduce, small, small).schedule == "list"


# -- the allocator on programs built by hand: direct allocations and allocator-placed tiles ---------
def _program(tiles) -> Program:
    """One PSUM buffer per (first, last, offset or None, bytes per partition); instructions enough."""
    buffers = [Buffer(id=i, name=f"t{i}", memory="psum", shape=(128, size // 4), dtype="float32",
                      partition_axis=0, first=first, last=last,
                      placement=None if offset is None else {"offset": offset, "kind": "PsumModAlloc"})
               for i, (first, last, offset, size) in enumerate(tiles)]
    n = max(t[1] for t in tiles) + 1
    return Program(name="hand", target="trn2", buffers=buffers,
                   instructions=[Instruction(opcode="memset", engine="dve", operands={}) for _ in range(n)])


def _meet(a, b) -> bool:
    """Live at one instruction and sharing a byte."""
    return (a.first <= b.last and b.first <= a.last
            and a.offset < b.offset + b.partition_bytes and b.offset < a.offset + a.partition_bytes)


tile = st.tuples(st.integers(0, 12), st.integers(0, 6), st.one_of(st.none(), st.sampled_from([0, 2048, 4096, 6144])),
                 st.sampled_from([512, 1024, 2048]))


@settings(max_examples=200, deadline=None)
@given(st.lists(tile, min_size=1, max_size=8))
def test_direct_allocations_overlap_in_bytes_only_when_never_live_together(raw):
    tiles = [(first, first + length, offset, size) for first, length, offset, size in raw]
    program = _program(tiles)
    placed = [b for b in program.buffers if b.placement]
    clash = any(_meet(_with_offset(a), _with_offset(b)) for i, a in enumerate(placed) for b in placed[i + 1:])
    if clash:
        with pytest.raises(errors.DirectAllocationOverlapError):
            allocate(program)
        return
    try:
        allocate(program)
    except errors.PSUMOverflowError:
        return                       # the allocator-placed tiles did not fit around the direct ones
    for b in placed:
        assert b.offset == b.placement["offset"]
    for i, a in enumerate(program.buffers):
        for b in program.buffers[i + 1:]:
            assert not _meet(a, b), (a, b)


def _with_offset(b):
    b.offset = b.placement["offset"]
    return b


def test_an_allocator_placed_tile_avoids_a_direct_allocation_that_becomes_live_during_its_life():
    # t0 (placed by the allocator) lives 0..10; t1, the kernel's own, takes bytes 0..2048 from 5
    program = allocate(_program([(0, 10, None, 2048), (5, 6, 0, 2048)]))
    auto, fixed = program.buffers
    assert fixed.offset == 0 and auto.offset >= 2048


def test_a_direct_allocation_declared_in_a_loop_body_is_one_tensor_as_nki_traces_the_body_once():
    # 32 row tiles x 2 declarations x 4 KiB would be 256 KiB of SBUF if each iteration took new bytes
    x = RNG.standard_normal((32 * 128, 1024)).astype(np.float32)
    run = nki.run(kernels.scale_with_an_address_counter, x, 2.0)
    np.testing.assert_allclose(run.outputs, 2.0 * x, rtol=1e-6)
    offsets = {b.offset for b in run.program.buffers if b.memory == "sbuf" and b.first >= 0}
    assert offsets == {0, 4096}                                        # the first iteration's two


def test_a_custom_psum_allocation_puts_each_block_on_the_bank_its_function_names():
    a = RNG.standard_normal((128, 256)).astype(np.float32)
    b = RNG.standard_normal((128, 512)).astype(np.float32)
    run = nki.run(kernels.products_on_chosen_banks, a, b)
    np.testing.assert_allclose(run.outputs, np.stack([a[:, :128].T @ b, a[:, 128:].T @ b]), rtol=1e-4, atol=1e-3)
    banks = sorted({b.offset // 2048 for b in run.program.buffers if b.memory == "psum" and b.first >= 0})
    assert banks == [1, 5]


# -- garbage in the padding of a tile: an error only where it reaches an output ----------------------
def test_garbage_in_a_tiles_padding_that_the_store_masks_out_is_not_an_error():
    from tests.nki_kernels.padded_tiles import project_with_padded_weights
    xT = RNG.standard_normal((128, 128)).astype(np.float32)
    w = RNG.standard_normal((128, 384)).astype(np.float32)
    np.testing.assert_allclose(project_with_padded_weights(xT, w), xT.T @ w, rtol=1e-4, atol=1e-3)


def test_garbage_that_reaches_an_output_is_an_uninitialised_read_naming_its_origin():
    from tests.nki_kernels.padded_tiles import project_with_padded_weights
    xT = RNG.standard_normal((128, 128)).astype(np.float32)
    w = RNG.standard_normal((128, 384)).astype(np.float32)
    with pytest.raises(errors.UninitializedReadError) as caught:
        project_with_padded_weights(xT, w, mask_the_store=False)
    message = str(caught.value)
    assert "16384 of 65536 elements" in message and "hold garbage" in message   # 128 columns x 128
    assert "nc_matmul read never-written" in message and "dma_copy" in message


@pytest.mark.parametrize("kernel, shapes", [
    (kernels.transpose_then_product, ((128, 512), (128, 512))),
    (kernels.row_block_products, ((512, 512), (512, 256))),
    (kernels.products_on_chosen_banks, ((128, 256), (128, 512))),
])
def test_a_program_rewritten_for_direct_allocation_replays_compiled_as_checked(kernel, shapes):
    # the rewrite gives instructions new buffer ids: the compiled timing replay (described again)
    # must still repeat the checked replay record for record, over launches that reuse freed bytes
    from tests.test_program import _timelines
    program = nki.trace(kernel, *(nki.ShapeDtype(s, "float32") for s in shapes))
    placed = [b for b in program.buffers if b.placement and b.first >= 0]
    tiles_split = any("[" in b.name for b in placed)
    values_split = len({(b.memory, b.offset) for b in placed}) < len(placed)
    assert tiles_split or values_split                                 # the program was rewritten
    assert _timelines(program, False, launches=2) == _timelines(program, True, launches=2)


def test_plus_equals_through_an_arange_access_pattern_accumulates_in_psum_without_a_copy():
    # AWS's allocated attention: attn_res_psum[g, ip_out, if_out] += nisa.nc_matmul(...) — the
    # write-back of `+=` is the region just accumulated into, as with slices: no tensor_copy
    import trnlab.nki.isa as nisa
    import trnlab.nki.language as nl

    @nki.jit
    def accumulate(a_tensor, b_tensor):
        out_tensor = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((2, nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.psum)
        i_p, i_f = nl.mgrid[0:128, 0:128]
        for k in nl.affine_range(4):
            a = nl.load(a_tensor[nl.ds(k * 128, 128), :])
            b = nl.load(b_tensor[nl.ds(k * 128, 128), :])
            acc[1, i_p, i_f] += nisa.nc_matmul(stationary=a, moving=b)
        nl.store(out_tensor, value=nl.copy(acc[1]))
        return out_tensor

    a = RNG.standard_normal((512, 128)).astype(np.float32)
    b = RNG.standard_normal((512, 128)).astype(np.float32)
    run = nki.run(accumulate, a, b)
    np.testing.assert_allclose(run.outputs, a.T @ b, rtol=1e-4, atol=1e-3)
    assert run.program.opcode_counts()["tensor_copy"] == 1                # the final copy only


def test_the_list_schedule_does_not_prefetch_into_a_direct_allocation_still_holding_a_value():
    from trnlab.hardware import instruction_order
    # each iteration loads into the kernel's own address: hoisting the next load over the previous
    # iteration's reads would overwrite a live value
    program = nki.trace(kernels.scale_with_an_address_counter, nki.ShapeDtype((4 * 128, 1024), "float32"), 2.0)
    listed = instruction_order.list_schedule(program)
    assert [i.opcode for i in listed.instructions] == [i.opcode for i in program.instructions]


def test_declarations_made_by_one_helper_line_keep_their_own_first_iteration_addresses():
    import trnlab.nki.compiler as ncc
    import trnlab.nki.isa as nisa
    import trnlab.nki.language as nl

    def placed_tile(F, address):
        return nl.ndarray((nl.par_dim(128), F), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=address))

    @nki.jit
    def add_one(x_tensor):
        rows, F = x_tensor.shape
        out_tensor = nl.ndarray((rows, F), dtype=nl.float32, buffer=nl.shared_hbm)
        address = 0
        for i in nl.affine_range(rows // 128):
            loaded = placed_tile(F, address)             # two declarations, one helper line
            address += F * 4
            result = placed_tile(F, address)
            address += F * 4
            nisa.dma_copy(dst=loaded, src=x_tensor[nl.ds(i * 128, 128), :])
            result[...] = nl.add(loaded, 1.0)
            nisa.dma_copy(dst=out_tensor[nl.ds(i * 128, 128), :], src=result)
        return out_tensor

    x = RNG.standard_normal((8 * 128, 512)).astype(np.float32)
    run = nki.run(add_one, x)
    np.testing.assert_allclose(run.outputs, x + 1.0, rtol=1e-6)
    assert {b.offset for b in run.program.buffers if b.memory == "sbuf" and b.first >= 0} == {0, 2048}
