"""The tile-grid API of AWS's latest NKI pages (`nl.tiles`, `nl.blocks`, `nl.alloc_tiles`, `nl.alloc_blocks`,
`nl.alloc_stream_buffers`, `NkiGrid` / `NkiTileGrid` / `NkiBlockGrid` / `NkiStreamBuffers`; trnlab/nki/tile_grids.py):
kernels written the way the "Tile-grid fundamentals" and "Software pipelining" tutorials write them give
NumPy's values; selections map tile coordinates to the element ranges they name, remainder tiles clamped; a grid
moves nothing itself (its `.data` is an ordinary view, so the DMAs and instructions are the program's own); a
stream pool's slots are reused as written, so one slot serialises load and compute and two overlap them.
The kernels are ours, in AWS's style."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.nki.tile_grids import TileGridError

RNG = np.random.default_rng(2026)


def _rand(*shape):
    return RNG.random(shape, dtype=np.float32)


def _inspect(body, *arrays):
    """Run `body(seen, *tensors)` inside a kernel (a token DMA makes it a program); what it recorded."""
    seen = {}

    @nki.jit
    def kernel(*tensors):
        body(seen, *tensors)
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tensors[0][tuple([0] * (tensors[0].ndim - 2)) + (slice(0, 1), slice(0, 1))])
        return out

    nki.run(kernel, *arrays)
    return seen


# -- tutorial-style kernels: values ---------------------------------------------------------------------------------
@nki.jit
def copy_tiles(src):
    """A tiled copy through SBUF tiles shaped by each selection's element_shape (remainders included)."""
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    src_tiles, dst_tiles = nl.tiles(src, tile_shape=(128, 256)), nl.tiles(dst, tile_shape=(128, 256))
    for i in range(src_tiles.shape[0]):
        for j in range(src_tiles.shape[1]):
            src_tile = src_tiles[i, j]
            tile = nl.ndarray(src_tile.element_shape, dtype=src.dtype, buffer=nl.sbuf)   # [P<=128, F<=256]
            nisa.dma_copy(dst=tile, src=src_tile.data)
            nisa.dma_copy(dst=dst_tiles[i, j].data, src=tile)
    return dst


def test_a_tiled_copy_moves_every_tile_once_remainders_clamped():
    x = _rand(333, 600)             # 3 x 3 tiles: rows 128, 128, 77; columns 256, 256, 88
    run = nki.run(copy_tiles, x)
    assert np.array_equal(run.outputs, x)
    buffers = run.program.buffers
    loads = [ins for ins in run.program.instructions if ins.opcode == "dma_copy"
             and buffers[ins.operands["dst"].buffer].memory == "sbuf"]
    assert len(loads) == 9                                     # one load per tile, each tile its exact extent
    assert sum(int(np.prod(buffers[ins.operands["dst"].buffer].shape)) for ins in loads) == x.size


@nki.jit
def scale_tiles(src):
    """Each tile: load into matching SBUF storage, scale, store (the fundamentals tutorial's sequence)."""
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    src_tiles = nl.tiles(src, tile_shape=(128, 128))
    dst_tiles = nl.tiles(dst, tile_shape=(128, 128))
    for i in range(src_tiles.shape[0]):
        for j in range(src_tiles.shape[1]):
            sbuf = nl.empty_like(src_tiles[i, j], buffer=nl.sbuf)
            nisa.dma_copy(sbuf.data, src_tiles[i, j].data)
            nisa.tensor_scalar(sbuf.data, sbuf.data, nl.multiply, 3.0)
            nisa.dma_copy(dst_tiles[i, j].data, sbuf.data)
    return dst


def test_a_tiled_scale_written_as_the_tutorial_shows_gives_numpys_values_with_remainder_tiles():
    x = _rand(300, 200)             # 3 x 2 tiles of (128, 128), the last row and column clamped
    assert np.allclose(nki.run(scale_tiles, x).outputs, 3 * x)


