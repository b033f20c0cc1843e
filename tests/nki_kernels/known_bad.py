"""Known-bad NKI kernels, each with its good twin: the oracle corpus (docs/oracle.md).

Kernels of our own in AWS's NKI 0.7 style (beta-2 `nki.isa` destination style mostly). Each bad
kernel breaks one hardware or language rule on the line marked `# BAD`; its good twin differs in
that one line (marked `# GOOD`) and runs. trnlab stops each bad kernel with the error class named in
its docstring, pointing at the marked line. What AWS's CPU simulator (`nki.simulate`) does with it is
in the docstring too ("not checked" where AWS's page says so, "not documented" otherwise).
"""
import numpy as np

import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl

from .tiles import hbm_copy as _store, sbuf_copy as _load


def _out_of_psum(acc):
    """PSUM [M, N] -> SBUF -> a new HBM output (PSUM cannot go to HBM directly)."""
    result = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    return _store(result)


# --- PSUM accumulation ----------------------------------------------------------------------------

@nki.jit
def accumulate_into_uninitialised_psum(a, b):
    """UninitializedReadError. nc_matmul(accumulate=True) adds to what a fresh PSUM tile holds:
    garbage. AWS's simulator allocates each tensor with values of its own; not documented."""
    st, mv = _load(a), _load(b)                                     # [K=128, M=128], [K=128, N=512]
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv, accumulate=True)  # BAD
    result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)  # BAD: the garbage reaches the output here
    return out


@nki.jit
def accumulate_into_uninitialised_psum_good(a, b):
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv, accumulate=False)  # GOOD
    result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)  # GOOD
    return out


@nki.jit
def overlapping_psum_accumulation_groups(a, b):
    """DirectAllocationOverlapError. Two accumulation groups, interleaved over K, placed by the kernel
    on the same PSUM bank: each adds into the other's partial sums. AWS's simulator allocates each
    tensor independently "without simulating overlapping memory regions": not checked."""
    st, mv = _load(a), _load(b)                                     # [K=2 x 128, M=128], [K=128, N=512]
    first = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    second = nl.ndarray((128, 256), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))  # BAD
    for k in nl.sequential_range(2):
        nisa.nc_matmul(dst=first, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)
        nisa.nc_matmul(dst=second, stationary=st[:, nl.ds(k * 128, 128)], moving=mv[:, 0:256])  # BAD
    first_sb = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=first_sb, src=first)
    nisa.tensor_tensor(dst=first_sb[:, 0:256], data1=first_sb[:, 0:256], data2=second, op=nl.add)
    return _store(first_sb)


@nki.jit
def overlapping_psum_accumulation_groups_good(a, b):
    st, mv = _load(a), _load(b)
    first = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    second = nl.ndarray((128, 256), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=1))  # GOOD
    for k in nl.sequential_range(2):
        nisa.nc_matmul(dst=first, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)
        nisa.nc_matmul(dst=second, stationary=st[:, nl.ds(k * 128, 128)], moving=mv[:, 0:256])
    first_sb = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=first_sb, src=first)
    nisa.tensor_tensor(dst=first_sb[:, 0:256], data1=first_sb[:, 0:256], data2=second, op=nl.add)
    return _store(first_sb)


@nki.jit
def overlapping_psum_groups_same_shape(a, b):
    """DirectAllocationOverlapError. The same bug with two tiles of one shape on one bank (which trnlab
    keeps as one tile, as for a tile declared again in a loop): the first tile's group is resumed
    after the second tile's group wrote the bytes. AWS's simulator: not checked (Memory Model)."""
    st, mv = _load(a), _load(b)
    first = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    second = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))  # BAD
    for k in nl.sequential_range(2):
        nisa.nc_matmul(dst=first, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)  # BAD: resumed at k = 1
        nisa.nc_matmul(dst=second, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)
    first_sb = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=first_sb, src=first)
    nisa.tensor_tensor(dst=first_sb, data1=first_sb, data2=second, op=nl.add)
    return _store(first_sb)


