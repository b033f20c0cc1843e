"""One test per hardware rule: the specific error, and a message naming rule, value and limit."""
import numpy as np
import pytest

from trnlab.hardware import NeuronCore, dtypes, errors, presets


@pytest.fixture
def core():
    return NeuronCore(presets.TRN1.core, mode="full")


def filled(core, shape, dtype="bfloat16", memory="sbuf", **kw):
    t = getattr(core, memory).allocate(shape, dtype, **kw)
    core.memset(t, 1.0)
    return t


def test_more_than_128_partitions(core):
    with pytest.raises(errors.PartitionLimitError, match=r"partition limit: 129 .* has 128"):
        core.sbuf.allocate((129, 4), "float32")


def test_sbuf_overflow_names_request_and_capacity(core):
    core.sbuf.allocate((128, 40 * 1024), "float32", name="big")          # 160 KiB per partition
    with pytest.raises(errors.SBUFOverflowError,
                       match=r"SBUF overflow: 64.0 KiB per partition .* 32.0 KiB free of 192.0 KiB .*24.0 MiB per core") as e:
        core.sbuf.allocate((128, 16 * 1024), "float32", name="more")
    assert e.value.value == 64 * 1024 and e.value.limit == 32 * 1024


def test_psum_overflow_after_eight_banks(core):
    for i in range(8):
        core.psum.allocate((128, 512), "float32")
    with pytest.raises(errors.PSUMOverflowError, match=r"PSUM overflow: 2.0 KiB per partition .* 0 B free of 16.0 KiB"):
        core.psum.allocate((128, 512), "float32")


def test_hbm_overflow(core):
    with pytest.raises(errors.HBMOverflowError, match=r"HBM overflow: .* free of 16384.0 MiB"):
        core.hbm.allocate((1 << 20, 1 << 13), "float32")                # 32 GiB > 16 GiB share


def test_psum_tensor_may_span_banks_but_a_matmul_result_may_not(core):
    st = filled(core, (128, 128), "float32")
    mv = filled(core, (128, 512), "float32")
    small = core.psum.allocate((128, 128), "float32")             # 512 B at byte 0
    acc = core.psum.allocate((128, 1024), "float32", name="acc")  # two banks: starts on a bank boundary
    assert acc.offset == 2048
    core.nc_matmul(acc[:, 0:512], st, mv)                         # bank 1
    core.nc_matmul(acc[:, 512:1024], st, mv)                      # bank 2
    with pytest.raises(errors.PSUMBankError,
                       match=r"PSUM bank: nc_matmul writes its result to bytes 3072-5120 .* 'acc' \(2048 bytes\), "
                             r"across banks 1-2; .* one PSUM bank of 2048 bytes") as e:
        core.nc_matmul(acc[:, 256:768], st, mv)
    assert e.value.value == 2048 and e.value.limit == 2048
    copy = core.sbuf.allocate((128, 1024), "float32")
    core.tensor_copy(copy, acc)                                   # other engines read across banks
    assert small.offset == 0


def test_matmul_into_a_psum_tile_placed_across_a_bank_boundary_is_refused(core):
    st = filled(core, (128, 128), "float32")
    mv = filled(core, (128, 512), "float32")
    acc = core.psum.allocate((128, 512), "float32", name="acc", offset=1024)   # bytes 1024-3072
    with pytest.raises(errors.PSUMBankError, match=r"bytes 1024-3072 .* across banks 0-1"):
        core.nc_matmul(acc, st, mv)
    with pytest.raises(errors.PSUMBankError, match=r"nc_transpose"):
        core.nc_transpose(acc[:, 200:328], st)               # bytes 1824-2336


def test_double_row_matmul_result_straddling_two_banks_is_refused():
    core = NeuronCore(presets.TRN2.core, mode="full")
    st = filled(core, (128, 2, 128), "float8_e4m3")
    mv = filled(core, (128, 2, 512), "float8_e4m3")
    acc = core.psum.allocate((128, 1024), "float32")
    core.nc_matmul_double_row(acc[:, 512:1024], st, mv)
    with pytest.raises(errors.PSUMBankError, match=r"nc_matmul_double_row writes its result to bytes 1024-3072"):
        core.nc_matmul_double_row(acc[:, 256:768], st, mv)


