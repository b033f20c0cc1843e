"""Run-time offsets beyond one input and dst: AWS states ``scalar_offset`` of an access pattern ("on an SBUF or
PSUM operand the offset must be nl.int32", nki.isa.scalar_load), so every SBUF / PSUM tile operand of the
instructions that read a register offset may be one (tensor_tensor's data1 and data2 together, a [P, 1]
operand, a bias, a reduce_res); and indexing by several run-time scalars ``t[s1, s2]`` ("A NkiScalar can be
used almost anywhere a Python int literal is used", nki.isa.NkiScalar) is one access pattern whose one
scalar_offset NkiScalar arithmetic computes. Values against NumPy (full mode, fast paths on and off), the
timing charged as the register-offset form already simulated, and what stays refused, refused by name."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.device import Device
from trnlab.hardware.errors import DtypeError, OutOfBoundsError
from trnlab.nki.errors import NKIError, ViewError

from nki_isa_helpers import compute_records, load_scalar, run_both

RNG = np.random.default_rng(21)


def _timeline(run) -> list:
    return [(r.engine, r.opcode, r.start_ns, r.end_ns) for r in (run.timeline[i] for i in range(len(run.timeline)))]


# -- several tile operands of one instruction at run-time offsets --------------------------------------------
def _windowed_add(moved):
    """out [P, 4] = x's columns a .. a + 3 + y's columns b .. b + 3 (a, b read on the device), with the
    operands named in `moved` at their run-time offset and the others at a fixed one (column 2)."""
    @nki.jit
    def windowed_add(x, y, a, b):
        P, F = x.shape
        xs = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        ys = nl.ndarray((P, F), dtype=y.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xs, src=x)
        nisa.dma_copy(dst=ys, src=y)
        sa, sb = load_scalar(a), load_scalar(b)
        first = xs.ap([[F, P], [1, 4]], offset=0, scalar_offset=sa, indirect_dim=1) if "data1" in moved \
            else xs[:, 2:6]
        second = ys.ap([[F, P], [1, 4]], offset=0, scalar_offset=sb, indirect_dim=1) if "data2" in moved \
            else ys[:, 2:6]
        total = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=total, data1=first, data2=second, op=nl.add)
        out = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=total)
        return out

    return windowed_add


@pytest.mark.parametrize("a, b", [(0, 5), (3, 1), (8, 8)])
def test_both_tensor_tensor_operands_at_run_time_offsets_are_numpy_windows(a, b):
    x, y = RNG.normal(size=(2, 6, 12)).astype(np.float32)
    run = run_both(_windowed_add(("data1", "data2")), x, y, np.array([[a]], np.int32), np.array([[b]], np.int32))
    np.testing.assert_array_equal(run.outputs, x[:, a:a + 4] + y[:, b:b + 4])


def test_data2_at_a_run_time_offset_is_charged_as_data1_at_one():
    x, y = RNG.normal(size=(2, 6, 12)).astype(np.float32)
    a, b = np.array([[2]], np.int32), np.array([[2]], np.int32)
    runs = {moved: nki.run(_windowed_add(moved), x, y, a, b) for moved in (("data1",), ("data2",), ("data1", "data2"))}
    for run in runs.values():                    # the same values whichever operand the offset moves
        np.testing.assert_array_equal(run.outputs, x[:, 2:6] + y[:, 2:6])
    charged = {moved: compute_records(run) for moved, run in runs.items()}
    assert charged[("data2",)] == charged[("data1",)] == charged[("data1", "data2")]
    timing = nki.run(_windowed_add(("data1", "data2")), x, y, a, b, timing_only=True)
    assert compute_records(timing) == charged[("data1", "data2")]


@nki.jit
def scaled_by_a_run_time_column(x, table, column):
    """out = x * table[:, column] + 1: tensor_scalar's [P, 1] operand0 at a run-time column of an SBUF table."""
    P, F = x.shape
    xs = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    ts = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    nisa.dma_copy(dst=ts, src=table)
    c = load_scalar(column)
    scaled = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=scaled, data=xs, op0=nl.multiply, operand0=ts[:, c],
                       op1=nl.add, operand1=1.0)
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=scaled)
    return out


def test_a_vector_operand_at_a_run_time_column_is_numpy_broadcasting():
    x = RNG.normal(size=(8, 16)).astype(np.float32)
    table = RNG.normal(size=(8, 5)).astype(np.float32)
    run = run_both(scaled_by_a_run_time_column, x, table, np.array([[3]], np.int32))
    np.testing.assert_allclose(run.outputs, x * table[:, 3:4] + 1, rtol=1e-6)


