"""Tensor Indirection (`NkiTensor.indirect`, NeuronCore-v4 / Trn3): a compute instruction gathers the columns
of an on-chip tile, or scatters its result into them, at offsets it reads from an SBUF uint16 tile when it
runs; 16 partitions share their offsets (AWS's snake order). Values against NumPy (fast paths on and off,
the same timeline in timing mode), the dependency on the index tile's producer, and the named refusals."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.errors import (DtypeError, EngineError, GenerationError, MemoryPlacementError, StartPartitionError,
                                    ShapeMismatchError)
from trnlab.hardware.indirection import IndirectionOffsetError, IndirectionOperandError
from trnlab.nki.errors import ViewError

from nki_isa_helpers import run_both

RNG = np.random.default_rng(21)


def expected_offsets(index: np.ndarray, count: int) -> np.ndarray:
    """[P, count]: partition p's offsets, as AWS's NkiTensor.indirect page states them for one group of
    16 partitions (offset i at index[i % 16, i // 16]), each group reading its own 16 rows."""
    P = index.shape[0]
    out = np.empty((P, count), np.int64)
    for p in range(P):
        group = index[16 * (p // 16): 16 * (p // 16) + 16]
        rows = group.shape[0]
        out[p] = [group[i % rows, i // rows] for i in range(count)]
    return out


def _gather_then_scale(count):
    @nki.jit
    def gather_then_scale(table, columns):
        """out = 2 * table's columns at the offsets (a gather into a dense tile, then arithmetic on it)."""
        P, F = table.shape
        data = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=data, src=table)
        idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=columns)
        dense = nl.ndarray((P, count), dtype=table.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=dense, src=data.indirect(idx, num_elem=count))
        scaled = nl.ndarray((P, count), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=scaled, data=dense, op0=nl.multiply, operand0=2.0)
        out = nl.ndarray((P, count), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=scaled)
        return out

    return gather_then_scale


@settings(max_examples=10, deadline=None)
@given(partitions=st.sampled_from([8, 16, 48, 128]), free=st.integers(1, 300), k=st.integers(1, 3),
       seed=st.integers(0, 2**16), data=st.data())
def test_a_gather_reads_each_partition_groups_offsets(partitions, free, k, seed, data):
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(partitions, free)).astype(np.float32)
    columns = rng.integers(0, free, size=(partitions, k)).astype(np.uint16)
    count = data.draw(st.integers(1, min(16, partitions) * k))
    run = run_both(_gather_then_scale(count), table, columns, target="trn3")
    cols = expected_offsets(columns.astype(np.int64), count)
    np.testing.assert_array_equal(run.outputs, 2 * np.take_along_axis(table, cols, axis=1))


def test_the_offsets_are_read_when_the_program_runs():
    """One traced program, two index tiles: the columns follow the data, not the trace."""
    kernel = _gather_then_scale(4)
    table = RNG.normal(size=(32, 40)).astype(np.float32)
    for seed in (1, 2):
        columns = np.random.default_rng(seed).integers(0, 40, size=(32, 1)).astype(np.uint16)
        run = nki.run(kernel, table, columns, target="trn3")
        np.testing.assert_array_equal(run.outputs, 2 * np.take_along_axis(table, expected_offsets(columns, 4), 1))


@nki.jit
def scatter_sum(base, a, b, columns):
    """out = base with a + b written to the columns the offsets name (a scatter of a dense result)."""
    P, F = base.shape
    out_tile = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=out_tile, src=base)
    x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    y = nl.ndarray(b.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=y, src=b)
    idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=columns)
    nisa.tensor_tensor(dst=out_tile.indirect(idx, num_elem=a.shape[1]), data1=x, data2=y, op=nl.add)
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=out_tile)
    return out