def test_from_neuroncore_v4_a_matmul_result_may_span_banks():
    core = NeuronCore(presets.TRN3.core, mode="full")
    st = filled(core, (128, 128), "float32")
    mv = filled(core, (128, 512), "float32")
    acc = core.psum.allocate((128, 1024), "float32")
    core.nc_matmul(acc[:, 256:768], st, mv)
    assert np.all(acc[:, 256:768].values() == 128.0)


def test_psum_tensor_of_eight_banks_fits_nine_overflow(core):
    core.psum.allocate((128, 8 * 512), "float32")
    core.psum.free(core.psum.tensors[0])
    with pytest.raises(errors.PSUMOverflowError, match=r"PSUM overflow: 18.0 KiB per partition .* free of 16.0 KiB"):
        core.psum.allocate((128, 9 * 512), "float32")
    # a block tensor of bank-sized tiles is placed whole by the hardware layer: it must fit too
    core.psum.allocate((8, 128, 512), "float32", partition_axis=1)
    with pytest.raises(errors.PSUMOverflowError):
        core.psum.allocate((1, 128, 512), "float32", partition_axis=1)


def test_start_partition_rules(core):
    x = filled(core, (128, 64), "float32")
    y = core.sbuf.allocate((128, 64), "float32")
    core.tensor_copy(y[32:64], x[32:64])            # 32 partitions may start at 32
    core.tensor_copy(y[64:128], x[64:128])          # 64 partitions may start at 64
    with pytest.raises(errors.StartPartitionError, match=r"start partition: .* starts at partition 32 with 64 partitions"):
        core.tensor_copy(y[32:96], x[32:96])
    with pytest.raises(errors.StartPartitionError, match=r"starts at partition 16"):
        core.tensor_copy(y[16:32], x[16:32])


def test_no_stride_across_partitions(core):
    x = core.sbuf.allocate((128, 8), "float32")
    with pytest.raises(errors.PartitionStrideError, match=r"partition stride: step 2 .* \(step 1\)"):
        x[0:128:2, :]
    with pytest.raises(errors.PartitionStrideError, match=r"not consecutive"):
        x[np.array([0, 2, 4]), :]


def test_partition_axis_must_come_first(core):
    w = core.sbuf.allocate((4, 128, 64), "float32", partition_axis=1)
    for block in range(4):
        core.memset(w[block], 1.0)
    out = core.sbuf.allocate((128, 4 * 64), "float32")
    core.tensor_copy(out[:, 0:64], w[0])             # one block: partitions first, fine
    with pytest.raises(errors.PartitionAxisError, match=r"partition axis first"):
        core.tensor_copy(out, w)


@pytest.mark.parametrize("K,M,N,rule", [(128, 129, 512, "M=129"), (128, 128, 513, "N=513")])
def test_matmul_tile_limits(core, K, M, N, rule):
    st = filled(core, (K, M))
    mv = filled(core, (K, N))
    acc = core.psum.allocate((min(M, 128), 512), "float32")
    with pytest.raises(errors.MatmulShapeError, match=rf"matmul tile shape: .*{rule}"):
        core.nc_matmul(acc, st, mv)


def test_matmul_contraction_sizes_must_agree(core):
    st = filled(core, (128, 128))
    mv = filled(core, (64, 512))
    acc = core.psum.allocate((128, 512), "float32")
    with pytest.raises(errors.MatmulShapeError, match=r"K=128, moving .* K=64"):
        core.nc_matmul(acc, st, mv)


def test_matmul_k_limit_follows_a_derived_array():
    core = NeuronCore(presets.derive(pe_rows=8, pe_cols=8), mode="timing")
    st = core.sbuf.allocate((16, 8), "bfloat16")
    mv = core.sbuf.allocate((16, 8), "bfloat16")
    acc = core.psum.allocate((8, 8), "float32")
    with pytest.raises(errors.MatmulShapeError, match=r"K=16 partitions, the limit is 8"):
        core.nc_matmul(acc, st, mv)