@nki.jit
def exp_with_run_time_bias_and_sum(x, biases, column):
    """out = exp(x + biases[:, column]) and its row sums written into sums[:, column] (activation_reduce's
    bias and reduce_res at one run-time column)."""
    P, F = x.shape
    K = biases.shape[1]
    xs = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    bs = nl.ndarray((P, K), dtype=biases.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    nisa.dma_copy(dst=bs, src=biases)
    sums = nl.ndarray((P, K), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=sums, value=0.0)
    c = load_scalar(column)
    e = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(dst=e, op=nl.exp, data=xs, bias=bs[:, c], reduce_op=nl.add, reduce_res=sums[:, c])
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    out_sums = nl.ndarray((P, K), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=e)
    nisa.dma_copy(dst=out_sums, src=sums)
    return out, out_sums


def test_a_bias_and_a_reduce_result_at_a_run_time_column_are_numpy():
    x = RNG.normal(size=(4, 8)).astype(np.float32)
    biases = RNG.normal(size=(4, 3)).astype(np.float32)
    run = run_both(exp_with_run_time_bias_and_sum, x, biases, np.array([[2]], np.int32))
    expected = np.exp(x + biases[:, 2:3])
    sums = np.zeros((4, 3), np.float32)
    sums[:, 2] = expected.sum(axis=1)
    np.testing.assert_allclose(run.outputs[0], expected, rtol=1e-5)
    np.testing.assert_allclose(run.outputs[1], sums, rtol=1e-5)


@nki.jit
def predicated_from_a_run_time_column(x, mask, table, column):
    """out = table's 8 columns from column where mask, x elsewhere: tensor_copy_predicated's src (which takes no
    .indirect() view) at a run-time offset."""
    P, F = x.shape
    out_tile = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    ms = nl.ndarray((P, F), dtype=mask.dtype, buffer=nl.sbuf)
    ts = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=out_tile, src=x)
    nisa.dma_copy(dst=ms, src=mask)
    nisa.dma_copy(dst=ts, src=table)
    K = table.shape[1]
    at = ts.ap([[K, P], [1, F]], offset=0, scalar_offset=load_scalar(column), indirect_dim=1)
    nisa.tensor_copy_predicated(dst=out_tile, predicate=ms, src=at)
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=out_tile)
    return out


def test_a_predicated_copys_source_at_a_run_time_offset_is_numpy_where():
    x = RNG.normal(size=(4, 8)).astype(np.float32)
    mask = (RNG.random(size=(4, 8)) < 0.5).astype(np.uint8)
    table = RNG.normal(size=(4, 12)).astype(np.float32)
    run = run_both(predicated_from_a_run_time_column, x, mask, table, np.array([[3]], np.int32))
    np.testing.assert_array_equal(run.outputs, np.where(mask != 0, table[:, 3:11], x))


@nki.jit
def add_after_a_far_write(x, y, b):
    """out = x[:, 0:4] + y's 4 columns from b, after a GpSimd memset of y's columns 8 .. 11: columns the
    pattern at offset 0 does not touch, but the run-time offset may."""
    P, F = x.shape
    xs = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    ys = nl.ndarray((P, F), dtype=y.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    nisa.dma_copy(dst=ys, src=y)
    sb = load_scalar(b)
    nisa.memset(dst=ys[:, 8:12], value=1.0, engine=nisa.gpsimd_engine)
    total = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=xs[:, 0:4], op=nl.add, engine=nisa.vector_engine,
                       data2=ys.ap([[F, P], [1, 4]], offset=0, scalar_offset=sb, indirect_dim=1))
    out = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=total)
    return out


def test_a_moved_operand_waits_for_every_write_to_its_tile():
    x, y = RNG.normal(size=(2, 6, 12)).astype(np.float32)
    for timing_only in (False, True):
        run = nki.run(add_after_a_far_write, x, y, np.array([[8]], np.int32), timing_only=timing_only)
        records = [run.timeline[i] for i in range(len(run.timeline))]
        memset = next(r for r in records if r.opcode == "memset" and r.engine == "pool")
        add = next(r for r in records if r.opcode == "tensor_tensor")
        assert add.start_ns >= memset.end_ns
    np.testing.assert_array_equal(run_both(add_after_a_far_write, x, y, np.array([[8]], np.int32)).outputs,
                                  x[:, 0:4] + 1.0)


