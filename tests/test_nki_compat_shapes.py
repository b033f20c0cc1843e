"""Shape rules of AWS's NKI that its own kernels rely on (reference attention, vision and norm
kernels), checked with kernels of our own in AWS's public style (tests/nki_kernels/windows.py)."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.language as nl
import trnlab.nki.isa as nisa
from tests.nki_kernels import windows


def test_a_reduction_over_several_negative_free_axes_with_a_mask_on_them():
    x = np.random.default_rng(0).normal(size=(64, 8, 12)).astype(np.float32)
    expected = x.reshape(64, 2, 4, 3, 4).mean(axis=(2, 4)).reshape(64, 6)
    np.testing.assert_allclose(windows.window_means(x, 4), expected, rtol=1e-5, atol=1e-6)


def test_an_integer_column_of_an_sbuf_tile_stays_two_dimensional():
    x = np.random.default_rng(1).normal(size=(128, 64)).astype(np.float32)
    np.testing.assert_allclose(windows.shift_by_column(x, 5), np.exp(x - x[:, 5:6]), rtol=1e-5)


@pytest.mark.parametrize("rows", [300, 256])
def test_bn_stats_masked_along_free_axes_keeps_the_valid_rows_of_a_partial_tile(rows):
    x = np.random.default_rng(2).normal(size=(rows, 700)).astype(np.float32)
    out = windows.row_mean_var(x)
    np.testing.assert_allclose(out[:, 0], x[:, 512:].mean(axis=1), rtol=1e-4, atol=1e-5)   # the last chunk
    np.testing.assert_allclose(out[:, 1], x[:, 512:].var(axis=1), rtol=1e-4, atol=1e-5)


def test_a_double_buffered_direct_allocation_computes_the_same_as_automatic_allocation():
    x = np.random.default_rng(3).normal(size=(512, 256)).astype(np.float32)
    run = nki.run(windows.double_buffered_scale, x, 3.0)
    np.testing.assert_allclose(run.outputs, 3.0 * x, rtol=1e-6)
    sbuf = [b for b in run.program.buffers if b.memory == "sbuf" and b.first >= 0]
    # four logical input tiles over two physical ones, and one result tile reused every iteration
    # (each value a buffer of its own, on the address the kernel gave it)
    assert sorted({(b.offset, b.partition_bytes) for b in sbuf}) == [(0, 1024), (1024, 1024), (2048, 1024)]


def test_logical_tiles_of_a_modulo_allocation_share_their_physical_tile():
    x = np.random.default_rng(4).normal(size=(128, 64)).astype(np.float32)
    np.testing.assert_array_equal(windows.rotation_aliases(x), x)


def test_slicing_several_rotating_blocks_at_once_is_refused_with_the_rule():
    import trnlab.nki.compiler as ncc

    @nki.jit
    def kernel(x_tensor):
        blocks = nl.ndarray((4, nl.par_dim(128), 64), dtype=nl.float32,
                            buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        nl.store(x_tensor, value=nl.copy(blocks[0:2]))
        return x_tensor

    with pytest.raises(nki.NKIError, match="rotate over 2 physical"):
        kernel(np.zeros((128, 64), np.float32))


def test_profile_keeps_existing_artifacts_unless_overwrite_as_aws_defaults(tmp_path):
    from tests.nki_kernels.tensor_add import add_single_tile as nki_tensor_add_kernel
    x = np.ones((128, 512), np.float32)
    first = nki.profile(working_directory=str(tmp_path), save_trace_name="add.ntff")(nki_tensor_add_kernel)
    first(x, x)
    again = nki.profile(working_directory=str(tmp_path), save_trace_name="add.ntff")(nki_tensor_add_kernel)
    with pytest.raises(FileExistsError, match="overwrite=False"):
        again(x, x)
    nki.profile(working_directory=str(tmp_path), save_trace_name="add.ntff", overwrite=True)(nki_tensor_add_kernel)(x, x)
    with pytest.raises(nki.NKIError, match="absolute path"):
        nki.profile(working_directory="profiles")(nki_tensor_add_kernel)(x, x)


def test_benchmark_with_save_trace_name_writes_the_trace(tmp_path, monkeypatch):
    from tests.nki_kernels.tensor_add import add_single_tile as nki_tensor_add_kernel
    monkeypatch.chdir(tmp_path)
    x = np.ones((128, 512), np.float32)
    bench = nki.benchmark(warmup=5, iters=20, save_trace_name="local_trace.ntff")(nki_tensor_add_kernel)
    bench(x, x)
    assert bench.benchmark_result.nc_latency.get_latency_percentile(1) > 0
    assert (tmp_path / "local_trace.ntff").stat().st_size > 0


def test_the_tensor_layer_imports_neither_isa_nor_language():
    # the layering reads one way (tensor <- isa <- language): tiles get their operations installed
    import ast
    import pathlib
    import trnlab.nki
    source = pathlib.Path(trnlab.nki.__file__).with_name("tensor.py").read_text()
    tree = ast.parse(source)
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    modules |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             and node.module == "trnlab.nki" for alias in node.names}
    assert not {m for m in modules if m and (m.endswith(".isa") or m.endswith(".language"))}
    assert not names & {"isa", "language"}


def test_an_indirect_load_from_a_sub_table_with_a_partial_last_tile():
    table = np.random.default_rng(5).normal(size=(2, 200, 48)).astype(np.float32)
    np.testing.assert_array_equal(windows.reverse_rows(table), table[:, ::-1])


def test_psum_tiles_of_a_bank_rotation_each_start_a_bank():
    rng = np.random.default_rng(6)
    a = rng.normal(size=(128, 256)).astype(np.float32)
    b = rng.normal(size=(128, 128)).astype(np.float32)
    run = nki.run(windows.rotating_psum_products, a, b)
    expected = np.stack([a[:, i * 64:(i + 1) * 64].T @ b for i in range(4)])
    np.testing.assert_allclose(run.outputs, expected, rtol=1e-4, atol=1e-4)
    psum = [buf for buf in run.program.buffers if buf.memory == "psum" and buf.placement and buf.first >= 0]
    # two banks (2 and 3), a tile starting each: one buffer per physical tile and value
    assert sorted({buf.offset for buf in psum}) == [2 * 2048, 3 * 2048]


def test_assigning_a_matmul_into_a_written_psum_tile_overwrites_it_and_plus_equals_accumulates():
    @nki.jit
    def kernel(a_tensor, b_tensor):
        out = nl.ndarray((2, 64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        a, b = nl.load(a_tensor), nl.load(b_tensor)
        acc = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)
        acc[...] = nisa.nc_matmul(a[:, 0:64], b)
        acc[...] = nisa.nc_matmul(a[:, 64:128], b)          # an assignment: only the second product
        nl.store(out[0], value=nl.copy(acc))
        acc[...] += nisa.nc_matmul(a[:, 0:64], b)           # accumulates onto it
        nl.store(out[1], value=nl.copy(acc))
        return out

    rng = np.random.default_rng(7)
    a = rng.normal(size=(128, 128)).astype(np.float32)
    b = rng.normal(size=(128, 128)).astype(np.float32)
    out = kernel(a, b)
    np.testing.assert_allclose(out[0], a[:, 64:].T @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[1], a[:, 64:].T @ b + a[:, :64].T @ b, rtol=1e-4, atol=1e-4)


@nki.jit
def _store_through_a_reshaped_output(x):
    # x: [4*128, 64]; the output is declared [4, 128, 64] and written through a [512, 64] view
    out = nl.ndarray((4, 128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    flat = out.reshape((512, 64))
    for b in nl.affine_range(4):
        tile = nl.load(x[b * 128:(b + 1) * 128, :])
        nl.store(flat[b * 128:(b + 1) * 128, :], value=nl.multiply(tile, 2.0))
    return out


def test_an_output_written_through_its_reshape_is_read_back_whole():
    x = np.random.default_rng(7).normal(size=(512, 64)).astype(np.float32)
    out = _store_through_a_reshaped_output(x)
    np.testing.assert_allclose(out, 2.0 * x.reshape(4, 128, 64), rtol=1e-6)


@nki.jit
def _store_half_through_a_reshape(x):
    out = nl.ndarray((2, 128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    flat = out.reshape((256, 64))
    nl.store(flat[0:128, :], value=nl.load(x[0:128, :]))
    return out


def test_the_unwritten_half_of_a_reshaped_output_is_still_an_uninitialised_read():
    from trnlab.hardware.errors import UninitializedReadError
    x = np.random.default_rng(8).normal(size=(256, 64)).astype(np.float32)
    with pytest.raises(UninitializedReadError):
        _store_half_through_a_reshape(x)