def test_a_scatter_writes_a_dense_result_to_the_chosen_columns():
    P, F, n = 64, 50, 5
    base = RNG.normal(size=(P, F)).astype(np.float32)
    a, b = RNG.normal(size=(2, P, n)).astype(np.float32)
    # distinct columns within each group of 16 partitions (a scatter naming a column twice: last wins)
    columns = np.zeros((P, 1), np.uint16)
    for g in range(P // 16):
        columns[16 * g: 16 * g + n, 0] = RNG.permutation(F)[:n]
    run = run_both(scatter_sum, base, a, b, columns, target="trn3")
    expected = base.copy()
    np.put_along_axis(expected, expected_offsets(columns, n), a + b, axis=1)
    np.testing.assert_array_equal(run.outputs, expected)


@nki.jit
def activation_gather_and_scatter(table, columns):
    """exp of the gathered columns, written back over the same columns (Scalar engine; PSUM input)."""
    P, F = table.shape
    acc = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.psum)
    staged = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=staged, src=table)
    nisa.tensor_copy(dst=acc, src=staged)
    idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=columns)
    nisa.activation(dst=staged.indirect(idx, num_elem=3), op=nl.exp, data=acc.indirect(idx, num_elem=3))
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=staged)
    return out


def test_activation_gathers_from_psum_and_scatters_into_sbuf():
    table = RNG.normal(size=(16, 12)).astype(np.float32)
    columns = np.array([[7], [2], [11]] + [[0]] * 13, np.uint16)
    run = run_both(activation_gather_and_scatter, table, columns, target="trn3")
    expected = table.copy()
    expected[:, [7, 2, 11]] = np.exp(table[:, [7, 2, 11]])
    np.testing.assert_allclose(run.outputs, expected, rtol=1e-6)


def test_timing_mode_gives_the_same_timeline():
    table = RNG.normal(size=(128, 64)).astype(np.float32)
    columns = RNG.integers(0, 64, size=(128, 2)).astype(np.uint16)
    kernel = _gather_then_scale(20)
    full = nki.run(kernel, table, columns, target="trn3")
    timing = nki.run(kernel, table, columns, target="trn3", timing_only=True)
    fields = lambda run: [(r.engine, r.opcode, r.start_ns, r.end_ns) for r in run.timeline]  # noqa: E731
    assert fields(full) == fields(timing)


@nki.jit
def gather_after_slow_index(table, columns, big):
    """The index tile's DMA is queued behind a large transfer: the gather must wait for it."""
    P, F = table.shape
    data = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=table)
    filler = nl.ndarray(big.shape, dtype=big.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=filler, src=big)
    idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=columns)
    dense = nl.ndarray((P, 4), dtype=table.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=dense, src=data.indirect(idx, num_elem=4))
    out = nl.ndarray((P, 4), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dense)
    return out


def test_the_instruction_waits_for_the_index_tiles_producer():
    table = RNG.normal(size=(128, 64)).astype(np.float32)
    columns = RNG.integers(0, 64, size=(128, 1)).astype(np.uint16)
    big = np.zeros((128, 16384), np.float32)
    run = nki.run(gather_after_slow_index, table, columns, big, target="trn3")
    records = [run.timeline[i] for i in range(len(run.timeline))]
    dmas = [r for r in records if r.engine.startswith("dma")]
    copy = next(r for r in records if r.opcode == "tensor_copy")
    index_dma = dmas[2]                               # table, filler, then the index tile
    assert index_dma.end_ns > dmas[0].end_ns          # the index arrives last ...
    assert copy.start_ns >= index_dma.end_ns          # ... and the gather starts after it


# -- refusals ----------------------------------------------------------------------------------------------
def _one_copy(index_dtype=nl.uint16, index_rows=None, count=4, engine=nisa.engine.unknown, into_psum=False):
    @nki.jit
    def kernel(table, columns):
        P, F = table.shape
        data = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=data, src=table)
        staged = nl.ndarray(columns.shape, dtype=columns.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=staged, src=columns)
        idx = nl.ndarray((index_rows or P, columns.shape[1]), dtype=index_dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=idx, src=staged[0:index_rows or P])
        dense = nl.ndarray((P, count), dtype=table.dtype, buffer=nl.psum if into_psum else nl.sbuf)
        if into_psum:   # a scatter into PSUM on the Scalar engine
            nisa.tensor_copy(dst=dense.indirect(idx, num_elem=count), src=data[:, 0:count], engine=engine)
        else:
            nisa.tensor_copy(dst=dense, src=data.indirect(idx, num_elem=count), engine=engine)
        out = nl.ndarray((P, count), dtype=table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=dense)
        return out

    return kernel


