"""NKI scalar values (`nisa.NkiScalar`, `scalar_load`, `scalar_store`): an integer computed on the device, its
arithmetic traced into register instructions that wrap at 32 bits, used as an access pattern's scalar_offset
and as a bound of nl.fori_loop; the rules of AWS's NkiScalar / scalar_load pages refused by name. Values
against NumPy with the fast paths on and off."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.core import NeuronCore
from trnlab.hardware.device import Device
from trnlab.hardware.errors import DtypeError
from trnlab.hardware.errors import OutOfBoundsError
from trnlab.hardware.system import register_value
from trnlab.nki.errors import NKIError, ViewError
from trnlab.nki.isa_scalars import ScalarComparisonError

from nki_isa_helpers import load_scalar, run_both

INT32 = st.integers(-(2**31), 2**31 - 1)


@nki.jit
def scalar_arithmetic(a, b):
    """out = [a * 4 + 1, 3 - a, -(a - b), a * b] computed on the device by NkiScalar arithmetic."""
    x, y = load_scalar(a), load_scalar(b)
    results = (x * 4 + 1, 3 - x, -(x - y), x * y)
    tile = nl.ndarray((1, len(results)), dtype=nl.int32, buffer=nl.sbuf)
    for k, value in enumerate(results):
        nisa.scalar_store(tile[:, k:k + 1], value)
    out = nl.ndarray((1, len(results)), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@settings(max_examples=12, deadline=None)
@given(a=INT32, b=INT32)
def test_scalar_arithmetic_wraps_at_32_bits_like_int32(a, b):
    run = run_both(scalar_arithmetic, np.array([[a]], np.int32), np.array([[b]], np.int32))
    x, y = np.int32(a), np.int32(b)
    with np.errstate(over="ignore"):
        expected = [x * np.int32(4) + np.int32(1), np.int32(3) - x, -(x - y), x * y]
    np.testing.assert_array_equal(run.outputs, np.array([expected], np.int32))


def test_a_32_bit_product_wraps_as_aws_states():
    run = run_both(scalar_arithmetic, np.array([[100000]], np.int32), np.array([[100000]], np.int32))
    assert run.outputs[0, 3] == 1410065408             # "100000 * 100000 yields 1410065408"


def test_a_64_bit_register_instruction_does_not_wrap_at_32_bits():
    core = NeuronCore("trn2", mode="full")
    core.register_move(register=1, value=100000)
    core.register_op(register=2, a=1, op="multiply", b=1, bits=64)
    core.register_op(register=3, a=1, op="multiply", b=1)
    state = core._system_state()
    assert (register_value(state, 2), register_value(state, 3)) == (10**10, 1410065408)


@nki.jit
def rows_at_a_scalar_offset(table, row):
    """out = table's two rows starting at row * 2 + 1, the offset computed on the device."""
    R, F = table.shape
    s = load_scalar(row)
    tile = nl.ndarray((2, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=table.ap([[F, 2], [1, F]], offset=0, scalar_offset=s * 2 + 1, indirect_dim=0))
    out = nl.ndarray((2, F), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@pytest.mark.parametrize("row", [0, 2, 3])
def test_an_nki_scalar_is_the_scalar_offset_of_an_access_pattern(row):
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    run = run_both(rows_at_a_scalar_offset, table, np.array([[row]], np.int32))
    np.testing.assert_array_equal(run.outputs, table[2 * row + 1: 2 * row + 3])


@nki.jit
def sum_of_rows(table, count):
    """out = the sum of table's first count + 1 rows: a loop the device runs, bounded by an NkiScalar
    expression, its iterator an NkiScalar read as a scalar_offset."""
    R, F = table.shape
    n = load_scalar(count)
    acc = nl.ndarray((1, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    row = nl.ndarray((1, F), dtype=nl.float32, buffer=nl.sbuf)

    def body(i):
        assert isinstance(i, nisa.NkiScalar)         # "i is a NkiScalar unless either lower or upper is a VirtualRegister"
        nisa.dma_copy(dst=row, src=table.ap([[F, 1], [1, F]], offset=0, scalar_offset=i, indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)

    nl.fori_loop(0, n + 1, body)
    out = nl.ndarray((1, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_an_nki_scalar_bounds_a_loop_the_device_runs():
    table = np.random.default_rng(3).normal(size=(8, 5)).astype(np.float32)
    kernel = sum_of_rows
    for count in (0, 3, 7):
        run = run_both(kernel, table, np.array([[count]], np.int32))
        np.testing.assert_allclose(run.outputs, table[:count + 1].sum(axis=0, keepdims=True), rtol=1e-6)


# -- the rules -------------------------------------------------------------------------------------------
def test_scalar_load_takes_a_signed_integer_tile():
    @nki.jit
    def unsigned(x):
        load_scalar(x)
        return x

    with pytest.raises(DtypeError, match="Unsigned dtypes are not accepted"):
        nki.run(unsigned, np.array([[1]], np.uint32))


def _comparison_used_as(use):
    @nki.jit
    def kernel(table, row):
        s = load_scalar(row)
        flag = s < 3                                   # traced ...
        if use == "offset":                            # ... but the result cannot be used
            table.ap([[4, 1], [1, 4]], offset=0, scalar_offset=flag, indirect_dim=0)
        elif use == "bound":
            nl.fori_loop(0, flag, lambda i: None)
        elif use == "condition":
            if flag:
                pass
        else:
            nisa.scalar_store(nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf), flag)
        return table

    return kernel


@pytest.mark.parametrize("use", ["offset", "bound", "store", "condition"])
def test_a_comparison_is_traced_but_its_result_cannot_be_used(use):
    with pytest.raises(ScalarComparisonError, match="cannot be used"):
        nki.run(_comparison_used_as(use), np.zeros((4, 4), np.float32), np.array([[1]], np.int32))


def test_int64_scalars_bound_no_loop_address_no_on_chip_operand_and_do_not_compare():
    wide = nisa.NkiScalar(5, dtype="int64")            # (trnlab has no nl.int64 tile to scalar_load one from)
    with pytest.raises(DtypeError, match="must be 32-bit"):
        nl.fori_loop(0, wide, lambda i: None)
    with pytest.raises(DtypeError, match="rejected at compile time"):
        wide < 3
    with pytest.raises(DtypeError, match="so long as the dtypes match"):
        wide + nisa.NkiScalar(1, dtype="int32")

    @nki.jit
    def on_chip_offset(x):
        tile = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)
        tile.ap([[4, 1], [1, 4]], offset=0, scalar_offset=nisa.NkiScalar(1, dtype="int64"), indirect_dim=0)
        return x

    with pytest.raises(DtypeError, match="on an SBUF or PSUM operand the offset must be nl.int32"):
        nki.run(on_chip_offset, np.zeros((4, 4), np.float32))


@nki.jit
def transposed_rows(table, row):
    """out = table's two rows at the NkiScalar row, transposed by the DMA engines ([F, 2])."""
    R, F = table.shape
    s = load_scalar(row)
    tile = nl.ndarray((F, 2), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=tile, src=table.ap([[F, 2], [1, F]], offset=0, scalar_offset=s, indirect_dim=0))
    out = nl.ndarray((F, 2), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


def test_dma_transpose_moves_a_view_at_an_nki_scalar_offset():
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    run = run_both(transposed_rows, table, np.array([[6]], np.int32))
    np.testing.assert_array_equal(run.outputs, table[6:8].T)


def _run_time_scalar_used(use):
    @nki.jit
    def kernel(table, row):
        s = load_scalar(row)
        tile = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=table)
        out = nl.ndarray((1, table.shape[1]), dtype=table.dtype, buffer=nl.sbuf)
        if use == "engine":           # an on-chip view at a run-time offset, written by an instruction that
            nisa.memset(dst=tile.ap([[4, 1], [1, 4]], offset=0, scalar_offset=s, indirect_dim=0), value=0.0)
        else:
            nisa.tensor_copy(dst=out, src=tile[s])
        return table

    return kernel


def test_other_uses_of_a_view_at_a_run_time_offset_are_refused_by_name():
    with pytest.raises(ViewError, match="only DMAs move it"):
        nki.run(_run_time_scalar_used("engine"), np.zeros((4, 4), np.float32), np.array([[1]], np.int32))
    with pytest.raises(ViewError, match="on axis 0, its partition dimension"):   # t[s] on chip: a free axis only
        nki.run(_run_time_scalar_used("index"), np.zeros((4, 4), np.float32), np.array([[1]], np.int32))


@nki.jit
def window_sums(x, count):
    """out = the sum over the run-time loop i in [0, count) of x's 4 columns from column i: an engine reading
    an SBUF tile at the loop's offset."""
    P, F = x.shape
    tile = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    acc = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    window = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.sbuf)

    def body(i):
        nisa.tensor_copy(dst=window, src=tile.ap([[F, P], [1, 4]], offset=0, scalar_offset=i, indirect_dim=1))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=window, op=nl.add)

    nl.fori_loop(0, load_scalar(count), body)
    out = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


@settings(max_examples=6, deadline=None)
@given(count=st.integers(0, 9), seed=st.integers(0, 2**16))
def test_an_engine_reads_a_tile_at_the_run_time_loops_offset(count, seed):
    x = np.random.default_rng(seed).normal(size=(3, 12)).astype(np.float32)
    run = run_both(window_sums, x, np.array([[count]], np.int32))
    expected = np.zeros((3, 4), np.float32)
    for i in range(count):
        expected += x[:, i:i + 4]
    np.testing.assert_allclose(run.outputs, expected, rtol=1e-6, atol=1e-6)


@nki.jit
def scaled_into_column(x, column):
    """out = zeros [P, 8] with 2 * x ([P, 2]) written at columns column .. column + 1 (an NkiScalar offset of
    the dst of tensor_scalar)."""
    P = x.shape[0]
    tile = nl.ndarray((P, 2), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    wide = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=wide, value=0.0)
    nisa.tensor_scalar(dst=wide.ap([[8, P], [1, 2]], offset=0, scalar_offset=load_scalar(column), indirect_dim=1),
                       data=tile, op0=nl.multiply, operand0=2.0)
    out = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=wide)
    return out


def test_an_engine_writes_a_tile_at_an_nki_scalar_offset_and_names_one_past_its_end():
    x = np.random.default_rng(1).normal(size=(4, 2)).astype(np.float32)
    run = run_both(scaled_into_column, x, np.array([[5]], np.int32))
    expected = np.zeros((4, 8), np.float32)
    expected[:, 5:7] = 2 * x
    np.testing.assert_array_equal(run.outputs, expected)
    with pytest.raises(OutOfBoundsError, match="run-time offset of 7 elements reaches element 8 "):
        nki.run(scaled_into_column, x, np.array([[7]], np.int32))    # column 8 of partition 0: not partition 1


@nki.jit
def odd_rows(table, count):
    """out = the sum of table's rows 1, 3, ..., 2 count - 1: arithmetic on the run-time loop's NkiScalar
    iterator, recomputed on the device each iteration."""
    R, F = table.shape
    acc = nl.ndarray((1, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    row = nl.ndarray((1, F), dtype=nl.float32, buffer=nl.sbuf)

    def body(i):
        nisa.dma_copy(dst=row, src=table.ap([[F, 1], [1, F]], offset=0, scalar_offset=i * 2 + 1, indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)

    nl.fori_loop(0, load_scalar(count), body)
    out = nl.ndarray((1, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_arithmetic_on_the_loop_iterator_is_recomputed_each_iteration():
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    run = run_both(odd_rows, table, np.array([[3]], np.int32))
    np.testing.assert_array_equal(run.outputs, table[[1, 3, 5]].sum(axis=0, keepdims=True))


def test_a_program_with_scalar_arithmetic_and_register_offsets_is_saved_and_runs_loaded(tmp_path):
    x = np.random.default_rng(4).normal(size=(3, 12)).astype(np.float32)
    program = nki.trace(window_sums, x, np.array([[4]], np.int32))
    program.save(tmp_path / "window.json")
    loaded = type(program).load(tmp_path / "window.json")
    opcodes = [i.opcode for i in loaded.instructions]
    assert "register_load" in opcodes and "tensor_register_offset" in opcodes
    assert [i.attrs for i in loaded.instructions] == [i.attrs for i in program.instructions]
    run = Device("trn2", cores=1).run(loaded, x, np.array([[4]], np.int32))
    np.testing.assert_allclose(run.outputs, sum(x[:, i:i + 4] for i in range(4)), rtol=1e-6)