@nki.jit
def add_row_tiles(a, b):
    """A row of tiles per DMA, added tile by tile on the Vector engine."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    a_tiles, b_tiles = nl.tiles(a, tile_shape=(128, 256)), nl.tiles(b, tile_shape=(128, 256))
    out_tiles = nl.tiles(out, tile_shape=(128, 256))
    for i in range(a_tiles.shape[0]):
        a_row = nl.empty_like(a_tiles[i, :], buffer=nl.sbuf)      # [P=128, F=the row's columns]
        b_row = nl.empty_like(b_tiles[i, :], buffer=nl.sbuf)
        nisa.dma_copy(dst=a_row.data, src=a_tiles[i, :].data)
        nisa.dma_copy(dst=b_row.data, src=b_tiles[i, :].data)
        for j in range(a_row.shape[0]):
            nisa.tensor_tensor(dst=a_row[j].data, data1=a_row[j].data, data2=b_row[j].data, op=nl.add)
        nisa.dma_copy(dst=out_tiles[i, :].data, src=a_row.data)
    return out


def test_a_tiled_add_of_tile_rows_gives_numpys_values():
    a, b = _rand(256, 700), _rand(256, 700)
    assert np.allclose(nki.run(add_row_tiles, a, b).outputs, a + b)


@nki.jit
def matmul_tiles(lhs_t, rhs):
    """out = lhs_t.T @ rhs one (128, 512) output tile at a time, K accumulated in PSUM (the fundamentals
    tutorial's tiled matrix multiplication)."""
    out = nl.ndarray((lhs_t.shape[1], rhs.shape[1]), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    lhs_tiles = nl.tiles(lhs_t, tile_shape=(128, 128))
    rhs_tiles = nl.tiles(rhs, tile_shape=(128, 512))
    out_tiles = nl.tiles(out, tile_shape=(128, 512))
    for m in range(out_tiles.shape[0]):
        for n in range(out_tiles.shape[1]):
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(lhs_tiles.shape[0]):
                lhs = nl.empty_like(lhs_tiles[k, m], buffer=nl.sbuf)
                rhs_sbuf = nl.empty_like(rhs_tiles[k, n], buffer=nl.sbuf)
                nisa.dma_copy(dst=lhs.data, src=lhs_tiles[k, m].data)
                nisa.dma_copy(dst=rhs_sbuf.data, src=rhs_tiles[k, n].data)
                nisa.nc_matmul(dst=acc, stationary=lhs.data, moving=rhs_sbuf.data)
            res = nl.ndarray((128, 512), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out_tiles[m, n].data, src=res)
    return out


def test_a_tiled_matmul_written_as_the_tutorial_shows_gives_numpys_product():
    lhs_t, rhs = _rand(512, 256), _rand(512, 1024)
    run = nki.run(matmul_tiles, lhs_t, rhs)
    assert np.allclose(run.outputs, lhs_t.T @ rhs, rtol=1e-3, atol=1e-2)
    opcodes = [ins.opcode for ins in run.program.instructions]
    assert opcodes.count("nc_matmul") == 2 * 2 * 4            # M/128 x N/512 x K/128: the instructions traced
    assert opcodes.count("dma_copy") == 2 * 2 * (4 * 2 + 1)


@nki.jit
def matmul_psum_grid(lhs_t, rhs):
    """The output's PSUM tiles as one alloc_tiles grid, read back to SBUF through the grid's aggregate .data."""
    out = nl.ndarray((lhs_t.shape[1], rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.alloc_tiles(tile_shape=(128, 512), element_shape=tuple(out.shape), buffer=nl.psum, dtype=nl.float32)
    lhs_tiles, rhs_tiles = nl.tiles(lhs_t, tile_shape=(128, 128)), nl.tiles(rhs, tile_shape=(128, 512))
    for n in range(rhs_tiles.shape[1]):
        for k in range(lhs_tiles.shape[0]):
            lhs = nl.empty_like(lhs_tiles[k, 0], buffer=nl.sbuf)
            rhs_sbuf = nl.empty_like(rhs_tiles[k, n], buffer=nl.sbuf)
            nisa.dma_copy(dst=lhs.data, src=lhs_tiles[k, 0].data)
            nisa.dma_copy(dst=rhs_sbuf.data, src=rhs_tiles[k, n].data)
            nisa.nc_matmul(dst=acc[0, n].data, stationary=lhs.data, moving=rhs_sbuf.data)
    res = nl.empty_like(acc, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res.data, src=acc.data)
    nisa.dma_copy(dst=out, src=res.data)
    return out


def test_a_psum_tile_grid_accumulates_each_output_tile_and_its_data_is_the_whole_product():
    lhs_t, rhs = _rand(256, 128), _rand(256, 1024)
    assert np.allclose(nki.run(matmul_psum_grid, lhs_t, rhs).outputs, lhs_t.T @ rhs, rtol=1e-3, atol=1e-2)


@nki.jit
def copy_batched(src):
    """A (B, M, N) tensor: the batch dim is an untiled prefix, indexed one slab at a time."""
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    src_tiles, dst_tiles = nl.tiles(src, tile_shape=(128, 256)), nl.tiles(dst, tile_shape=(128, 256))
    for b in range(src_tiles.shape[0]):
        for i in range(src_tiles.shape[1]):
            for j in range(src_tiles.shape[2]):
                tile = nl.empty_like(src_tiles[b, i, j], buffer=nl.sbuf)
                nisa.dma_copy(dst=tile.data, src=src_tiles[b, i, j].data)
                nisa.tensor_scalar(dst=tile.data, data=tile.data, op0=nl.add, operand0=float(b))
                nisa.dma_copy(dst=dst_tiles[b, i, j].data, src=tile.data)
    return dst


def test_leading_hbm_dims_are_an_untiled_prefix_indexed_one_slab_at_a_time():
    x = _rand(3, 200, 300)
    assert np.allclose(nki.run(copy_batched, x).outputs, x + np.arange(3, dtype=np.float32)[:, None, None])
    seen = _inspect(lambda s, t: s.update(
        shape=nl.tiles(t, tile_shape=(128, 256)).shape, slab=nl.tiles(t, tile_shape=(128, 256))[1].element_shape,
        steps=nl.tiles(t, tile_shape=(128, 256)).index_step_elements,
        tile=nl.tiles(t, tile_shape=(128, 256))[1, 1, 1].data.shape), x)
    assert seen == {"shape": (3, 2, 2), "slab": (200, 300), "steps": (1, 128, 256), "tile": (72, 44)}


# -- remainders, element ranges, .data ---------------------------------------------------------------------------------
def test_boundary_selections_are_clamped_and_is_remainder_says_so():
    def body(seen, x):
        grid = nl.tiles(x, tile_shape=(128, 256))              # (300, 700): 3 x 3 tiles
        seen["grid"] = (grid.shape, grid.tile_shape, grid.element_shape, grid.is_remainder)
        seen["first"] = (grid[0, 0].shape, grid[0, 0].element_shape, grid[0, 0].is_remainder)
        seen["last"] = (grid[-1, -1].element_shape, grid[-1, -1].is_remainder, grid[2, 2].data.shape)
        seen["row"] = (grid[1].shape, grid[1].element_shape, grid[1, :2].is_remainder)
    seen = _inspect(body, np.zeros((300, 700), np.float32))
    assert seen["grid"] == ((3, 3), (128, 256), (300, 700), True)
    assert seen["first"] == ((), (128, 256), False)
    assert seen["last"] == ((44, 188), True, (44, 188))
    assert seen["row"] == ((3,), (128, 700), False)


def test_data_of_a_non_representable_selection_is_refused_by_name():
    def body(seen, x):
        grid = nl.tiles(x, tile_shape=(128, 128))
        gaps = grid[:, ::2]                                     # cells with physical gaps between them
        seen["gaps"] = (gaps.shape, gaps.element_shape, gaps.is_data_representable, gaps.index_step_elements)
        with pytest.raises(TileGridError, match="is_data_representable is False"):
            gaps.data
        packed = nl.empty_like(gaps, buffer=nl.sbuf)            # "The destination packs those cells densely"
        seen["packed"] = (packed.shape, packed.element_shape, packed[0, 1].data.shape)
        column = nl.empty_like(grid[:, 0], buffer=nl.sbuf)     # 2 tile rows on the same 128 partitions
        seen["column"] = (column.is_data_representable, column[1].is_data_representable)
        with pytest.raises(TileGridError, match="tile rows of the partition dim"):
            column.data
        one_wide = nl.tiles(x, tile_shape=(128, 1))[:, ::3]    # one-element cells: evenly spaced, representable
        seen["strided"] = (one_wide.is_data_representable, one_wide.data.shape, one_wide.data.strides)
    seen = _inspect(body, np.zeros((256, 512), np.float32))
    assert seen["gaps"] == ((2, 2), (256, 256), False, (128, 256))
    assert seen["packed"] == ((2, 2), (256, 256), (128, 128))
    assert seen["column"] == (False, True)
    assert seen["strided"] == (True, (256, 171), (512, 3))


def test_creating_and_indexing_grids_allocates_nothing_and_moves_nothing():
    def body(seen, x):
        from trnlab.nki import launches
        recorder = launches.current().core
        before = (len(recorder.program.buffers), len(recorder.program.instructions))
        grid = nl.tiles(x, tile_shape=(128, 128))
        grid[1, 2].data, grid[:, 1:3].element_shape, nl.blocks(grid, block_shape=(2, 2))[0, 0].data
        nl.tiles(nl.blocks(x, tile_shape=(128, 128), block_shape=(1, 2))[1, 0])[0, 1].data
        seen["after"] = (len(recorder.program.buffers), len(recorder.program.instructions)) == before
    assert _inspect(body, np.zeros((256, 512), np.float32))["after"]


def test_block_grids_group_tiles_and_tiles_of_a_block_expose_its_interior():
    def body(seen, x):
        grid = nl.blocks(x, tile_shape=(128, 256), block_shape=(2, 2))   # (300, 1100): 3 x 5 tiles, 2 x 3 blocks
        seen["grid"] = (grid.shape, grid.block_shape, grid.tile_shape, grid.index_step_elements)
        seen["inner"] = (grid[0, 0].element_shape, grid[0, 0].is_remainder, nl.tiles(grid[0, 0]).shape)
        seen["edge"] = (grid[1, 2].element_shape, grid[1, 2].is_remainder, nl.tiles(grid[1, 2]).shape,
                        nl.tiles(grid[1, 2])[0, 0].element_shape)
        seen["regrouped"] = nl.blocks(grid[0, :], block_shape=(1, 4)).shape
    seen = _inspect(body, np.zeros((300, 1100), np.float32))
    assert seen["grid"] == ((2, 3), (2, 2), (128, 256), (256, 512))
    assert seen["inner"] == ((256, 512), False, (2, 2))
    assert seen["edge"] == ((44, 76), True, (1, 1), (44, 76))
    assert seen["regrouped"] == (2, 2)                         # block row 0: 2 tile rows x 5 tiles


@nki.jit
def scale_blocks(src):
    """One coalesced DMA per block of (1, 4) tiles; each tile scaled by its index in the block."""
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    src_blocks = nl.blocks(src, tile_shape=(128, 128), block_shape=(1, 4))
    dst_blocks = nl.blocks(dst, tile_shape=(128, 128), block_shape=(1, 4))
    for i in range(src_blocks.shape[0]):
        for j in range(src_blocks.shape[1]):
            block = nl.empty_like(src_blocks[i, j], buffer=nl.sbuf)
            nisa.dma_copy(dst=block.data, src=src_blocks[i, j].data)
            block_tiles = nl.tiles(block)
            for t in range(block_tiles.shape[1]):
                nisa.tensor_scalar(dst=block_tiles[0, t].data, data=block_tiles[0, t].data, op0=nl.multiply,
                                   operand0=float(t + 1))
            nisa.dma_copy(dst=dst_blocks[i, j].data, src=block.data)
    return dst


def test_a_block_grid_kernel_moves_whole_blocks_and_computes_on_their_tiles():
    x = _rand(300, 1100)              # 3 block rows (the last 44 rows), 3 blocks across (the last: 1 tile + 76)
    run = nki.run(scale_blocks, x)
    expected = x * (((np.arange(1100) // 128) % 4) + 1).astype(np.float32)
    assert np.allclose(run.outputs, expected)
    assert [ins.opcode for ins in run.program.instructions].count("dma_copy") == 3 * 3 * 2   # a DMA per block


def test_alloc_tiles_and_alloc_blocks_lay_on_chip_tiles_side_by_side_and_hbm_compactly():
    def body(seen, x):
        sbuf = nl.alloc_tiles(tile_shape=(128, 256), element_shape=(128, 1000), buffer=nl.sbuf, dtype=nl.float32)
        seen["sbuf"] = (sbuf.shape, sbuf.element_shape, sbuf.data.shape, sbuf[0, 3].data.shape,
                        sbuf[0, 1].data.offset, sbuf.buffer == nl.sbuf, sbuf.dtype == np.float32)
        blocks = nl.alloc_blocks(tile_shape=(128, 128), block_shape=(1, 2), element_shape=(128, 512),
                                 buffer=nl.sbuf, dtype=nl.bfloat16, name="w")
        seen["blocks"] = (type(blocks).__name__, blocks.shape, blocks[0, 1].data.shape, blocks[0, 1].data.offset)
        hbm = nl.alloc_tiles(tile_shape=(128, 128), element_shape=(2, 200, 300), buffer=nl.shared_hbm,
                             dtype=nl.float32)
        seen["hbm"] = (hbm.shape, hbm.element_shape, hbm[1].data.shape, hbm.buffer == nl.shared_hbm)
        slabs = nl.alloc_tiles(tile_shape=(128, 64), element_shape=(3, 128, 200), buffer=nl.sbuf, dtype=nl.float32)
        seen["slabs"] = (slabs.shape, slabs.is_data_representable, slabs[2].data.shape, slabs[2].data.offset)
    seen = _inspect(body, np.zeros((128, 128), np.float32))
    assert seen["sbuf"] == ((1, 4), (128, 1000), (128, 1000), (128, 232), 256, True, True)
    assert seen["blocks"] == ("NkiBlockGrid", (1, 2), (128, 256), 256)
    assert seen["hbm"] == ((2, 2, 3), (2, 200, 300), (200, 300), True)
    # prefix slabs on chip: each slab's 4 tile slots after the previous slab's; one slab is one access pattern
    assert seen["slabs"] == ((3, 1, 4), False, (128, 200), 2 * 4 * 64)


def test_tiles_of_an_sbuf_tensor_views_that_tensor():
    @nki.jit
    def halves(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray(tuple(x.shape), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        grid = nl.tiles(tile, tile_shape=(128, 64))
        nisa.tensor_scalar(dst=grid[0, 1].data, data=grid[0, 1].data, op0=nl.multiply, operand0=-1.0)
        nisa.dma_copy(dst=out, src=tile)
        return out
    x = _rand(128, 128)
    assert np.allclose(nki.run(halves, x).outputs, np.concatenate([x[:, :64], -x[:, 64:]], axis=1))


# -- property: tile coordinates -> element ranges ----------------------------------------------------------------------
def _selection(cells: int, draw_key):
    """An int or a positive-step slice over `cells` cells, drawn."""
    kind, a, b, step = draw_key
    if kind == "int":
        return a % cells - (cells if b % 2 else 0)             # negative ints count from the end
    start, stop = sorted((a % cells, b % (cells + 1)))
    return slice(start, stop if stop > start else start + 1, step)


KEYS = st.tuples(st.sampled_from(["int", "slice"]), st.integers(0, 50), st.integers(0, 50), st.integers(1, 3))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 300), cols=st.integers(1, 300), tile_rows=st.integers(1, 128),
       tile_cols=st.integers(1, 160), key_rows=KEYS, key_cols=KEYS)
def test_tile_coordinates_select_the_element_ranges_they_name(rows, cols, tile_rows, tile_cols, key_rows, key_cols):
    """Cell c of a dim of extent E and tile t holds elements [c*t, min((c+1)*t, E)); a selection is its cells'
    elements in order. `.data` of an HBM selection reads exactly those elements when they are evenly spaced,
    and is_data_representable says whether they are."""
    counts = (-(-rows // tile_rows), -(-cols // tile_cols))
    keys = tuple(_selection(n, k) for n, k in zip(counts, (key_rows, key_cols)))
    expected = []
    for n, t, extent, key in zip(counts, (tile_rows, tile_cols), (rows, cols), keys):
        picked = range(n)[key] if isinstance(key, slice) else [range(n)[key]]
        expected.append(np.concatenate([np.arange(c * t, min((c + 1) * t, extent)) for c in picked]))
    even = all(len(e) < 2 or len(set(np.diff(e).tolist())) == 1 for e in expected)

    def body(seen, x):
        grid = nl.tiles(x, tile_shape=(tile_rows, tile_cols))
        sel = grid[keys]
        seen["shape"], seen["elements"] = grid.shape, sel.element_shape
        seen["remainder"] = sel.is_remainder
        seen["representable"] = sel.is_data_representable
        if sel.is_data_representable:
            data = sel.data
            seen["pattern"], seen["offset"] = data.get_pattern(), data.offset

    seen = _inspect(body, np.zeros((rows, cols), np.float32))
    assert seen["shape"] == counts
    assert seen["elements"] == tuple(len(e) for e in expected)
    assert seen["remainder"] == any(len(e) > 0 and (e[-1] + 1) % t != 0 and e[-1] + 1 == extent
                                    for e, t, extent in zip(expected, (tile_rows, tile_cols), (rows, cols)))
    assert seen["representable"] == even
    if even:
        flat = np.asarray(seen["offset"])
        for axis, (stride, count) in enumerate(seen["pattern"]):
            shape = [1] * len(seen["pattern"])
            shape[axis] = count
            flat = flat + stride * np.arange(count).reshape(shape)
        assert np.array_equal(flat, np.arange(rows * cols).reshape(rows, cols)[np.ix_(*expected)])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 260), cols=st.integers(1, 520), tile_rows=st.integers(32, 128),
       tile_cols=st.integers(64, 256))
def test_an_sbuf_tile_grid_holds_each_cell_where_its_rows_data_reads_it_back(rows, cols, tile_rows, tile_cols):
    """Cells written one by one into an alloc_tiles SBUF grid (the dense capacity layout) and read back a whole
    row of tiles per DMA through the row's `.data` round-trip every value, remainder cells included."""
    @nki.jit
    def round_trip(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        src, dst = nl.tiles(x, tile_shape=(tile_rows, tile_cols)), nl.tiles(out, tile_shape=(tile_rows, tile_cols))
        grid = nl.alloc_tiles(tile_shape=(tile_rows, tile_cols), element_shape=tuple(x.shape), buffer=nl.sbuf,
                              dtype=x.dtype)
        for i in range(src.shape[0]):
            for j in range(src.shape[1]):
                nisa.dma_copy(dst=grid[i, j].data, src=src[i, j].data)
        for i in range(src.shape[0]):
            nisa.dma_copy(dst=dst[i, :].data, src=grid[i, :].data)
        return out

    x = _rand(rows, cols)
    assert np.array_equal(nki.run(round_trip, x).outputs, x)


# -- stream buffers --------------------------------------------------------------------------------------------------
def _scale_chunks(num_slots: int):
    @nki.jit
    def scale_chunks(src):
        """Walk dim 1 of a (128, steps, 512) tensor through a pool of `num_slots` SBUF slots: load, two compute
        passes in place, store."""
        out = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
        chunks = nl.alloc_stream_buffers(src, buffer=nl.sbuf, dim=1, num_slots=num_slots)
        for m in range(src.shape[1]):
            chunk = chunks[m]                                  # [P=128, F=512], slot m % num_slots
            nisa.dma_copy(dst=chunk, src=src[:, m, :])
            nisa.tensor_scalar(dst=chunk, data=chunk, op0=nl.multiply, operand0=2.0)
            nisa.activation(dst=chunk, op=nl.exp, data=chunk)
            nisa.dma_copy(dst=out[:, m, :], src=chunk)
        return out
    return scale_chunks


@nki.jit
def scale_chunks_one_tile(src):
    """The same walk through one nl.ndarray tile declared before the loop (not a stream pool)."""
    out = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    chunk = nl.ndarray((128, 512), dtype=src.dtype, buffer=nl.sbuf)
    for m in range(src.shape[1]):
        nisa.dma_copy(dst=chunk, src=src[:, m, :])
        nisa.tensor_scalar(dst=chunk, data=chunk, op0=nl.multiply, operand0=2.0)
        nisa.activation(dst=chunk, op=nl.exp, data=chunk)
        nisa.dma_copy(dst=out[:, m, :], src=chunk)
    return out


STREAM = nki.ShapeDtype((128, 8, 512), "float32")


def test_stream_buffers_give_the_values_with_one_two_and_three_slots():
    x = _rand(128, 8, 512) / 4
    for slots in (1, 2, 3):
        assert np.allclose(nki.run(_scale_chunks(slots), x).outputs, np.exp(2 * x), rtol=1e-4), slots


def test_one_slot_serialises_load_and_compute_two_slots_overlap_them_three_do_not_lose():
    """The software-pipelining tutorial's lesson: with one slot each load waits for the previous step's readers
    of the slot; with two, the next load runs while this step computes."""
    latency = {s: nki.run(_scale_chunks(s), STREAM, timing_only=True).latency_us for s in (1, 2, 3)}
    assert latency[1] > 1.3 * latency[2]
    assert latency[3] <= latency[2] * 1.01


def test_a_slot_keeps_its_address_where_a_reused_ndarray_tile_is_re_placed_by_address_rotation():
    """Slots are storage the kernel controls: the default flow's address rotation (hardware/versions.py) splits
    a reused nl.ndarray tile at each whole overwrite, never a stream slot. With the rotation off both are the
    same program."""
    one_slot = nki.run(_scale_chunks(1), STREAM, timing_only=True)
    rotated = nki.run(scale_chunks_one_tile, STREAM, timing_only=True)
    assert one_slot.latency_us > 1.3 * rotated.latency_us
    slots = [b for b in one_slot.program.buffers if getattr(b, "kernel_slot", False)]
    assert len(slots) == 1 and not any("~v" in b.name for b in one_slot.program.buffers)
    with config.override(versions=False):
        kept = nki.run(nki.jit(scale_chunks_one_tile.func), STREAM, timing_only=True)
    assert kept.latency_us == pytest.approx(one_slot.latency_us, rel=1e-6)


@nki.jit
def stream_tile_row(src):
    """Tile grids through a two-slot pool along each row of tiles; the last step a clamped view of a full slot."""
    out = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    src_tiles, out_tiles = nl.tiles(src, tile_shape=(128, 256)), nl.tiles(out, tile_shape=(128, 256))
    for i in range(src_tiles.shape[0]):
        row = src_tiles[i, :]
        pool = nl.alloc_stream_buffers(row, buffer=nl.sbuf, dim=0, num_slots=2)
        for j in range(row.shape[0]):
            slot = pool[j]
            nisa.dma_copy(dst=slot.data, src=row[j].data)
            nisa.tensor_scalar(dst=slot.data, data=slot.data, op0=nl.add, operand0=1.0)
            nisa.dma_copy(dst=out_tiles[i, j].data, src=slot.data)
    return out


def test_stream_buffers_over_a_tile_grid_return_grids_and_clamp_the_last_step():
    x = _rand(300, 700)
    assert np.allclose(nki.run(stream_tile_row, x).outputs, x + 1)

    def body(seen, t):
        grid = nl.tiles(t, tile_shape=(128, 256))              # (300, 700): 3 x 3 tiles
        pool = nl.alloc_stream_buffers(grid, buffer=nl.sbuf, dim=1, num_slots=2)   # a step: a column of tiles
        seen["num_slots"], seen["types"] = pool.num_slots, {type(pool[k]).__name__ for k in range(3)}
        seen["steps"] = [(pool[k].shape, pool[k].element_shape, pool[k].is_remainder) for k in range(3)]
        seen["same slot"] = pool[0]._store is pool[2]._store and pool[0]._store is not pool[1]._store
        seen["capacity"] = tuple(pool[2]._store.tensor.shape)
    seen = _inspect(body, np.zeros((300, 700), np.float32))
    assert seen["num_slots"] == 2 and seen["types"] == {"NkiTileGrid"}
    assert seen["steps"] == [((3,), (300, 256), True), ((3,), (300, 256), True), ((3,), (300, 188), True)]
    assert seen["same slot"]
    assert seen["capacity"] == (128, 3 * 256)                  # the full step's capacity, even for the last step


def test_selecting_a_slot_allocates_nothing_and_emits_nothing():
    def body(seen, t):
        from trnlab.nki import launches
        program = launches.current().core.program
        pool = nl.alloc_stream_buffers(t, buffer=nl.sbuf, dim=0, num_slots=3)
        before = (len(program.buffers), len(program.instructions))
        views = [pool[k] for k in range(4)]
        seen["same"] = (len(program.buffers), len(program.instructions)) == before
        seen["slot 0 again"] = views[3] is views[0] and views[1] is not views[0]   # k % num_slots
    seen = _inspect(body, np.zeros((4, 128, 64), np.float32))
    assert seen == {"same": True, "slot 0 again": True}


def test_stream_buffer_indices_follow_the_pages_rules():
    def body(seen, t, count):
        pool = nl.alloc_stream_buffers(t, buffer=nl.sbuf, dim=0)
        with pytest.raises(TileGridError, match="negative indexing"):
            pool[-1]
        with pytest.raises(IndexError, match="4 steps"):
            pool[4]
        with pytest.raises(TypeError, match="compile-time Python ints"):
            pool[1.0]
        with pytest.raises(TypeError, match="not iterable"):
            iter(pool)
        with pytest.raises(TypeError, match="no length"):
            len(pool)

        flag = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)

        def body_fun(i):                                       # i: the loop's run-time iteration register
            with pytest.raises(TypeError, match="nl.fori_loop"):
                pool[i]
            nisa.memset(dst=flag, value=1.0)
        count_sbuf = nl.ndarray((1, 1), dtype=count.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=count_sbuf, src=count)
        nl.fori_loop(0, nisa.scalar_load(count_sbuf), body_fun)  # a bound known only when the program runs
        seen["ok"] = True
    assert _inspect(body, np.zeros((4, 128, 64), np.float32), np.array([[2]], np.int32))["ok"]


# -- errors --------------------------------------------------------------------------------------------------------
def test_allocation_and_view_errors_name_the_rule():
    def body(seen, t):
        cases = [
            (TypeError, "tuple of exact Python ints", lambda: nl.alloc_tiles(
                tile_shape=[128, 128], element_shape=(128, 128), buffer=nl.sbuf, dtype=nl.float32)),
            (TileGridError, "must be positive", lambda: nl.alloc_tiles(
                tile_shape=(128, 0), element_shape=(128, 128), buffer=nl.sbuf, dtype=nl.float32)),
            (TileGridError, "at least 2 dims", lambda: nl.alloc_tiles(
                tile_shape=(128,), element_shape=(128, 128), buffer=nl.sbuf, dtype=nl.float32)),
            (TileGridError, "greater rank", lambda: nl.alloc_tiles(
                tile_shape=(1, 128, 128), element_shape=(128, 128), buffer=nl.sbuf, dtype=nl.float32)),
            (TypeError, "MemoryRegion", lambda: nl.alloc_tiles(
                tile_shape=(128, 128), element_shape=(128, 128), buffer="sbuf", dtype=nl.float32)),
            (TileGridError, "rank of tile_shape", lambda: nl.alloc_blocks(
                tile_shape=(128, 128), block_shape=(2,), element_shape=(128, 512), buffer=nl.sbuf, dtype=nl.float32)),
            (TileGridError, "limit is 128", lambda: nl.alloc_tiles(
                tile_shape=(256, 128), element_shape=(512, 128), buffer=nl.sbuf, dtype=nl.float32)),
            (TileGridError, "needs tile_shape", lambda: nl.tiles(t)),
            (TileGridError, "positive", lambda: nl.tiles(t, tile_shape=(128, 64))[:, ::-1]),
            (IndexError, "has 2 cells", lambda: nl.tiles(t, tile_shape=(128, 64))[0, 2]),
            (IndexError, "too many indices", lambda: nl.tiles(t, tile_shape=(128, 64))[0, 0, 0]),
            (TypeError, "run-time indices", lambda: nl.tiles(t, tile_shape=(128, 64))[t]),
            (TypeError, "not iterable", lambda: list(nl.tiles(t, tile_shape=(128, 64)))),
            (TypeError, "not constructed directly", lambda: nl.NkiTileGrid()),
            (TileGridError, "SBUF or PSUM", lambda: nl.alloc_stream_buffers(t, buffer=nl.shared_hbm, dim=0)),
            (TileGridError, "not a coordinate", lambda: nl.alloc_stream_buffers(t, buffer=nl.sbuf, dim=2)),
            (TileGridError, "at least one slot", lambda: nl.alloc_stream_buffers(t, buffer=nl.sbuf, dim=0,
                                                                                  num_slots=0)),
            (TileGridError, "orders", lambda: nl.empty_like(nl.tiles(t, tile_shape=(128, 64)), buffer=nl.sbuf,
                                                             transpose_axes=(0, 1))),
        ]
        for error, words, call in cases:
            with pytest.raises(error, match=words):
                call()
        seen["ok"] = True
    assert _inspect(body, np.zeros((128, 128), np.float32))["ok"]


@nki.jit
def transpose_tiles(src):
    """Each (128, 128) tile moved transposed into a slot prepared with transpose_axes=(1, 0)."""
    out = nl.ndarray((src.shape[1], src.shape[0]), dtype=src.dtype, buffer=nl.shared_hbm)
    src_tiles, out_tiles = nl.tiles(src, tile_shape=(128, 128)), nl.tiles(out, tile_shape=(128, 128))
    pool = nl.alloc_stream_buffers(src_tiles[0, :], buffer=nl.sbuf, dim=0, num_slots=2, transpose_axes=(1, 0))
    for i in range(src_tiles.shape[0]):
        for j in range(src_tiles.shape[1]):
            slot = pool[j]
            nisa.dma_transpose(dst=slot.data, src=src_tiles[i, j].data)
            nisa.dma_copy(dst=out_tiles[j, i].data, src=slot.data)
    return out


def test_transpose_axes_prepares_slots_for_dma_transpose():
    x = _rand(256, 384)
    assert np.allclose(nki.run(transpose_tiles, x).outputs, x.T)


def test_a_tensor_s_data_is_the_tensor_so_grid_and_tensor_code_read_alike():
    # AWS's NkiTileGrid page copies each tile through an nl.ndarray tile and passes `tile.data` to dma_copy
    src = np.arange(256 * 512, dtype=np.float32).reshape(256, 512)

    @nki.jit
    def copy_tile_grid(x):
        x_tiles = nl.tiles(x, tile_shape=(128, 256))
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        out_tiles = nl.tiles(out, tile_shape=(128, 256))
        for i in range(x_tiles.shape[0]):
            for j in range(x_tiles.shape[1]):
                tile = nl.ndarray(x_tiles[i, j].element_shape, dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=tile.data, src=x_tiles[i, j].data)
                nisa.dma_copy(dst=out_tiles[i, j].data, src=tile.data)
        return out

    np.testing.assert_array_equal(copy_tile_grid(src), src)


@pytest.mark.parametrize("call", ["zeros_like", "ones_like"])
def test_filled_likes_of_a_grid_are_refused_rather_than_shaped_by_its_tile_counts(call):
    @nki.jit
    def kernel(x):
        getattr(nl, call)(nl.tiles(x, tile_shape=(128, 256)), buffer=nl.sbuf)
        return x

    with pytest.raises(TypeError, match=f"nl.{call} takes an NkiTensor"):
        kernel(np.zeros((256, 512), np.float32))