def test_shape_mismatch(core):
    a = filled(core, (128, 64), "float32")
    b = filled(core, (128, 32), "float32")
    out = core.sbuf.allocate((128, 64), "float32")
    with pytest.raises(errors.ShapeMismatchError, match=r"shape mismatch: tensor_tensor data1 vs data2: \(128, 64\) vs \(128, 32\)"):
        core.tensor_tensor(out, a, b, "add")


def test_matmul_reads_sbuf_and_writes_psum_only(core):
    st = filled(core, (128, 128))
    mv = filled(core, (128, 512))
    wrong = core.sbuf.allocate((128, 512), "float32")
    with pytest.raises(errors.MemoryPlacementError, match=r"operand memory: nc_matmul dst .* is in SBUF; .* writes PSUM only"):
        core.nc_matmul(wrong, st, mv)


def test_gpsimd_cannot_touch_psum(core):
    acc = core.psum.allocate((128, 512), "float32")
    with pytest.raises(errors.MemoryPlacementError, match=r"is in PSUM; the engine reads and writes SBUF only"):
        core.memset(acc, 0.0, engine="gpsimd")


def test_tensor_tensor_takes_at_most_one_psum_input(core):
    a = filled(core, (128, 64), "float32", memory="psum")
    b = filled(core, (128, 64), "float32", memory="psum")
    out = core.sbuf.allocate((128, 64), "float32")
    with pytest.raises(errors.MemoryPlacementError, match=r"both in PSUM; at most one input"):
        core.tensor_tensor(out, a, b, "add")
    core.tensor_tensor(out, a, filled(core, (128, 64), "float32"), "add")      # one is fine


def test_psum_to_hbm_is_refused(core):
    acc = core.psum.allocate((128, 512), "float32")
    core.memset(acc, 0.0)
    out = core.hbm.allocate((128, 512), "float32")
    with pytest.raises(errors.PSUMToHBMError, match=r"PSUM to HBM: dma_copy PSUM -> HBM is refused"):
        core.dma_copy(out, acc)


def test_dma_does_not_convert_dtypes(core):
    src = core.hbm.tensor(np.ones((128, 8), np.float32))
    dst = core.sbuf.allocate((128, 8), "bfloat16")
    with pytest.raises(errors.DtypeError, match=r"dma_copy does not convert: src float32, dst bfloat16"):
        core.dma_copy(dst, src)


def test_matmul_output_is_fp32_before_trn3(core):
    st, mv = filled(core, (128, 128)), filled(core, (128, 512))
    acc = core.psum.allocate((128, 512), "bfloat16")
    with pytest.raises(errors.DtypeError, match=r"writes fp32 to PSUM, dst is bfloat16"):
        core.nc_matmul(acc, st, mv)


def test_float64_is_not_a_hardware_dtype():
    with pytest.raises(errors.DtypeError, match="float64 is not supported"):
        dtypes.as_dtype(np.float64)


def test_free_size_limit():
    small = NeuronCore(presets.TRN1.core.derive(psum_free_max=1024))
    acc = small.psum.allocate((128, 2048), "int8")      # 2 KiB: fits one bank, 2048 elements
    with pytest.raises(errors.FreeSizeError, match=r"free size: memset dst has 2048 elements per partition in PSUM, the limit is 1024"):
        small.memset(acc, 0)


def test_reading_memory_never_written(core):
    x = core.sbuf.allocate((128, 64), "float32", name="x")
    y = core.sbuf.allocate((128, 64), "float32")
    core.memset(x[:, 0:32], 1.0)
    core.tensor_copy(y[:, 0:32], x[:, 0:32])         # written part: fine
    out = core.hbm.allocate((128, 64), "float32", name="out")
    with pytest.raises(errors.UninitializedReadError, match=r"uninitialized read: 4096 of 8192 elements of 'x'"):
        core.dma_copy(out, x)                         # a store reads it: the error
    assert np.isnan(x.data[:, 32:]).all()            # fresh memory is NaN


