"""Every NKI rule a kernel can break gives an error that names the rule and points at the kernel's line."""
import inspect

import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import errors


def _line_of(kernel, text: str) -> int:
    """Line number (in this file) of the kernel source line containing `text`."""
    lines, start = inspect.getsourcelines(kernel.func)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _raises_at(kernel, text, error_type, *args, **kwargs):
    with pytest.raises(error_type) as caught:
        kernel(*args, **kwargs)
    file, line = caught.value.kernel_location
    assert file == __file__ and line == _line_of(kernel, text), caught.value
    assert text in str(caught.value)
    return caught.value


X128 = np.ones((128, 512), np.float32)


def test_partition_dimension_over_128_is_refused():
    @nki.jit
    def kernel(x):
        tile = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)
        return x

    error = _raises_at(kernel, "(256, 64)", errors.PartitionLimitError, X128)
    assert "256" in str(error) and "128" in str(error)


def test_loading_more_than_128_rows_into_one_tile_is_refused():
    @nki.jit
    def kernel(x):
        tile = nl.load(x)
        return x

    _raises_at(kernel, "nl.load(x)", errors.PartitionLimitError, np.ones((200, 8), np.float32))


def test_matmul_stationary_free_size_over_128_is_refused():
    @nki.jit
    def kernel(x):
        stationary = nl.load(x[:, 0:256])
        moving = nl.load(x[:, 0:512])
        out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=out, stationary=stationary, moving=moving)
        return x

    # the [256, 512] PSUM tile cannot exist either; ask for the matmul with a legal destination
    with pytest.raises((errors.MatmulShapeError, errors.PartitionLimitError)):
        kernel(X128)

    @nki.jit
    def functional(x):
        stationary = nl.load(x[:, 0:256])
        moving = nl.load(x[:, 0:512])
        product = nisa.nc_matmul(stationary, moving)
        return x

    error = _raises_at(functional, "nisa.nc_matmul(stationary, moving)", errors.MatmulShapeError, X128)
    assert "gemm_stationary_fmax" in str(error)


def test_matmul_moving_free_size_over_512_is_refused():
    @nki.jit
    def kernel(x):
        stationary = nl.load(x[:, 0:128])
        moving = nl.load(x)
        product = nl.matmul(stationary, moving, transpose_x=True)
        return x

    error = _raises_at(kernel, "nl.matmul(stationary, moving", errors.MatmulShapeError,
                       np.ones((128, 1024), np.float32))
    assert "gemm_moving_fmax" in str(error) and "1024" in str(error)


def test_matmul_contraction_sizes_must_agree():
    @nki.jit
    def kernel(x):
        stationary = nl.load(x[0:128, 0:128])
        moving = nl.load(x[0:64, 0:128])
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=out, stationary=stationary, moving=moving)
        return x

    _raises_at(kernel, "nisa.nc_matmul(dst=out", errors.MatmulShapeError, X128)


def test_psum_tensor_may_span_banks_two_matmuls_one_bank_each_read_back_whole():
    # AWS's core/topk rotate: a [P, 1024] fp32 PSUM tensor (two banks) filled by two 512-wide matmuls
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
        st = nl.load(a)
        mv = nl.load(b)
        acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
        for i in nl.affine_range(2):
            nisa.nc_matmul(acc[:, nl.ds(i * 512, 512)], st, mv[:, nl.ds(i * 512, 512)])
        result = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=acc, engine=nisa.scalar_engine)     # read across both banks
        nl.store(out, result)
        return out

    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 1024)).astype(np.float32)
    run = nki.run(kernel, a, b)                          # full mode: the values
    assert not run.timing_only
    np.testing.assert_allclose(run.outputs, a.T @ b, rtol=1e-4, atol=1e-4)