@nki.jit
def overlapping_psum_groups_same_shape_good(a, b):
    st, mv = _load(a), _load(b)
    first = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    second = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=1))  # GOOD
    for k in nl.sequential_range(2):
        nisa.nc_matmul(dst=first, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)
        nisa.nc_matmul(dst=second, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)
    first_sb = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=first_sb, src=first)
    nisa.tensor_tensor(dst=first_sb, data1=first_sb, data2=second, op=nl.add)
    return _store(first_sb)


@nki.jit
def matmul_result_across_psum_banks(a, b):
    """PSUMBankError. A PSUM tensor may span banks (a [128, 1024] fp32 one takes two), but each
    matmul's result lies in one 2 KiB bank: acc[:, 256:768] straddles banks 0 and 1. AWS's simulator:
    not documented."""
    st, mv = _load(a), _load(b)                                     # [K=128, M=128], [K=128, N=1024]
    acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc[:, 0:512], stationary=st, moving=mv[:, 0:512])
    nisa.nc_matmul(dst=acc[:, 256:768], stationary=st, moving=mv[:, 512:1024])  # BAD
    return _out_of_psum(acc)


@nki.jit
def matmul_result_across_psum_banks_good(a, b):
    # AWS's core/topk rotate: two 512-wide matmuls, one bank each, then the whole tensor read back
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc[:, 0:512], stationary=st, moving=mv[:, 0:512])
    nisa.nc_matmul(dst=acc[:, 512:1024], stationary=st, moving=mv[:, 512:1024])  # GOOD
    return _out_of_psum(acc)


@nki.jit
def matmul_into_sbuf(a, b):
    """MemoryPlacementError. The Tensor engine writes its result to PSUM only. AWS's simulator:
    not documented."""
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_matmul(dst=result, stationary=st, moving=mv)  # BAD
    nisa.tensor_copy(dst=result, src=acc)
    return _store(result)


@nki.jit
def matmul_into_sbuf_good(a, b):
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)  # GOOD
    nisa.tensor_copy(dst=result, src=acc)
    return _store(result)


@nki.jit
def matmul_into_int32_psum(a, b):
    """DtypeError. nc_matmul accumulates fp32 (or bf16) in PSUM; an int32 result tile is refused.
    AWS's simulator: not documented."""
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.int32, buffer=nl.psum)  # BAD
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)  # BAD: refused here
    return _out_of_psum(acc)


@nki.jit
def matmul_into_int32_psum_good(a, b):
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)  # GOOD
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
    return _out_of_psum(acc)


@nki.jit
def matmul_moving_over_512(a, b):
    """MatmulShapeError. The moving tile's free size is at most 512 (N <= 512). AWS's simulator:
    not documented."""
    st, mv = _load(a), _load(b)                                     # mv [128, 1024]
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)  # BAD
    return _out_of_psum(acc)


@nki.jit
def matmul_moving_over_512_good(a, b):
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv[:, 0:512])  # GOOD
    return _out_of_psum(acc)


