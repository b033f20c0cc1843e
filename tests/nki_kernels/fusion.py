"""Kernels in AWS's public NKI style whose block tensors outgrow SBUF/PSUM in the order their loops are
written: a producer `affine_range` loop fills every block, the next loops read them (as AWS's
attention tutorial step 3 does), so they run only if the loops are fused (trnlab.hardware.fusion).
Each comes with a twin marked `@nki.compiler.skip_middle_end_transformations`, and one kernel's
consumer needs every block before it can start (a fusion that is not legal)."""
import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


def score_blocks(q_tensor, k_tensor):
    """The producer loop: every [128, 512] block of q.T @ k (q, k [d, S] in HBM) into one
    (S/128, S/512, par_dim(128), 512) fp32 PSUM block tensor, all written before any is read."""
    d, s = q_tensor.shape
    q = nl.load(q_tensor)                                  # [d partitions, S]
    k = nl.load(k_tensor)
    qk = nl.ndarray((s // 128, s // 512, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(s // 128):
        for j in nl.affine_range(s // 512):
            qk[i, j] = nisa.nc_matmul(stationary=q[:, nl.ds(i * 128, 128)], moving=k[:, nl.ds(j * 512, 512)])
    return qk


def _scores_minus_row_max(q_tensor, k_tensor):
    """out[r, :] = s[r, :] - max(s[r, :]) for s = q.T @ k, q and k [128, S] (S a multiple of 512):
    the scores of every [128, 512] block go into one (S/128, S/512, par_dim(128), 512) fp32 PSUM
    block tensor first; a second loop takes each row's maximum, a third subtracts it and stores. At
    S = 1024 the block tensor is 32 KiB per partition, twice PSUM."""
    d, s = q_tensor.shape
    out_tensor = nl.ndarray((s, s), dtype=nl.float32, buffer=nl.shared_hbm)
    qk = score_blocks(q_tensor, k_tensor)
    row_max = nl.ndarray((nl.par_dim(128), s // 128, 1), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(s // 128):
        block_max = nl.ndarray((nl.par_dim(128), s // 512), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(s // 512):
            block_max[:, j] = nisa.tensor_reduce(op=nl.max, data=qk[i, j], axis=1)
        row_max[:, i, :] = nisa.tensor_reduce(op=nl.max, data=block_max, axis=1)
    for i in nl.affine_range(s // 128):
        rows = nl.ndarray((nl.par_dim(128), s), dtype=nl.float32, buffer=nl.sbuf)   # [128, S]
        for j in nl.affine_range(s // 512):
            rows[:, nl.ds(j * 512, 512)] = nisa.tensor_scalar(data=qk[i, j], op0=nl.subtract,
                                                               operand0=row_max[:, i, :])
        nl.store(out_tensor[nl.ds(i * 128, 128), :], value=rows)
    return out_tensor


@nki.jit
def scores_minus_row_max(q_tensor, k_tensor):
    return _scores_minus_row_max(q_tensor, k_tensor)


@ncc.skip_middle_end_transformations
@nki.jit
def scores_minus_row_max_as_written(q_tensor, k_tensor):
    """The same kernel, its loops kept as written (no middle-end transformation)."""
    return _scores_minus_row_max(q_tensor, k_tensor)


def _load_exp_then_double(x_tensor):
    """out = 2 * exp(x) for x [n * 128, F] fp32: the first loop loads each row block into a
    (n, par_dim(128), F) SBUF block tensor and takes its exponential in place, the second loop
    doubles and stores each block. At n = 32, F = 2048 the block tensor is 256 KiB per partition —
    more than a Trn2 partition's 192 KiB of SBUF."""
    rows, F = x_tensor.shape
    n = rows // 128
    out_tensor = nl.ndarray((rows, F), dtype=nl.float32, buffer=nl.shared_hbm)
    buf = nl.ndarray((n, nl.par_dim(128), F), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(n):
        buf[i] = nl.load(x_tensor[nl.ds(i * 128, 128), :])
        buf[i] = nisa.activation(op=nl.exp, data=buf[i])
    for i in nl.affine_range(n):
        doubled = nl.ndarray((nl.par_dim(128), F), dtype=nl.float32, buffer=nl.sbuf)
        doubled[...] = nisa.tensor_scalar(data=buf[i], op0=nl.multiply, operand0=2.0)
        nl.store(out_tensor[nl.ds(i * 128, 128), :], value=doubled)
    return out_tensor


@nki.jit
def load_exp_then_double(x_tensor):
    return _load_exp_then_double(x_tensor)


@nki.jit
@ncc.skip_middle_end_transformations
def load_exp_then_double_as_written(x_tensor):
    """The same kernel, its loops kept as written (the directive below @nki.jit this time)."""
    return _load_exp_then_double(x_tensor)


@nki.jit
def scores_minus_partition_max(q_tensor, k_tensor):
    """out[i * 128 + p, :] = s[i * 128 + p, :] - max over i', c of s[i' * 128 + p, c] (s = q.T @ k): the
    subtraction loop needs the maxima of every block, so its first iteration cannot run before the
    producer loop's last — no fusion keeps the (S/128, S/512, par_dim(128), 512) PSUM block tensor small."""
    d, s = q_tensor.shape
    out_tensor = nl.ndarray((s, s), dtype=nl.float32, buffer=nl.shared_hbm)
    qk = score_blocks(q_tensor, k_tensor)
    block_max = nl.ndarray((nl.par_dim(128), s // 128, s // 512), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(s // 128):
        for j in nl.affine_range(s // 512):
            block_max[:, i, j] = nisa.tensor_reduce(op=nl.max, data=qk[i, j], axis=1)
    overall = nisa.tensor_reduce(op=nl.max, data=block_max, axis=(1, 2))          # [128, 1]: all blocks
    for i in nl.affine_range(s // 128):
        rows = nl.ndarray((nl.par_dim(128), s), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(s // 512):
            rows[:, nl.ds(j * 512, 512)] = nisa.tensor_scalar(data=qk[i, j], op0=nl.subtract, operand0=overall)
        nl.store(out_tensor[nl.ds(i * 128, 128), :], value=rows)
    return out_tensor


@nki.jit
def exp_per_block(x_tensor):
    """out = exp(x) for x [n * 128, F]: the NKI block-dimension guide's example — each block of an
    (n, par_dim(128), F) SBUF block tensor loaded, transformed and stored in one iteration."""
    rows, F = x_tensor.shape
    out_tensor = nl.ndarray((rows, F), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((rows // 128, nl.par_dim(128), F), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(rows // 128):
        a[i] = nl.load(x_tensor[nl.ds(i * 128, 128), :])
        a[i] = nisa.activation(op=nl.exp, data=a[i])
        nl.store(out_tensor[nl.ds(i * 128, 128), :], value=a[i])
    return out_tensor


@nki.jit
def one_block_product(x_tensor, w_tensor):
    """out = x.T @ w through a PSUM block tensor of a single (par_dim(128), 512) tile, copied out by
    the Vector engine (a whole-tile access: the description's PSUM bank range is all of the tile)."""
    K, M = x_tensor.shape
    out_tensor = nl.ndarray((M, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(x_tensor)
    w = nl.load(w_tensor)
    acc = nl.ndarray((1, nl.par_dim(M), 512), dtype=nl.float32, buffer=nl.psum)
    acc[0] = nisa.nc_matmul(stationary=x, moving=w)
    result = nl.ndarray((nl.par_dim(M), 512), dtype=nl.float32, buffer=nl.sbuf)
    result[...] = nisa.tensor_copy(acc[0], engine=nisa.vector_engine)
    nl.store(out_tensor, value=result)
    return out_tensor