def test_matmul_result_straddling_two_psum_banks_is_refused():
    @nki.jit
    def kernel(a, b):
        st = nl.load(a)
        mv = nl.load(b)
        acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc[:, 256:768], st, mv)
        return a

    error = _raises_at(kernel, "nisa.nc_matmul(acc[:, 256:768]", errors.PSUMBankError,
                       np.ones((128, 128), np.float32), X128)
    assert "bytes 1024-3072" in str(error) and "2048 bytes" in str(error)


def test_matmul_straddling_banks_in_a_middle_iteration_of_a_stamped_loop_is_refused():
    # iterations 0, 1 and 4 write within a bank; iteration 3 (bytes 7680-8704) straddles banks 3 and 4.
    # Loop stamping checks iterations 0, 1 and the last: the bank rule is periodic, so the loop runs concretely
    @nki.jit
    def kernel(a, b):
        st = nl.load(a)
        mv = nl.load(b)
        acc = nl.ndarray((128, 2816), dtype=nl.float32, buffer=nl.psum)
        for i in nl.affine_range(5):
            nisa.nc_matmul(acc[:, nl.ds(i * 640, 256)], st, mv)
        return a

    error = _raises_at(kernel, "nisa.nc_matmul(acc[:, nl.ds(i * 640, 256)]", errors.PSUMBankError,
                       np.ones((128, 128), np.float32), np.ones((128, 256), np.float32))
    assert "bytes 7680-8704" in str(error)


def test_transpose_through_the_pe_array_into_two_banks_is_refused():
    @nki.jit
    def kernel(a):
        tile = nl.load(a[:, 0:128])
        acc = nl.ndarray((128, 640), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=acc[:, 448:576], data=tile, engine=nisa.tensor_engine)
        return a

    _raises_at(kernel, "nisa.nc_transpose(dst=acc[:, 448:576]", errors.PSUMBankError, X128)


def test_psum_tensor_of_eight_banks_fits_and_of_nine_overflows():
    @nki.jit
    def eight(x):
        acc = nl.ndarray((128, 8 * 512), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=acc, value=0.0)
        return x

    @nki.jit
    def nine(x):
        acc = nl.ndarray((128, 9 * 512), dtype=nl.float32, buffer=nl.psum)
        return x

    eight(X128)
    error = _raises_at(nine, "(128, 9 * 512)", errors.PSUMOverflowError, X128)
    assert "18.0 KiB" in str(error) and "16.0 KiB" in str(error)


def test_psum_cannot_be_copied_to_hbm_by_dma():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.load(x[:, 0:128])
        product = nl.matmul(tile, tile, transpose_x=True)
        nisa.dma_copy(dst=out, src=product)
        return out

    error = _raises_at(kernel, "nisa.dma_copy(dst=out, src=product)", errors.PSUMToHBMError, X128)
    assert "tensor_copy" in str(error)


def test_nl_store_of_a_psum_tile_goes_through_sbuf_like_aws_compiler():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.load(x[:, 0:128])
        nl.store(out, value=nl.matmul(tile, tile, transpose_x=True))
        return out

    x = np.random.default_rng(2).normal(size=(128, 512)).astype(np.float32)
    run = nki.run(kernel, x)
    np.testing.assert_allclose(run.outputs, x[:, :128].T @ x[:, :128], rtol=1e-4, atol=1e-3)
    opcodes = [run.timeline[i].opcode for i in range(len(run.timeline))]
    assert opcodes.count("tensor_copy") == 1


def test_matmul_instruction_reads_sbuf_not_psum():
    @nki.jit
    def kernel(x):
        tile = nl.load(x[:, 0:128])
        product = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        again = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=product, stationary=tile, moving=tile)
        nisa.nc_matmul(dst=again, stationary=product, moving=tile)
        return x

    _raises_at(kernel, "nisa.nc_matmul(dst=again, stationary=product", errors.MemoryPlacementError, X128)