TABLE = RNG.normal(size=(32, 16)).astype(np.float32)
COLUMNS = RNG.integers(0, 16, size=(32, 1)).astype(np.uint16)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_neuroncore_v2_and_v3_refuse_tensor_indirection(target):
    with pytest.raises(GenerationError, match="needs NeuronCore-v4"):
        nki.run(_one_copy(), TABLE, COLUMNS, target=target)


def test_the_index_is_uint16():
    with pytest.raises(DtypeError, match="uint16"):
        nki.run(_one_copy(index_dtype=nl.int32), TABLE, COLUMNS, target="trn3")


def test_the_index_has_the_data_partitions():
    with pytest.raises(ShapeMismatchError, match=r"must be \(P, K\) with P = 32"):
        nki.run(_one_copy(index_rows=16), TABLE, COLUMNS, target="trn3")


def test_num_elem_fits_in_a_partition_groups_offsets():
    with pytest.raises(ShapeMismatchError, match="holds 16 offsets"):
        nki.run(_one_copy(count=17), TABLE, COLUMNS, target="trn3")


def test_an_offset_out_of_range_is_named_when_it_is_read():
    columns = COLUMNS.copy()
    columns[18, 0] = 16                               # group 1's offset 2: one past the 16 columns
    with pytest.raises(IndirectionOffsetError, match=r"offset 16 .* past the 16 elements per partition"):
        nki.run(_one_copy(), TABLE, columns, target="trn3")
    nki.run(_one_copy(), TABLE, columns, target="trn3", timing_only=True)   # no values: nothing read


def test_engines_that_do_not_take_indirection_are_refused():
    with pytest.raises(EngineError, match="tensor_copy cannot run on"):
        nki.run(_one_copy(engine=nisa.engine.gpsimd), TABLE, COLUMNS, target="trn3")


def test_the_scalar_engine_does_not_scatter_into_psum():
    with pytest.raises(MemoryPlacementError, match="Scalar engine scatters into PSUM"):
        nki.run(_one_copy(engine=nisa.engine.scalar, into_psum=True), TABLE, COLUMNS, target="trn3")


@nki.jit
def indirect_second_operand(table, columns):
    P, F = table.shape
    data = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=table)
    idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=columns)
    dense = nl.ndarray((P, 4), dtype=table.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=dense, data1=data[:, 0:4], data2=data.indirect(idx, num_elem=4), op=nl.add)
    return dense


def test_data2_of_tensor_tensor_is_not_indirect():
    with pytest.raises(IndirectionOperandError, match="tensor_tensor data2 does not take"):
        nki.run(indirect_second_operand, TABLE, COLUMNS, target="trn3")


@nki.jit
def view_of_an_indirect_view(table, columns):
    data = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=table)
    idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=columns)
    gathered = data.indirect(idx, num_elem=4)
    assert gathered.is_indirect() and gathered.shape == (32, 4)
    return gathered[:, 0:2]


def test_an_indirect_view_is_not_viewed_again():
    with pytest.raises(ViewError, match="indirect view"):
        nki.run(view_of_an_indirect_view, TABLE, COLUMNS, target="trn3")


@nki.jit
def index_off_a_quadrant(table, columns):
    P, F = table.shape
    data = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=table)
    idx = nl.ndarray((2 * P, 1), dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx[16:16 + P], src=columns)
    dense = nl.ndarray((P, 4), dtype=table.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=dense, src=data.indirect(idx[16:16 + P], num_elem=4))
    return dense


def test_the_index_starts_on_a_quadrant():
    with pytest.raises(StartPartitionError, match="multiple of 32"):
        nki.run(index_off_a_quadrant, TABLE, COLUMNS, target="trn3")


def _other_use(use):
    @nki.jit
    def kernel(table, columns):
        P, F = table.shape
        data = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=data, src=table)
        idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=columns)
        out = nl.ndarray((P, 4), dtype=table.dtype, buffer=nl.shared_hbm)
        if use == "dma":
            nisa.dma_copy(dst=out, src=data.indirect(idx, num_elem=4))
        else:
            nisa.memset(dst=data.indirect(idx, num_elem=4), value=0.0)
        return out

    return kernel


@pytest.mark.parametrize("use", ["dma", "memset"])
def test_other_instructions_refuse_an_indirect_view_by_name(use):
    with pytest.raises(ViewError, match="Tensor Indirection view: only the dst and the gathered input"):
        nki.run(_other_use(use), TABLE, COLUMNS, target="trn3")


