"""Semantics that follow AWS's NKI where trnlab used to differ: multi-axis moving tiles, wide
broadcasts, Vector-engine transposes, transposing loads with iterators, compile-time masks, the copies
out of PSUM that AWS's compiler inserts, free-axis broadcasting, direct-allocation objects."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import errors


def _engines(run):
    return [(run.timeline[i].engine, run.timeline[i].opcode) for i in range(len(run.timeline))
            if not run.timeline[i].engine.startswith("dma")]


def test_matmul_keeps_the_free_axes_of_a_multi_axis_moving_tile():
    @nki.jit
    def kernel(w_tensor, x_tensor):
        out = nl.ndarray((64, 2, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((64, 2, 8), dtype=nl.float32, buffer=nl.psum)
        acc[...] += nisa.nc_matmul(nl.load(w_tensor), nl.load(x_tensor))    # [K, 64] x [K, 2, 8]
        nl.store(out, value=nl.copy(acc))
        return out

    rng = np.random.default_rng(0)
    w, x = rng.normal(size=(128, 64)).astype(np.float32), rng.normal(size=(128, 2, 8)).astype(np.float32)
    np.testing.assert_allclose(kernel(w, x), np.einsum("km,kab->mab", w, x), rtol=1e-4, atol=1e-4)


def test_broadcast_to_wider_than_one_matmul_uses_one_matmul_per_512_columns():
    @nki.jit
    def kernel(row_tensor):
        out = nl.ndarray((128, 1200), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(row_tensor).broadcast_to((128, 1200)))
        return out

    row = np.random.default_rng(1).normal(size=(1, 1200)).astype(np.float32)
    run = nki.run(kernel, row)
    np.testing.assert_array_equal(run.outputs, np.broadcast_to(row, (128, 1200)))
    assert [op for _, op in _engines(run)].count("nc_matmul") == 3


def test_nc_transpose_on_the_vector_engine_is_limited_to_32_by_32():
    @nki.jit
    def kernel(x_tensor):
        out = nl.ndarray((x_tensor.shape[1], x_tensor.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.nc_transpose(nl.load(x_tensor), engine=nisa.vector_engine))
        return out

    x = np.random.default_rng(2).normal(size=(32, 16)).astype(np.float32)
    run = nki.run(kernel, x)
    np.testing.assert_array_equal(run.outputs, x.T)
    assert _engines(run) == [("dve", "nc_transpose")]
    with pytest.raises(errors.MatmulShapeError, match="<= 32"):
        kernel(np.ones((64, 16), np.float32))


def test_load_transpose2d_accepts_arange_indices():
    @nki.jit
    def kernel(x_tensor):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(64)[:, None], nl.arange(128)[None, :]
        nl.store(out, value=nl.load_transpose2d(x_tensor[64 + i_p, i_f]))
        return out

    x = np.random.default_rng(3).normal(size=(128, 128)).astype(np.float32)
    np.testing.assert_array_equal(kernel(x), x[64:, :].T)


def test_a_compile_time_false_mask_drops_the_instruction():
    @nki.jit
    def kernel(x_tensor):
        out = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        rows = x_tensor.shape[0]
        ix, iy = nl.mgrid[0:128, 0:64]
        for t in nl.affine_range(2):
            nl.store(out[t * 128 + ix, iy], value=0.0)
            tile = nl.load(x_tensor[t * 128 + ix, iy], mask=(t * 128 < rows))    # a Python bool
            nl.store(out[t * 128 + ix, iy], value=tile, mask=(t * 128 < rows))
        return out

    x = np.random.default_rng(4).normal(size=(128, 64)).astype(np.float32)
    out = kernel(x)
    np.testing.assert_array_equal(out[:128], x)
    np.testing.assert_array_equal(out[128:], 0)


def test_mgrid_fields_name_the_partition_and_free_iterators():
    grid = nl.mgrid[0:128, 0:4, 0:3, 0:2]
    assert (grid.p, grid.x, grid.y, grid.z) == tuple(grid)
    with pytest.raises(AttributeError, match="no field .z"):
        nl.mgrid[0:128, 0:4].z


def test_a_tensor_engine_result_assigned_into_sbuf_goes_through_psum():
    @nki.jit
    def kernel(x_tensor):
        out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        transposed = nl.ndarray((2, nl.par_dim(64), 128), dtype=nl.float32, buffer=nl.sbuf)
        transposed[1, :, :] = nisa.nc_transpose(nl.load(x_tensor))
        nl.store(out, value=transposed[1])
        return out

    x = np.random.default_rng(5).normal(size=(128, 64)).astype(np.float32)
    run = nki.run(kernel, x)
    np.testing.assert_array_equal(run.outputs, x.T)
    assert _engines(run) == [("pe", "nc_transpose"), ("dve", "tensor_copy")]


def test_gpsimd_instructions_read_a_psum_operand_through_a_copy():
    @nki.jit
    def kernel(x_tensor):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x_tensor)
        scores = nisa.nc_matmul(t, t)                                        # PSUM
        i_q, i_k = nl.mgrid[0:128, 0:128]
        nl.store(out, value=nisa.affine_select(i_q >= i_k, scores, -9984.0))
        return out

    x = (np.random.default_rng(6).normal(size=(128, 128)) * 0.1).astype(np.float32)
    expected = np.where(np.tril(np.ones((128, 128), bool)), x.T @ x, -9984.0)
    np.testing.assert_allclose(kernel(x), expected, rtol=1e-4, atol=1e-5)


def test_free_axes_of_size_one_broadcast_in_element_wise_math():
    @nki.jit
    def kernel(a_tensor, b_tensor):
        out = nl.ndarray(b_tensor.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.equal(nl.load(a_tensor), nl.load(b_tensor), dtype=nl.float32))
        return out

    rng = np.random.default_rng(7)
    b = rng.integers(0, 3, (128, 6, 3, 3)).astype(np.float32)
    a = b.max(axis=(2, 3), keepdims=True)
    np.testing.assert_array_equal(kernel(a, b), (a == b).astype(np.float32))


def test_mod_alloc_places_logical_tiles_modulo_the_physical_ones():
    alloc = ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(2,))
    addresses = [alloc.address((i,), 128, 2048) for i in range(4)]
    assert addresses == [(0, 1024), (0, 3072), (0, 1024), (0, 3072)]
    assert alloc.physical_tiles() == 2
    psum = ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(2,))
    assert [psum.address((i,), 128, 2048)[0] for i in range(3)] == [2, 3, 2]
    with pytest.raises(TypeError, match="base_bank"):
        ncc.psum.mod_alloc(base_addr=0)
    with pytest.raises(TypeError, match="base_addr"):           # required, as in AWS's signature
        ncc.sbuf.mod_alloc(num_free_tiles=(2,))


def test_compiler_directives_are_accepted_where_aws_kernels_put_them():
    @ncc.skip_middle_end_transformations
    @nki.jit
    def kernel(x_tensor):
        out = nl.ndarray(x_tensor.shape, dtype=x_tensor.dtype, buffer=nl.shared_hbm)
        for i in nl.sequential_range(2, directives=ncc.no_reorder()):
            nl.store(out[nl.ds(i * 128, 128), :], value=nl.load(x_tensor[nl.ds(i * 128, 128), :]))
        return out

    x = np.random.default_rng(8).normal(size=(256, 32)).astype(np.float32)
    np.testing.assert_array_equal(kernel(x), x)
    assert kernel.nki_directives == {"skip_middle_end_transformations": True}


def test_functional_matmul_of_a_transpose_result_reads_it_through_sbuf():
    """Beta-1 kernels feed nisa.nc_transpose's PSUM result straight into nisa.nc_matmul."""
    @nki.jit(target="trn1")
    def kernel(a_tensor, b_tensor):
        out = nl.ndarray((64, 256), dtype=nl.float32, buffer=nl.shared_hbm)
        a_t = nisa.nc_transpose(nl.load(a_tensor))                  # [64, 128] -> [128, 64] in PSUM
        nl.store(out, value=nl.copy(nisa.nc_matmul(a_t, nl.load(b_tensor))))
        assert nisa.get_nc_version() >= nisa.nc_version.gen2
        return out

    rng = np.random.default_rng(9)
    a, b = rng.normal(size=(64, 128)).astype(np.float32), rng.normal(size=(128, 256)).astype(np.float32)
    run = nki.run(kernel, a, b)
    np.testing.assert_allclose(run.outputs, a @ b, rtol=1e-4, atol=1e-4)
    assert [op for _, op in _engines(run)] == ["nc_transpose", "tensor_copy", "nc_matmul", "tensor_copy"]