@nki.jit(target="trn3")
def sliced_mx_scales(a, b):
    """MXError. nc_matmul_mx reads one scale per 8 partitions x 1 packed element of its data tile; a
    scale tile sliced to fewer partitions than the data needs cannot hold them. AWS's simulator:
    not documented."""
    K = a.shape[0]                                                  # a [K=128, 4M] bf16, b [K, 4N]
    packed = []
    for hbm in (a, b):
        src = _load(hbm)
        data = nl.ndarray((K, hbm.shape[1] // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        scales = nl.ndarray((K, hbm.shape[1] // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=data, src=src, dst_scale=scales)
        packed.append((data, scales))
    (st, st_s), (mv, mv_s) = packed
    acc = nl.ndarray((st.shape[1], mv.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=st, moving=mv, stationary_scale=st_s[0:16, :], moving_scale=mv_s)  # BAD
    return _out_of_psum(acc)


@nki.jit(target="trn3")
def sliced_mx_scales_good(a, b):
    K = a.shape[0]
    packed = []
    for hbm in (a, b):
        src = _load(hbm)
        data = nl.ndarray((K, hbm.shape[1] // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        scales = nl.ndarray((K, hbm.shape[1] // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=data, src=src, dst_scale=scales)
        packed.append((data, scales))
    (st, st_s), (mv, mv_s) = packed
    acc = nl.ndarray((st.shape[1], mv.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=st, moving=mv, stationary_scale=st_s, moving_scale=mv_s)  # GOOD
    return _out_of_psum(acc)


@nki.jit
def pe_tile_size_not_a_tile(a, b):
    """PETilingError. nc_matmul's tile_size picks a row/column tile of the 128 x 128 PE array
    (32, 64 or 128 rows); 48 rows is none of them. AWS's simulator: not documented."""
    st, mv = _load(a), _load(b)                                     # [K=32, M=32], [K=32, N=128]
    acc = nl.ndarray((32, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, st, mv, tile_position=(0, 0), tile_size=(48, 128))  # BAD
    return _out_of_psum(acc)


@nki.jit
def pe_tile_size_not_a_tile_good(a, b):
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((32, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, st, mv, tile_position=(0, 0), tile_size=(32, 128))  # GOOD
    return _out_of_psum(acc)


# --- capacity and placement -----------------------------------------------------------------------

@nki.jit
def sbuf_overflow(x):
    """SBUFOverflowError. 48 live [128, 2048] fp32 tiles need 384 KiB per partition; SBUF has 192 KiB
    (trn2). AWS's simulator allocates "each tensor independently without ... validating against
    SBUF/PSUM capacity": not checked."""
    tiles = []
    for i in range(48):  # BAD
        tile = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)  # BAD: refused at the first tile that does not fit
        tiles.append(tile)
    total = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=total, src=tiles[0])
    for tile in tiles[1:]:
        nisa.tensor_tensor(dst=total, data1=total, data2=tile, op=nl.add)
    return _store(total)


@nki.jit
def sbuf_overflow_good(x):
    tiles = []
    for i in range(4):  # GOOD
        tile = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        tiles.append(tile)
    total = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=total, src=tiles[0])
    for tile in tiles[1:]:
        nisa.tensor_tensor(dst=total, data1=total, data2=tile, op=nl.add)
    return _store(total)


@nki.jit
def psum_overflow(a, b):
    """PSUMOverflowError. Nine live [128, 512] fp32 accumulators need nine 2 KiB banks; PSUM has
    eight. AWS's simulator: not checked (no capacity validation)."""
    st, mv = _load(a), _load(b)
    accs = []
    for i in range(9):  # BAD
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=st, moving=mv)  # BAD: refused at the ninth accumulator
        accs.append(acc)
    total = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=total, src=accs[0])
    for acc in accs[1:]:
        nisa.tensor_tensor(dst=total, data1=total, data2=acc, op=nl.add)
    return _store(total)


@nki.jit
def psum_overflow_good(a, b):
    st, mv = _load(a), _load(b)
    accs = []
    for i in range(8):  # GOOD
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
        accs.append(acc)
    total = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=total, src=accs[0])
    for acc in accs[1:]:
        nisa.tensor_tensor(dst=total, data1=total, data2=acc, op=nl.add)
    return _store(total)


@nki.jit
def aliasing_sbuf_allocations(x, y):
    """DirectAllocationOverlapError. Two SBUF tiles placed by the kernel on the same bytes while both
    are live: loading the second overwrites the first. AWS's simulator: not checked ("without
    simulating overlapping memory regions")."""
    first = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    second = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))  # BAD
    nisa.dma_copy(dst=first, src=x)
    nisa.dma_copy(dst=second, src=y)  # BAD: overwrites first while it is live
    total = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
    nisa.tensor_tensor(dst=total, data1=first, data2=second, op=nl.add)
    return _store(total)


@nki.jit
def aliasing_sbuf_allocations_good(x, y):
    first = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    second = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=2048))  # GOOD
    nisa.dma_copy(dst=first, src=x)
    nisa.dma_copy(dst=second, src=y)
    total = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
    nisa.tensor_tensor(dst=total, data1=first, data2=second, op=nl.add)
    return _store(total)


@nki.jit
def partitions_over_128(x):
    """PartitionLimitError. An on-chip tile's first (partition) axis has at most 128 entries.
    AWS's simulator: not documented."""
    tile = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)  # BAD
    nisa.dma_copy(dst=tile[0:128, :], src=x)
    return _store(tile[0:128, :])