@nki.jit
def running_window_sums(x, count):
    """out = sum over the run-time loop i < count of x's 4 columns from i, added straight from the tile
    (tensor_tensor's data2 at the loop's offset, no copy)."""
    P, F = x.shape
    tile = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    acc = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)

    def body(i):
        nisa.tensor_tensor(dst=acc, data1=acc, op=nl.add,
                           data2=tile.ap([[F, P], [1, 4]], offset=0, scalar_offset=i, indirect_dim=1))

    nl.fori_loop(0, load_scalar(count), body)
    out = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_data2_at_a_run_time_loops_offset_is_the_numpy_window_sum():
    x = RNG.normal(size=(3, 12)).astype(np.float32)
    run = run_both(running_window_sums, x, np.array([[5]], np.int32))
    np.testing.assert_allclose(run.outputs, sum(x[:, i:i + 4] for i in range(5)), rtol=1e-6, atol=1e-6)


@nki.jit
def trips_read_at_a_run_time_column(counts, column):
    """out[0, 0] = 1 + ... repeated n times, n = counts[0, column] + 0 computed by tensor_tensor with its data2 at
    the run-time column: a loop bound that depends on an instruction's second operand at a run-time offset."""
    K = counts.shape[1]
    cs = nl.ndarray((1, K), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=cs, src=counts)
    zero = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0)
    n = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=n, data1=zero, op=nl.add,
                       data2=cs.ap([[K, 1], [1, 1]], offset=0, scalar_offset=load_scalar(column), indirect_dim=1))
    acc = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)

    def body(i):
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.0)

    nl.fori_loop(0, nisa.scalar_load(n), body)
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_a_loop_bound_computed_through_a_run_time_data2_runs_its_trip_count():
    counts = np.array([[2, 7, 4]], np.int32)
    for column in range(3):
        run = nki.run(trips_read_at_a_run_time_column, counts, np.array([[column]], np.int32))
        assert run.outputs[0, 0] == counts[0, column]


def test_a_program_with_two_moved_operands_is_saved_and_runs_loaded(tmp_path):
    x, y = RNG.normal(size=(2, 6, 12)).astype(np.float32)
    args = (x, y, np.array([[1]], np.int32), np.array([[6]], np.int32))
    program = nki.trace(_windowed_add(("data1", "data2")), *args)
    program.save(tmp_path / "add.json")
    loaded = type(program).load(tmp_path / "add.json")
    assert [i.attrs for i in loaded.instructions] == [i.attrs for i in program.instructions]
    run = Device("trn2", cores=1).run(loaded, *args)
    np.testing.assert_array_equal(run.outputs, x[:, 1:5] + y[:, 6:10])