@nki.jit
def gather_per_tile(table, columns):
    """A loop of tiles, each gathering its own columns (the loop's instructions stamped by the fast path)."""
    T, P, F = table.shape
    out = nl.ndarray((T, P, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    for t in nl.affine_range(T):
        data = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=data, src=table[t])
        idx = nl.ndarray((P, 1), dtype=nl.uint16, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=columns[t])
        dense = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=dense, data1=data.indirect(idx, num_elem=4), data2=data[:, 0:4], op=nl.subtract)
        nisa.dma_copy(dst=out[t], src=dense)
    return out


def test_a_loop_of_gathers_traced_once_and_saved(tmp_path):
    table = RNG.normal(size=(6, 32, 20)).astype(np.float32)
    columns = RNG.integers(0, 20, size=(6, 32, 1)).astype(np.uint16)
    run = run_both(gather_per_tile, table, columns, target="trn3")
    expected = np.stack([np.take_along_axis(table[t], expected_offsets(columns[t], 4), 1) - table[t][:, 0:4]
                         for t in range(6)])
    np.testing.assert_array_equal(run.outputs, expected)
    program = nki.trace(gather_per_tile, table, columns, target="trn3")
    program.save(tmp_path / "gather.json")
    loaded = type(program).load(tmp_path / "gather.json")
    indirect = lambda p: [i for i in p.instructions if i.opcode == "tensor_indirect"]  # noqa: E731
    assert len(indirect(loaded)) == 6
    assert [i.attrs for i in indirect(loaded)] == [i.attrs for i in indirect(program)]
    assert indirect(loaded)[0].attrs["attrs"] == {"op": "subtract", "engine": "dve"}


@nki.jit
def gathered_reductions(table, columns):
    """Each Vector / Scalar instruction that takes an indirect input, on the same gathered columns."""
    P, F = table.shape
    data = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=table)
    idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=columns)
    n = 6
    sums = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=sums, op=nl.add, data=data.indirect(idx, num_elem=n), axis=1)
    scaled = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
    largest = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=scaled, data=data.indirect(idx, num_elem=n), op0=nl.multiply, operand0=3.0,
                              reduce_op=nl.maximum, reduce_res=largest)
    running = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(dst=running, src=data.indirect(idx, num_elem=n), op0=nl.multiply, op1=nl.add,
                                  imm0=1.0, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    exps = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.exponential(dst=exps, src=data.indirect(idx, num_elem=n), max_value=1.0)
    act = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
    act_sums = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(dst=act, op=nl.exp, data=data.indirect(idx, num_elem=n), reduce_op=nl.add,
                           reduce_res=act_sums)
    out = nl.ndarray((P, 4 * n + 3), dtype=nl.float32, buffer=nl.shared_hbm)
    for k, tile in enumerate((scaled, running, exps, act)):
        nisa.dma_copy(dst=out[:, k * n:(k + 1) * n], src=tile)
    for k, tile in enumerate((sums, largest, act_sums)):
        nisa.dma_copy(dst=out[:, 4 * n + k:4 * n + k + 1], src=tile)
    return out


def test_reductions_scans_and_exponentials_read_gathered_columns():
    table = RNG.normal(size=(32, 24)).astype(np.float32)
    columns = RNG.integers(0, 24, size=(32, 1)).astype(np.uint16)
    run = run_both(gathered_reductions, table, columns, target="trn3")
    g = np.take_along_axis(table, expected_offsets(columns, 6), axis=1)
    expected = np.concatenate([3 * g, np.cumsum(g, axis=1), np.exp(g - 1), np.exp(g),
                               g.sum(1, keepdims=True), (3 * g).max(1, keepdims=True),
                               np.exp(g).sum(1, keepdims=True)], axis=1)
    np.testing.assert_allclose(run.outputs, expected, rtol=2e-6, atol=1e-6)


@nki.jit
def activate2_scatter(table, columns):
    """activate2 reading gathered columns and scattering exp(2x + 1) back over them (Scalar engine)."""
    P, F = table.shape
    data = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=table)
    idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=columns)
    nisa.activate2(dst=data.indirect(idx, num_elem=2), op=nl.exp, data=data.indirect(idx, num_elem=2), imm0=2.0,
                   imm1=1.0, op0=nl.multiply, op1=nl.add)
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=data)
    return out