@nki.jit
def partitions_over_128_good(x):
    tile = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)  # GOOD
    nisa.dma_copy(dst=tile[0:128, :], src=x)
    return _store(tile[0:128, :])


@nki.jit
def free_size_over_engine_limit(x):
    """FreeSizeError. A Vector-engine access of 66,000 bf16 per partition in SBUF is over the engines'
    free-size limit of 65,536 elements. AWS's simulator: not documented."""
    tile = _load(x)                                                 # [128, 66000] bf16
    nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0)  # BAD
    return _store(tile)


@nki.jit
def free_size_over_engine_limit_good(x):
    tile = _load(x)
    nisa.tensor_scalar(dst=tile[:, 0:65536], data=tile[:, 0:65536], op0=nl.multiply, operand0=2.0)  # GOOD
    return _store(tile)


@nki.jit
def start_partition_16(x):
    """StartPartitionError. An engine access of 48 partitions starts on partition 0 or 64 (0/32/64/96
    for <= 32 partitions); 16 is none. AWS's simulator: not documented."""
    tile = _load(x)
    part = nl.ndarray((48, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=part, src=tile[16:64, :])  # BAD
    return _store(part)


@nki.jit
def start_partition_16_good(x):
    tile = _load(x)
    part = nl.ndarray((48, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=part, src=tile[64:112, :])  # GOOD
    return _store(part)


@nki.jit
def partition_stride(x):
    """PartitionStrideError. An engine reads consecutive partitions; every other partition is a
    stride across partitions. AWS's simulator: not documented."""
    tile = _load(x)
    part = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=part, src=tile[0:128:2, :])  # BAD
    return _store(part)


@nki.jit
def partition_stride_good(x):
    tile = _load(x)
    part = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=part, src=tile[0:64, :])  # GOOD
    return _store(part)


@nki.jit
def vector_transpose_over_32(x):
    """MatmulShapeError. nc_transpose on the Vector engine transposes at most 32 x 32; a 64 x 64 block
    goes to the Tensor engine. AWS's simulator: not documented."""
    tile = _load(x)                                                 # [64, 64]
    flipped = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_transpose(dst=flipped, data=tile, engine=nisa.vector_engine)  # BAD
    return _store(flipped)


@nki.jit
def vector_transpose_over_32_good(x):
    tile = _load(x)
    flipped = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_transpose(dst=flipped, src=tile)  # GOOD
    return _store(flipped)


@nki.jit
def psum_to_hbm_dma(a, b):
    """PSUMToHBMError. No DMA moves PSUM to HBM: PSUM -> SBUF (an engine copy) -> HBM. AWS's
    simulator: not documented."""
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
    result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)  # BAD
    return out


@nki.jit
def psum_to_hbm_dma_good(a, b):
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
    result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)  # GOOD
    return out


# --- memory contents and bounds -------------------------------------------------------------------

@nki.jit
def indirect_dma_out_of_bounds(table):
    """OutOfBoundsError. An indirect DMA (vector_offset read from SBUF at run time) reaching row 200 of
    a 100-row table. AWS's simulator: not documented (oob_mode=error is the default)."""
    N, C = table.shape
    idx = nl.ndarray((64, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=idx, value=200)  # BAD
    rows = nl.ndarray((64, C), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.ap([[C, 64], [1, C]], offset=0, vector_offset=idx, indirect_dim=0))  # BAD: reads rows 200
    return _store(rows)


@nki.jit
def indirect_dma_out_of_bounds_good(table):
    N, C = table.shape
    idx = nl.ndarray((64, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=idx, value=99)  # GOOD
    rows = nl.ndarray((64, C), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.ap([[C, 64], [1, C]], offset=0, vector_offset=idx, indirect_dim=0))
    return _store(rows)


@nki.jit
def store_of_never_written_tile(x):
    """UninitializedReadError. The output is stored from a tile no instruction wrote: garbage.
    AWS's simulator: not documented."""
    tile = _load(x)
    result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    doubled = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=doubled, data=tile, op0=nl.multiply, operand0=2.0)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)  # BAD
    return out


@nki.jit
def store_of_never_written_tile_good(x):
    tile = _load(x)
    result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    doubled = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=doubled, data=tile, op0=nl.multiply, operand0=2.0)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=doubled)  # GOOD
    return out