# -- t[s1, s2]: several run-time indices, one scalar_offset ---------------------------------------------------
@nki.jit
def pick_row(table, expert, row):
    """out = table[e, r] of an HBM table [E, R, F] (e, r read on the device): one DMA."""
    F = table.shape[2]
    e, r = load_scalar(expert), load_scalar(row)
    tile = nl.ndarray((1, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=table[e, r])
    out = nl.ndarray((1, F), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit
def pick_row_by_hand(table, expert, row):
    """pick_row with the offset written out: NkiScalar arithmetic e * R + r on axis 1."""
    _, R, F = table.shape
    e, r = load_scalar(expert), load_scalar(row)
    tile = nl.ndarray((1, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=table.ap([[F, 1], [1, F]], offset=0, scalar_offset=e * R + r, indirect_dim=1))
    out = nl.ndarray((1, F), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@pytest.mark.parametrize("e, r", [(0, 0), (2, 5), (3, 7)])
def test_two_run_time_indices_into_an_hbm_table_are_numpy_indexing(e, r):
    table = RNG.normal(size=(4, 8, 16)).astype(np.float32)
    run = run_both(pick_row, table, np.array([[e]], np.int32), np.array([[r]], np.int32))
    np.testing.assert_array_equal(run.outputs, table[e, r][None, :])


def test_an_index_past_its_own_axis_inside_the_table_reads_on_as_one_offset():
    table = RNG.normal(size=(4, 8, 16)).astype(np.float32)
    run = nki.run(pick_row, table, np.array([[1]], np.int32), np.array([[8]], np.int32))
    np.testing.assert_array_equal(run.outputs, table[2, 0][None, :])     # offset 1 * 8 + 8: row 0 of expert 2


def test_two_run_time_indices_cost_the_register_arithmetic_a_kernel_would_write():
    table = RNG.normal(size=(4, 8, 16)).astype(np.float32)
    e, r = np.array([[2]], np.int32), np.array([[5]], np.int32)
    folded, by_hand = nki.run(pick_row, table, e, r), nki.run(pick_row_by_hand, table, e, r)
    ops = [i.opcode for i in nki.trace(pick_row, table, e, r).instructions]
    assert ops.count("register_op") == 2           # e * 8, + r
    assert _timeline(folded) == _timeline(by_hand)


@nki.jit
def pick_block_and_row_on_chip(x, block, row):
    """out = x[:, b, r, :] of an SBUF tile [P, B, R, F] (b, r read on the device), copied by the Vector engine."""
    P, B, R, F = x.shape
    tile = nl.ndarray((P, B, R, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    b, r = load_scalar(block), load_scalar(row)
    picked = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=picked, src=tile[:, b, r, :])
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=picked)
    return out


@pytest.mark.parametrize("b, r", [(0, 0), (1, 2), (2, 3)])
def test_two_run_time_indices_into_free_axes_of_an_sbuf_tile_are_numpy_indexing(b, r):
    x = RNG.normal(size=(4, 3, 4, 8)).astype(np.float32)
    run = run_both(pick_block_and_row_on_chip, x, np.array([[b]], np.int32), np.array([[r]], np.int32))
    np.testing.assert_array_equal(run.outputs, x[:, b, r, :])


def test_a_register_and_an_nki_scalar_index_together():
    @nki.jit
    def by_register(table, expert, row):
        F = table.shape[2]
        e = nisa.register_alloc()
        held = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=held, src=expert)
        nisa.register_load(e, held)
        tile = nl.ndarray((1, F), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=table[e, load_scalar(row)])
        out = nl.ndarray((1, F), dtype=table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out

    table = RNG.normal(size=(4, 8, 16)).astype(np.float32)
    run = run_both(by_register, table, np.array([[3]], np.int32), np.array([[6]], np.int32))
    np.testing.assert_array_equal(run.outputs, table[3, 6][None, :])


# -- what is refused, by name -----------------------------------------------------------------------------------
def test_offsets_out_of_their_tensor_or_partition_are_named_when_read():
    table = np.zeros((4, 8, 16), np.float32)
    with pytest.raises(OutOfBoundsError):                        # e * 8 + r = 32: past the table
        nki.run(pick_row, table, np.array([[4]], np.int32), np.array([[0]], np.int32))
    x = np.zeros((4, 3, 4, 8), np.float32)
    with pytest.raises(OutOfBoundsError, match="outside the 96 elements of its partition"):
        nki.run(pick_block_and_row_on_chip, x, np.array([[2]], np.int32), np.array([[4]], np.int32))


def test_two_run_time_indices_of_different_widths_are_refused_as_nki_scalar_arithmetic():
    @nki.jit
    def mixed(table, row):
        tile = nl.ndarray((1, table.shape[2]), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=table[nisa.NkiScalar(1, dtype="int64"), load_scalar(row)])
        return table

    with pytest.raises(DtypeError, match="so long as the dtypes match"):
        nki.run(mixed, np.zeros((4, 8, 16), np.float32), np.array([[1]], np.int32))


def _on_chip_use(use):
    @nki.jit
    def kernel(x, index):
        P, F = x.shape
        tile = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        s = load_scalar(index)
        at = tile.ap([[F, P], [1, 4]], offset=0, scalar_offset=s, indirect_dim=1)
        if use == "partition":                   # a run-time index on the partition axis
            nisa.tensor_copy(dst=tile[0:1, 0:4], src=tile[s, 0:4])
        elif use == "memset":                    # an instruction that does not read a register offset
            nisa.memset(dst=at, value=0.0)
        elif use == "matmul":                    # the Tensor engine
            psum = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=psum, stationary=tile[:, 0:4], moving=at)
        return x

    return kernel


@pytest.mark.parametrize("use, rule", [("partition", "dim must not be 0 \\(partition dim\\)"),
                                       ("memset", "only DMAs move it"), ("matmul", "only DMAs move it")])
def test_forms_trnlab_does_not_simulate_are_refused_by_name(use, rule):
    with pytest.raises(ViewError, match=rule):
        nki.run(_on_chip_use(use), np.zeros((4, 8), np.float32), np.array([[1]], np.int32))


def test_an_indirect_view_and_a_run_time_offset_in_one_instruction_are_refused_by_name():
    @nki.jit
    def both(x, columns, index):
        P, F = x.shape
        tile = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        idx = nl.ndarray((P, 1), dtype=nl.uint16, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=columns)
        out = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=out, data1=tile.indirect(idx, num_elem=4), op=nl.add,
                           data2=tile.ap([[F, P], [1, 4]], offset=0, scalar_offset=load_scalar(index), indirect_dim=1))
        return x

    with pytest.raises(NKIError, match="with an .indirect\\(\\) view and a view at a run-time offset"):
        nki.run(both, np.zeros((32, 8), np.float32), np.zeros((32, 1), np.uint16), np.array([[1]], np.int32),
                target="trn3")