def test_matmul_with_is_transpose_passes_the_stationary_tile_through():
    @nki.jit
    def kernel(x_tensor):
        out = nl.ndarray((64, 128), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        x = nl.load(x_tensor)
        identity = nl.shared_identity_matrix(128, dtype=nl.bfloat16)
        t = nl.ndarray((64, 128), dtype=nl.bfloat16, buffer=nl.psum)
        t[...] = nisa.nc_matmul(x, identity, is_transpose=True)
        nl.store(out, value=nl.copy(t))
        return out

    x = np.random.default_rng(10).normal(size=(128, 64)).astype(nl.bfloat16)
    np.testing.assert_array_equal(kernel(x), x.T)


def test_a_mask_can_combine_iterator_clauses_with_compile_time_conditions():
    i_p = nl.arange(128)[:, None]
    assert ((i_p < 64) & True).clauses == (i_p < 64).clauses
    assert ((i_p < 64) & (3 * 128 < 256)) is False
    assert (True & (i_p < 64)).clauses == (i_p < 64).clauses


def test_typing_tensor_is_subscriptable_in_annotations():
    import trnlab.nki.typing as nt

    @nki.jit
    def kernel(x_tensor: nt.tensor[128, 64]) -> nt.tensor[128, 64]:
        out: nt.tensor[128, 64] = nl.ndarray(x_tensor.shape, dtype=x_tensor.dtype, buffer=nl.shared_hbm)
        assert isinstance(x_tensor, nt.tensor)
        nl.store(out, value=nl.load(x_tensor))
        return out

    x = np.ones((128, 64), np.float32)
    np.testing.assert_array_equal(kernel(x), x)



def test_benchmark_times_a_kernel_on_shape_only_typing_arguments():
    # beta 1: AWS's matmul tutorial benchmarks on nt.tensor[[K, M], dtype] (no values): a timing-only run
    import trnlab.nki.typing as nt

    def kernel(a_tensor):
        out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a_tensor.shape[0] // 128):
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.load(a_tensor[i * 128:(i + 1) * 128, :]))
        return out

    shape_only = nt.tensor[[512, 256], nl.bfloat16]
    assert isinstance(shape_only, nki.ShapeDtype) and shape_only.shape == (512, 256)
    bench = nki.benchmark(warmup=2, iters=10)(kernel)
    assert bench(shape_only) is None                                     # no values were computed
    latency = bench.benchmark_result.nc_latency.get_latency_percentile(99)
    values = nki.benchmark(warmup=2, iters=10)(kernel)
    values(np.zeros((512, 256), nl.bfloat16))
    assert latency == values.benchmark_result.nc_latency.get_latency_percentile(99) > 0

def test_a_custom_allocation_function_is_called_by_keyword():
    import functools

    def bank_of(bank_map, idx, pdim_size, fdim_size):
        return (bank_map[idx], 0, 0)

    alloc = ncc.psum.alloc(functools.partial(bank_of, bank_map={(0,): 1, (1,): 5}))
    assert [alloc.address((i,), 128, 2048) for i in range(2)] == [(1, 0, 0), (5, 0, 0)]