def test_activate2_gathers_and_scatters_in_place():
    table = RNG.normal(size=(16, 10)).astype(np.float32)
    columns = np.array([[4], [9]] + [[0]] * 14, np.uint16)
    run = run_both(activate2_scatter, table, columns, target="trn3")
    expected = table.copy()
    expected[:, [4, 9]] = np.exp(2 * table[:, [4, 9]] + 1)
    np.testing.assert_allclose(run.outputs, expected, rtol=2e-6)


@nki.jit
def default_count(table, columns):
    data = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=table)
    idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=columns)
    gathered = data.indirect(idx)
    dense = nl.ndarray(gathered.shape, dtype=table.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=dense, src=gathered)
    out = nl.ndarray(gathered.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dense)
    return out


@pytest.mark.parametrize("partitions", [8, 16, 64])
def test_num_elem_defaults_to_the_offsets_a_group_holds(partitions):
    table = RNG.normal(size=(partitions, 30)).astype(np.float32)
    columns = RNG.integers(0, 30, size=(partitions, 2)).astype(np.uint16)
    out = nki.run(default_count, table, columns, target="trn3").outputs
    count = min(16, partitions) * 2                   # index.size for up to 16 partitions
    assert out.shape == (partitions, count)
    np.testing.assert_array_equal(out, np.take_along_axis(table, expected_offsets(columns, count), axis=1))


def test_a_scatter_naming_a_column_twice_keeps_the_last_write():
    base = np.zeros((16, 8), np.float32)
    a = np.tile(np.arange(1, 4, dtype=np.float32), (16, 1))
    columns = np.array([[5], [5], [2]] + [[0]] * 13, np.uint16)
    out = nki.run(scatter_sum, base, a, np.zeros_like(a), columns, target="trn3").outputs
    assert (out[:, 5] == 2).all() and (out[:, 2] == 3).all() and (out[:, [0, 1, 3, 4, 6, 7]] == 0).all()


@nki.jit
def bf16_copies(table, columns):
    """A bf16 copy of 64 contiguous columns, then of 64 gathered ones."""
    data = nl.ndarray(table.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=table)
    idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=columns)
    dense = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=dense, src=data[:, 0:64])
    gathered = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=gathered, src=data.indirect(idx, num_elem=64))
    out = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=gathered)
    return out


def test_a_gathered_input_is_costed_without_the_contiguous_performance_mode():
    table = np.zeros((128, 256), np.float32)
    run = nki.run(bf16_copies, table, np.zeros((128, 4), np.uint16), target="trn3", timing_only=True)
    contiguous, gathered = [r.duration_ns for r in run.timeline if r.opcode == "tensor_copy"]
    assert gathered > contiguous