def test_garbage_goes_through_per_partition_instructions_where_the_chip_would_put_it(core):
    # element-wise instructions carry it element on element; reductions along the free axes
    # (bn_stats -> bn_aggr, an activation's accumulate) to the whole partition; only a store of
    # the garbage raises, naming where it came from
    x = core.sbuf.allocate((128, 64), "float32", name="x")
    core.memset(x[0:96, :], 1.0)                     # rows 96..127: half never written (a masked tile)
    core.memset(x[96:128, 0:32], 2.0)
    y = core.sbuf.allocate((128, 64), "float32", name="y")
    core.tensor_scalar(y, x, "multiply", 3.0)        # no error: garbage where x had it
    stats = core.sbuf.allocate((128, 6), "float32", name="stats")
    core.bn_stats(stats, x)
    mean_var = core.sbuf.allocate((128, 2), "float32", name="mean_var")
    core.bn_aggr(mean_var, stats)
    out = core.hbm.allocate((128, 64), "float32", name="out")
    core.dma_copy(out[0:128, 0:32], y[:, 0:32])      # the written columns of every row: fine
    np.testing.assert_array_equal(out.data[96:, 0:32], 6.0)
    small = core.hbm.allocate((128, 2), "float32", name="small")
    core.dma_copy(small[0:96], mean_var[0:96])       # rows without garbage: fine
    with pytest.raises(errors.UninitializedReadError, match=r"'mean_var'.* hold garbage .*'x'"):
        core.dma_copy(small, mean_var)               # rows 96..127 averaged garbage columns
    with pytest.raises(errors.UninitializedReadError, match=r"'y'.* hold garbage"):
        core.dma_copy(out, y)


def test_garbage_copied_from_memory_never_written_is_an_error_only_where_it_is_read(core):
    # a copy (element on element) carries the garbage where it goes, as on the chip; storing the
    # clean half is fine, storing the garbage raises and says where it came from
    x = core.sbuf.allocate((128, 64), "float32", name="x")
    y = core.sbuf.allocate((128, 64), "float32", name="y")
    out = core.hbm.allocate((128, 64), "float32", name="out")
    core.memset(x[:, 0:32], 1.0)
    core.tensor_copy(y, x)
    core.dma_copy(out[:, 0:32], y[:, 0:32])
    with pytest.raises(errors.UninitializedReadError,
                       match=r"4096 of 8192 elements of 'y'.* hold garbage .*tensor_copy read never-written 'x'"):
        core.dma_copy(out, y)


def test_use_after_free(core):
    x = filled(core, (128, 64), "float32")
    y = core.sbuf.allocate((128, 64), "float32")
    core.sbuf.free(x)
    with pytest.raises(errors.FreedTensorError, match="use after free"):
        core.tensor_copy(y, x)


def test_unknown_engine_and_queue(core):
    x = filled(core, (128, 8), "float32")
    with pytest.raises(errors.EngineError, match=r"engine: tensor_tensor cannot run on 'scalar'"):
        core.tensor_tensor(x, x, x, "add", engine="scalar")
    src = core.hbm.tensor(np.ones((128, 8), np.float32))
    with pytest.raises(errors.EngineError, match=r"DMA queue 99 does not exist; the core has 16"):
        core.dma_copy(x, src, queue=99)


def test_unknown_op(core):
    x = filled(core, (128, 8), "float32")
    with pytest.raises(errors.UnknownOpError, match=r"unknown op: 'frobnicate'"):
        core.activation(x, x, "frobnicate")


def test_index_out_of_range(core):
    x = core.sbuf.allocate((128, 8), "float32")
    with pytest.raises(errors.IndexError_, match=r"index 9 on axis 1 .* size 8"):
        x[0, 9]


def test_every_rule_has_a_class_derived_from_hardware_error():
    classes = [c for c in vars(errors).values()
               if isinstance(c, type) and issubclass(c, errors.HardwareError) and c is not errors.HardwareError]
    assert len(classes) >= 19
    assert all(c.rule != errors.HardwareError.rule for c in classes)