@nki.jit
def read_outside_tile(x):
    """OutOfBoundsError. Columns 256..767 of a [128, 512] tile: past its allocation.
    AWS's simulator: not documented."""
    tile = _load(x)
    part = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=part, src=tile[:, 256:768])  # BAD
    return _store(part)


@nki.jit
def read_outside_tile_good(x):
    tile = _load(x)
    part = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=part, src=tile[:, 0:512])  # GOOD
    return _store(part)


@nki.jit
def view_changes_partitions(x):
    """ViewError. A reshape of an SBUF tile that moves elements across partitions is not an access
    pattern over the same bytes. AWS's simulator: not documented."""
    tile = _load(x)                                                 # [128, 512]
    flat = tile.reshape((64, 1024))  # BAD
    return _store(flat)


@nki.jit
def view_changes_partitions_good(x):
    tile = _load(x)
    flat = tile.reshape((128, 2, 256))  # GOOD
    return _store(flat)


# --- launches and tracing -------------------------------------------------------------------------

@nki.jit
def add_one_per_program(x):
    """Launched as add_one_per_program[n](x): each program adds 1 to its [128, 64] tile.
    LaunchGridError for n = 0 (an axis of no programs). AWS's simulator: not documented."""
    i = nl.program_id(0)
    tile = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x[:, nl.ds(i * 64, 64)])
    nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1.0)
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


def launch_zero_programs(x):
    """LaunchGridError: a grid with an axis of no programs."""
    return add_one_per_program[0](x)  # BAD


def launch_zero_programs_good(x):
    return add_one_per_program[1](x)  # GOOD


@nki.jit
def runaway_loop(x):
    """TraceBudgetExceeded (under a trace_instructions budget of 10,000 instructions). A loop whose bound is an
    element count, not a tile count: 65,536 iterations of three instructions. AWS's simulator runs it
    (slowly); not documented."""
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(65536):  # BAD
        tile = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[:, nl.ds((i % 64) * 8, 8)])  # BAD: the budget runs out here
        nisa.dma_copy(dst=out[:, nl.ds((i % 64) * 8, 8)], src=tile)
    return out


@nki.jit
def runaway_loop_good(x):
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(64):  # GOOD
        tile = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[:, nl.ds((i % 64) * 8, 8)])
        nisa.dma_copy(dst=out[:, nl.ds((i % 64) * 8, 8)], src=tile)
    return out


@nki.jit
def copy_through_sbuf(x):
    """out = x through SBUF; ArgumentDtypeError when x is float64 (no 64-bit dtype on the device)."""
    return _store(_load(x))


def float64_argument(x):
    """ArgumentDtypeError. A float64 array passed to a kernel: the engines have no 64-bit dtypes.
    AWS's simulator: not documented."""
    return copy_through_sbuf(x.astype(np.float64))  # BAD


def float64_argument_good(x):
    return copy_through_sbuf(x.astype(np.float32))  # GOOD


# --- not errors: what the chip does too ---------------------------------------------------------

@nki.jit
def memset_after_matmul(a, b):
    """A memset after a matmul on the same PSUM tile: the matmul's result is dead (never read). Not a
    broken rule: on the chip the memset waits for the matmul's write (a write-after-write dependency
    on the same bytes, which trnlab derives as AWS's compiler does), so the memset's zeros are read,
    whatever the engines' timing — the order is the program's, not a race (docs/oracle.md)."""
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
    nisa.memset(dst=acc, value=0.0)
    return _out_of_psum(acc)


@nki.jit
def same_shape_psum_groups_in_sequence(a, b):
    """Two same-shape tiles on one PSUM bank used one after the other (legal: never live together):
    out = 2 * (a[:, :128].T @ b + a[:, 128:].T @ b), each tile's group starting fresh."""
    st, mv = _load(a), _load(b)
    first = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    second = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    first_sb = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.sequential_range(2):
        nisa.nc_matmul(dst=first, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)
    nisa.tensor_copy(dst=first_sb, src=first)
    for k in nl.sequential_range(2):
        nisa.nc_matmul(dst=second, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)
    nisa.tensor_tensor(dst=first_sb, data1=first_sb, data2=second, op=nl.add)
    return _store(first_sb)