@nki.jit
def scatter_into_a_placed_block(base, values, columns):
    """A scatter into one block of a tensor the kernel placed itself (ncc.sbuf.mod_alloc): the block keeps
    the columns the scatter does not write."""
    B, P, F = base.shape
    blocks = nl.ndarray((B, nl.par_dim(P), F), dtype=nl.float32,
                        buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    for b in range(B):
        nisa.dma_copy(dst=blocks[b], src=base[b])
    x = nl.ndarray(values.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=values)
    idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=columns)
    nisa.tensor_copy(dst=blocks[1].indirect(idx, num_elem=values.shape[1]), src=x)
    out = nl.ndarray((B, P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    for b in range(B):
        nisa.dma_copy(dst=out[b], src=blocks[b])
    return out


def test_a_scatter_into_a_placed_block_keeps_its_other_columns():
    base = RNG.normal(size=(2, 16, 12)).astype(np.float32)
    values = RNG.normal(size=(16, 2)).astype(np.float32)
    columns = np.array([[3], [8]] + [[0]] * 14, np.uint16)
    out = nki.run(scatter_into_a_placed_block, base, values, columns, target="trn3").outputs
    expected = base.copy()
    expected[1][:, [3, 8]] = values
    np.testing.assert_array_equal(out, expected)


@nki.jit
def gather_from_a_slice(table, columns):
    """Offsets count the columns of the sliced view .indirect() is called on."""
    P, F = table.shape
    data = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=table)
    idx = nl.ndarray(columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=columns)
    dense = nl.ndarray((P, 3), dtype=table.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=dense, src=data[:, 8:24].indirect(idx, num_elem=3))
    out = nl.ndarray((P, 3), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dense)
    return out


def test_offsets_count_the_columns_of_the_view():
    table = RNG.normal(size=(16, 32)).astype(np.float32)
    columns = np.array([[0], [15], [4]] + [[0]] * 13, np.uint16)
    out = nki.run(gather_from_a_slice, table, columns, target="trn3").outputs
    np.testing.assert_array_equal(out, table[:, [8, 23, 12]])
    columns[1, 0] = 16                                # past the slice's 16 columns, inside the tile
    with pytest.raises(IndirectionOffsetError, match="past the 16 elements"):
        nki.run(gather_from_a_slice, table, columns, target="trn3")


# -- tensor_copy_predicated: the predicate gathered, dst scattered; src never indirect ---------------------
def _predicated_copy(count, number=None, indirect_src=False):
    @nki.jit
    def predicated_copy(base, values, flags, predicate_columns, dst_columns):
        """out = base with values (or a number) copied into the dst columns at the offsets where the predicate's
        columns at its offsets are nonzero."""
        P, F = base.shape
        dst = nl.ndarray((P, F), dtype=base.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=base)
        src = nl.ndarray(values.shape, dtype=values.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=values)
        predicate = nl.ndarray(flags.shape, dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(dst=predicate, src=flags)
        p_idx = nl.ndarray(predicate_columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
        nisa.dma_copy(dst=p_idx, src=predicate_columns)
        d_idx = nl.ndarray(dst_columns.shape, dtype=nl.uint16, buffer=nl.sbuf)
        nisa.dma_copy(dst=d_idx, src=dst_columns)
        source = src.indirect(p_idx, num_elem=count) if indirect_src else (src if number is None else number)
        nisa.tensor_copy_predicated(dst=dst.indirect(d_idx, num_elem=count), src=source,
                                    predicate=predicate.indirect(p_idx, num_elem=count))
        out = nl.ndarray((P, F), dtype=base.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=dst)
        return out

    return predicated_copy


def _distinct_columns(P, count, F):
    """An index [P, 1]-or-wider whose offsets are distinct within each group of 16 partitions."""
    k = -(-count // min(16, P))
    columns = np.zeros((P, k), np.uint16)
    for first in range(0, P, 16):
        rows = min(16, P - first)
        for i, column in enumerate(RNG.permutation(F)[:count]):
            columns[first + i % rows, i // rows] = column
    return columns


@pytest.mark.parametrize("number", [None, 7.0])
def test_tensor_copy_predicated_gathers_its_predicate_and_scatters_dst(number):
    P, F, count = 48, 20, 12
    base = RNG.normal(size=(P, F)).astype(np.float32)
    values = RNG.normal(size=(P, count)).astype(np.float32)
    flags = RNG.integers(0, 2, size=(P, F)).astype(np.uint8)
    p_cols, d_cols = _distinct_columns(P, count, F), _distinct_columns(P, count, F)
    run = run_both(_predicated_copy(count, number), base, values, flags, p_cols, d_cols, target="trn3")
    holds = np.take_along_axis(flags, expected_offsets(p_cols, count), 1) != 0
    expected = base.copy()
    new = values if number is None else np.full_like(values, number)
    where = expected_offsets(d_cols, count)
    np.put_along_axis(expected, where, np.where(holds, new, np.take_along_axis(base, where, 1)), axis=1)
    np.testing.assert_array_equal(run.outputs, expected)


def test_tensor_copy_predicated_takes_no_indirect_src():
    args = (TABLE, TABLE[:, :4], (TABLE > 0).astype(np.uint8), COLUMNS, COLUMNS)
    with pytest.raises(IndirectionOperandError, match="tensor_copy_predicated src does not take an .indirect"):
        nki.run(_predicated_copy(4, indirect_src=True), *args, target="trn3")


def test_a_vector_instruction_reads_at_most_a_16_partition_groups_offsets():
    """An .indirect() view may name up to a 32-partition group's offsets (the Tensor engine's); a Vector
    instruction reading it refuses more than its 16-partition group holds."""
    with pytest.raises(ShapeMismatchError, match="each group of 16 partitions holds 16 offsets"):
        nki.run(_one_copy(count=20), TABLE, COLUMNS, target="trn3")
