"""Kernels using the names of neuronxcc.nki ("beta 1") that AWS's tutorials and reference kernels use:
nl.ds, nl.spmd_dim / nl.nc, nl.fp32.min, nl.shared_constant, nl.loop_reduce, nl.floor, nl.static_cast,
nisa.tensor_scalar_reduce, nisa.tensor_partition_reduce, nisa.vector_engine, block tensors with
nl.par_dim, nl.mgrid fields. Each is small enough to check against NumPy.
"""
import numpy as np

import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def add_on_two_cores(a_tensor, b_tensor):
    """c = a + b, one [128, 512] tile per program; the launch spreads axis 0 over two NeuronCores."""
    c_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    rows = nl.ds(nl.program_id(0) * 128, 128)
    cols = nl.ds(nl.program_id(1) * 512, 512)
    nl.store(c_tensor[rows, cols], value=nl.load(a_tensor[rows, cols]) + nl.load(b_tensor[rows, cols]))
    return c_tensor


def add_two_cores(a, b):
    """Host side: the grid's first axis is nl.spmd_dim(n, nl.nc(2)) — n programs per core, two cores."""
    return add_on_two_cores[nl.spmd_dim(a.shape[0] // 256, nl.nc(2)), a.shape[1] // 512](a, b)


@nki.jit
def row_softmax_stats(x_tensor):
    """Per row: max via tensor_reduce, exp(x - max) and its row sum in ONE tensor_scalar_reduce-free
    activation, and the row max again from tensor_scalar_reduce (x * 1.0, reduced with max)."""
    P, F = x_tensor.shape
    out_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    out_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(x_tensor)
    row_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    scaled = nisa.tensor_scalar_reduce(data=x, op0=nl.multiply, operand0=1.0, reduce_op=nl.max,
                                       reduce_res=row_max)
    neg_max = nisa.tensor_scalar(row_max, nl.multiply, -1.0, engine=nisa.vector_engine)
    row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(op=nl.exp, data=scaled, bias=neg_max, reduce_op=nl.add, reduce_res=row_sum)
    nl.store(out_max, value=row_max)
    nl.store(out_sum, value=row_sum)
    return out_max, out_sum


@nki.jit
def column_sums(x_tensor):
    """Sum across partitions (GpSimd tensor_partition_reduce): [128, F] -> [1, F]."""
    P, F = x_tensor.shape
    out = nl.ndarray((1, F), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nisa.tensor_partition_reduce(np.add, nl.load(x_tensor))
    nl.store(out, value=total)
    return out


@nki.jit
def running_max_of_blocks(x_tensor):
    """Element-wise max over 128-row blocks with nl.loop_reduce into an accumulator started at
    nl.fp32.min; blocks kept in one (n, par_dim(128), F) tensor allocated by modulo allocation."""
    R, F = x_tensor.shape
    n = R // 128
    out = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.shared_hbm)
    blocks = nl.ndarray((n, nl.par_dim(128), F), dtype=nl.float32,
                        buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    acc = nl.full((128, F), fill_value=nl.fp32.min, dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(n):
        blocks[i] = nl.load(x_tensor[nl.ds(i * 128, 128), :])
        acc[...] = nl.loop_reduce(blocks[i], op=np.maximum, loop_indices=[i])
    nl.store(out, value=acc)
    return out


@nki.jit
def floor_and_identity(x_tensor):
    """floor(x) as int32, and x @ I with an identity matrix from nl.shared_constant (a transpose by matmul)."""
    P, F = x_tensor.shape
    floors = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.shared_hbm)
    same = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(x_tensor)
    nl.store(floors, value=nl.floor(x, dtype=nl.int32))
    identity = nl.load(nl.shared_constant(np.identity(P, dtype=np.int8), dtype=nl.float32))
    # moving = identity: (x[K=P, M=F]).T @ I[K=P, N=P] = x.T
    nl.store(same, value=nl.copy(nisa.nc_matmul(x, identity)))
    return floors, same


@nki.jit
def zeros_block_tensor_then_fill(x_tensor):
    """nl.zeros of a block tensor (n, par_dim(128), F), one block then overwritten from HBM."""
    R, F = x_tensor.shape
    n = R // 128
    out = nl.ndarray((R, F), dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    tiles = nl.zeros((n, nl.par_dim(128), F), dtype=x_tensor.dtype, buffer=nl.sbuf)
    tiles[0] = nl.load(x_tensor[0:128, :])
    grid = nl.mgrid[0:128, 0:F]
    for i in nl.affine_range(n):
        nl.store(out[i * 128 + grid.p, grid.x], value=tiles[i, grid.p, grid.x])
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def dropout_rows(x_tensor, seed_tensor):
    """nl.random_seed from a [1, 1] SBUF tile, then nl.dropout with rate 0.5."""
    out = nl.ndarray(x_tensor.shape, dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    nl.random_seed(seed=nl.load(seed_tensor))
    nl.store(out, value=nl.dropout(nl.load(x_tensor), rate=0.5))
    return out
