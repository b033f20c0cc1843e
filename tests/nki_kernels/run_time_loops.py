"""Kernels whose loops repeat as many times as the data says (a register loaded when the program
runs bounds nl.dynamic_range / nl.fori_loop), in AWS's NKI 0.7 style."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl

P = 128


def register_from(count):
    """A register loaded from the [1, 1] int32 kernel input `count` (through SBUF, as AWS's pages do)."""
    staged = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=staged, src=count)
    register = nisa.register_alloc()
    nisa.register_load(register, staged)
    return register


def _zero(out):
    """Every row tile of the HBM tensor out [M, H] set to 0 (rows the loop skips stay 0)."""
    M, H = out.shape
    zeros = nl.ndarray((P, H), dtype=out.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    for m in range(M // P):
        nisa.dma_copy(dst=out[m * P:(m + 1) * P, :], src=zeros)


@nki.jit
def add_first_rows(a, b, rows, h_tile: int = 512):
    """out[:rows] = a[:rows] + b[:rows], out[rows:] = 0, for a, b [M, H] and rows (a [1, 1] int32
    input, a multiple of 128): the row loop runs rows / 128 times, its index register the row offset
    every DMA address reads (.ap(scalar_offset=i)); the column tiles are a Python loop inside it."""
    M, H = a.shape
    out = nl.ndarray((M, H), dtype=a.dtype, buffer=nl.shared_hbm)
    _zero(out)
    for i in nl.dynamic_range(0, register_from(rows), P):          # i: 0, 128, 256, ... (a register)
        for h in range(H // h_tile):
            tile = [[H, P], [1, h_tile]]                              # [128 partitions, h_tile] at row i
            x = nl.ndarray((P, h_tile), dtype=a.dtype, buffer=nl.sbuf)
            y = nl.ndarray((P, h_tile), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a.ap(pattern=tile, offset=h * h_tile, scalar_offset=i, indirect_dim=0))
            nisa.dma_copy(dst=y, src=b.ap(pattern=tile, offset=h * h_tile, scalar_offset=i, indirect_dim=0))
            z = nl.ndarray((P, h_tile), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add)
            nisa.dma_copy(dst=out.ap(pattern=tile, offset=h * h_tile, scalar_offset=i, indirect_dim=0), src=z)
    return out


@nki.jit
def count_nested(outer, inner):
    """out = outer * inner + 1000 * (sum of the outer index over its iterations): a fori_loop bounded
    by one input around a dynamic_range bounded by another, counting in SBUF; the outer index is
    stored out of its register (register_store) and added each time."""
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    count = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=count, value=0.0)
    n_inner = register_from(inner)

    def body(i):
        index = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(index, i)
        as_float = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=as_float, src=index)
        nisa.scalar_tensor_tensor(dst=count, data=as_float, op0=nl.multiply, operand0=1000.0, op1=nl.add, operand1=count)
        for _ in nl.dynamic_range(n_inner):
            nisa.tensor_scalar(dst=count, data=count, op0=nl.add, operand0=1.0)

    nl.fori_loop(0, register_from(outer), body)
    nisa.dma_copy(dst=out, src=count)
    return out


@nki.jit
def sum_of_active_blocks(x, flags):
    """out = the sum of the first k blocks of x [n, 128, 512], k = sum(flags) computed on the chip
    (flags [1, n] int32: a reduce, then register_load), block j loaded at the offset the loop's index
    register holds — the shape of AWS's MoE kernels' loop over their active blocks."""
    n, Pn, F = x.shape
    out = nl.ndarray((Pn, F), dtype=nl.float32, buffer=nl.shared_hbm)
    flags_sbuf = nl.ndarray(flags.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=flags_sbuf, src=flags)
    total = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=total, data=flags_sbuf, op=nl.add, axis=1)
    k = nisa.register_alloc()
    nisa.register_load(k, total)
    acc = nl.ndarray((Pn, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for j in nl.dynamic_range(k):
        block = nl.ndarray((Pn, F), dtype=nl.float32, buffer=nl.sbuf)        # x[j]: j steps of 128 x 512
        nisa.dma_copy(dst=block, src=x.ap(pattern=[[F, Pn], [1, F]], scalar_offset=j, indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=block, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit
def halve_until_zero(x, times):
    """x / 2**times with a while loop whose condition is read from data: the counter lives in SBUF,
    each iteration halves x, decrements the counter and loads it into the register it returns
    (AWS's while_loop example's shape: the condition is "known only within the loop")."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    counter = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=counter, src=times)
    condition = nisa.register_alloc()
    nisa.register_load(condition, counter)

    def body(remaining):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=0.5)
        nisa.tensor_scalar(dst=counter, data=counter, op0=nl.subtract, operand0=1)
        following = nisa.register_alloc()
        nisa.register_load(following, counter)
        return following

    nl.while_loop(condition, body)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def add_n_times(x, times):
    """out = (times + 1) * x, x [2, 128, 512]: a block tensor of two tiles carried across a loop bounded
    by data (each tile used before, inside and after the loop), with tiles of the body's own between."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((2, nl.par_dim(P), 512), dtype=x.dtype, buffer=nl.sbuf)
    for b in range(2):
        nisa.dma_copy(dst=acc[b], src=x[b])
    for _ in nl.dynamic_range(register_from(times)):
        for b in range(2):
            step = nl.ndarray((P, 512), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=step, src=x[b])
            nisa.tensor_tensor(dst=acc[b], data1=acc[b], data2=step, op=nl.add)
    for b in range(2):
        nisa.dma_copy(dst=out[b], src=acc[b])
    return out