def test_nl_matmul_of_a_psum_tile_copies_it_to_sbuf_first():
    """nl.matmul is a language-level op: like AWS's compiler it moves a PSUM operand to SBUF."""
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.load(x[:, 0:128])
        product = nl.matmul(tile, tile, transpose_x=True)
        again = nl.matmul(product, tile, transpose_x=True)
        nl.store(out, value=nl.copy(again))
        return out

    x = np.random.default_rng(0).normal(size=(128, 512)).astype(np.float32)
    run = nki.run(kernel, x)
    a = x[:, :128]
    np.testing.assert_allclose(run.outputs, (a.T @ a).T @ a, rtol=1e-4, atol=1e-3)
    opcodes = [run.timeline[i].opcode for i in range(len(run.timeline))]
    assert opcodes.count("tensor_copy") == 2 and opcodes.count("nc_matmul") == 2


def test_matmul_of_integer_tiles_is_a_dtype_error():
    @nki.jit
    def kernel(x):
        tile = nl.load(x)
        product = nisa.nc_matmul(tile, tile)
        return x

    _raises_at(kernel, "nisa.nc_matmul(tile, tile)", errors.DtypeError, np.ones((128, 128), np.int32))


def test_dma_copy_between_dtypes_casts_on_trn1_through_an_engine():
    # nki.isa.dma_copy (beta-1 page, relevant for Trn1): "A cast will happen if the src and dst have
    # different dtype". NeuronCore-v2 DMA moves bytes, so the cast is an engine instruction on the
    # SBUF side: an fp32 tile stored into a bf16 HBM tensor is cast first, then moved.
    @nki.jit(target="trn1")
    def kernel(x):
        out = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        nisa.dma_copy(dst=out, src=tile)
        return out

    x = np.random.default_rng(1).normal(size=(128, 512)).astype(np.float32)
    run = nki.run(kernel, x)
    np.testing.assert_array_equal(run.outputs.astype(np.float32), x.astype(nl.bfloat16).astype(np.float32))
    engines = [record.engine for record in run.timeline]
    assert sum(not e.startswith("dma") for e in engines) == 1     # the one cast, between the two DMAs


def test_dma_copy_between_dtypes_from_hbm_to_hbm_is_refused_on_trn1():
    @nki.jit(target="trn1")
    def kernel(x):
        out = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out

    error = _raises_at(kernel, "nisa.dma_copy(dst=out, src=x)", errors.DtypeError, X128)
    assert "tensor_copy" in str(error)


def test_dma_casts_between_dtypes_on_trn2():
    @nki.jit(target="trn2")
    def kernel(x):
        out = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        nl.store(out, value=tile)
        return out

    x = np.random.default_rng(1).normal(size=(128, 512)).astype(np.float32)
    run = nki.run(kernel, x)
    np.testing.assert_array_equal(run.outputs.astype(np.float32), x.astype(nl.bfloat16).astype(np.float32))
    assert all(run.timeline[i].engine.startswith("dma") for i in range(len(run.timeline)))


def test_matmul_accumulates_in_fp32_psum_only():
    @nki.jit
    def kernel(x):
        tile = nl.load(x[:, 0:128])
        out = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.nc_matmul(dst=out, stationary=tile, moving=tile)
        return x

    _raises_at(kernel, "nisa.nc_matmul(dst=out", errors.DtypeError, X128)


def test_slice_past_the_end_is_out_of_bounds():
    @nki.jit
    def kernel(x):
        tile = nl.load(x[0:128, 256:1024])
        return x

    error = _raises_at(kernel, "x[0:128, 256:1024]", errors.OutOfBoundsError, X128)
    assert "512" in str(error)


def test_access_pattern_past_the_end_is_out_of_bounds_unless_masked():
    @nki.jit
    def unmasked(x):
        i_p, i_f = nl.mgrid[0:128, 0:512]
        tile = nl.load(x[64 + i_p, i_f])
        return x

    error = _raises_at(unmasked, "x[64 + i_p, i_f]", errors.OutOfBoundsError, np.ones((150, 512), np.float32))
    assert "150" in str(error)

    @nki.jit
    def masked(x):
        out = nl.ndarray((150, 512), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:512]
        for t in nl.affine_range(2):
            tile = nl.load(x[t * 128 + i_p, i_f], mask=(t * 128 + i_p < 150))
            nl.store(out[t * 128 + i_p, i_f], value=tile, mask=(t * 128 + i_p < 150))
        return out

    x = np.arange(150 * 512, dtype=np.float32).reshape(150, 512)
    np.testing.assert_array_equal(masked(x), x)


def test_integer_index_past_the_end_is_out_of_bounds():
    @nki.jit
    def kernel(x):
        tile = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=tile[2], value=0.0)
        return x

    _raises_at(kernel, "tile[2]", errors.OutOfBoundsError, X128)


def test_sbuf_capacity_is_enforced():
    @nki.jit
    def kernel(x):
        live = []
        for i in nl.affine_range(64):                  # 64 KiB per partition each, all live at the end
            tile = nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=tile, value=0.0)
            live.append(tile)
        out = nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.shared_hbm)
        for tile in live:
            nl.store(out, value=tile)
        return out

    error = _raises_at(kernel, "nisa.memset(dst=tile", errors.SBUFOverflowError, X128)
    assert "SBUF" in str(error) and "KiB" in str(error)
    # the message names the tiles live at that instruction (allocation follows liveness)
    assert "live there" in str(error) and "64.0 KiB" in str(error)


def test_tiles_never_used_take_no_memory():
    """Allocation follows liveness: a tile no instruction touches is never placed (AWS's compiler
    drops it), however many Python keeps."""
    @nki.jit
    def kernel(x):
        unused = [nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf) for _ in range(64)]
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out

    assert np.array_equal(kernel(X128), X128)


def test_psum_capacity_is_eight_banks():
    @nki.jit
    def kernel(x):
        live = []
        for i in nl.affine_range(9):
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            nisa.memset(dst=acc, value=0.0)
            live.append(acc)
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        for acc in live:
            nl.store(out, value=nl.copy(acc))
        return out

    _raises_at(kernel, "nisa.memset(dst=acc", errors.PSUMOverflowError, X128)


def test_tiles_made_in_a_loop_body_are_released_each_iteration():
    @nki.jit
    def kernel(x):
        for i in nl.affine_range(100):                 # 100 x 2 KiB would not fit in 16 KiB of PSUM
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            nisa.memset(dst=acc, value=0.0)
        return x

    kernel(X128)


def test_reading_a_tile_never_written_is_an_error():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nl.store(out, value=tile)
        return out

    _raises_at(kernel, "nl.store(out, value=tile)", errors.UninitializedReadError, X128)


def test_reductions_run_along_free_axes_only():
    @nki.jit
    def kernel(x):
        tile = nl.load(x)
        column_sums = nl.sum(tile, axis=0)
        return x

    _raises_at(kernel, "nl.sum(tile, axis=0)", nki.NKIError, X128)


def test_elementwise_shapes_must_match():
    @nki.jit
    def kernel(x):
        a = nl.load(x[:, 0:256])
        b = nl.load(x[:, 0:128])
        c = nl.add(a, b)
        return x

    _raises_at(kernel, "nl.add(a, b)", errors.ShapeMismatchError, X128)


def test_start_partition_rule():
    @nki.jit
    def kernel(x):
        tile = nl.load(x)
        part = nl.ndarray((48, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=part, src=tile[16:64, :])
        return x

    error = _raises_at(kernel, "tile[16:64, :]", errors.StartPartitionError, X128)
    assert "16" in str(error)


def test_compute_engines_cannot_read_hbm():
    @nki.jit
    def kernel(x):
        doubled = nl.multiply(x, 2.0)
        return x

    _raises_at(kernel, "nl.multiply(x, 2.0)", errors.MemoryPlacementError, X128)
