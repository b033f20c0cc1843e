"""The Tensor engine's FP8 double-row mode: one nc_matmul that contracts two 128-row tiles at once.

``nisa.nc_matmul(stationary, moving, perf_mode="double_row_gen3")`` (beta-1 name; beta 2:
``nisa.matmul_perf_mode.double_row``) multiplies a stationary ``[K, 2, M]`` by a moving ``[K, 2, N]``
and writes ``[M, N]``, the sum over both K and the pair axis:

    dst[m, n] (+)= sum_{k, r} stationary[k, r, m] * moving[k, r, n]

(the einsum ``"kli,klj->ij"`` AWS's nc_matmul example checks its double-row kernel against). The mode
"packs two FP8 weight/ifmap element pairs" for "2x matmul throughput" [PERF-MODE]: the array streams
the N columns of the moving pair in the time of one ordinary pass, so an instruction costs what a
``[K, M] x [K, N]`` matmul costs and does twice its FLOPs.

Rules: NeuronCore-v3 and v4 only ("On NeuronCore-v2, performance mode is not supported" [NC-MATMUL]);
FP8 inputs, both operands (float8_e4m3 / e4m3fn / e5m2: "Double FP8 mode" [PERF-MODE]); the pair axis
is the first free axis and has size 2; K <= 128, M <= 128, N <= 512 per half (from NeuronCore-v4 the
whole PSUM partition of dst's type, as every nc_matmul: `memory.moving_fmax`); SBUF in, PSUM out.

A method of `NeuronCore` (`DoubleRowInstructions`, composed into it), so that tracing records it
and replay (checked or compiled) issues it like any Tensor-engine instruction (`_pe_issue`).

[PERF-MODE] AWS Neuron docs, NKI API "nki.isa.matmul_perf_mode" (double_row).
[NC-MATMUL] AWS Neuron docs, NKI API "nki.isa.nc_matmul", "Performance mode".
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .operands import _view
from .errors import DtypeError, MatmulShapeError, MemoryPlacementError
from .memory import check_pe_result, moving_fmax

OPCODE = "nc_matmul_double_row"


class PerfModeError(MatmulShapeError):
    """A matmul performance mode the core's generation lacks, or operands that do not fit it."""
    rule = "matmul perf_mode"


def check(core, dst, st, mv):
    """(K, M, N) of a double-row matmul, or the rule it breaks."""
    spec = core.spec
    if spec.generation < "v3":
        raise PerfModeError(
            f"matmul perf_mode: double_row needs NeuronCore-v3 or newer (Trn2, Trn3); {spec.name} is "
            f"NeuronCore-{spec.generation}, where performance mode is not supported",
            value=spec.generation, limit="v3")
    for v, what in ((st, "stationary"), (mv, "moving")):
        if v.tensor.kind != "sbuf":
            raise MemoryPlacementError(
                f"operand memory: nc_matmul {what} {v.tensor.name!r} is in {v.tensor.kind.upper()}; "
                f"the Tensor engine reads SBUF only", value=v.tensor.kind, limit="sbuf")
        if v.tensor.dtype not in dtypes.FLOAT8:
            raise PerfModeError(
                f"matmul perf_mode: double_row is the FP8 mode; {what} is "
                f"{dtypes.name(v.tensor.dtype)}, expected float8_e4m3 / float8_e4m3fn / float8_e5m2",
                value=dtypes.name(v.tensor.dtype), limit="fp8")
        if len(v.shape) != 3 or v.shape[1] != 2:
            raise PerfModeError(
                f"matmul perf_mode: double_row {what} must be [K, 2, F] (the pair of rows on its first "
                f"free axis), got {v.shape}", value=v.shape, limit="[K, 2, F]")
    if dst.tensor.kind != "psum":
        raise MemoryPlacementError(
            f"operand memory: nc_matmul dst {dst.tensor.name!r} is in {dst.tensor.kind.upper()}; the "
            f"Tensor engine writes PSUM only", value=dst.tensor.kind, limit="psum")
    K, M, N = st.shape[0], st.shape[2], mv.shape[2]
    if mv.shape[0] != K:
        raise MatmulShapeError(f"matmul tile shape: contraction sizes differ: stationary {st.shape}, "
                               f"moving {mv.shape}", value=mv.shape[0], limit=K)
    n_max, what = moving_fmax(spec, dst.tensor.dtype)     # "Tile size", for every performance mode
    for size, limit, name in ((K, spec.partitions, "K (PE rows)"), (M, spec.stationary_fmax, "M (gemm_stationary_fmax)"),
                              (N, n_max, f"N ({what})")):
        if size > limit:
            raise MatmulShapeError(f"matmul tile shape: double_row {name} = {size}, the limit is {limit}",
                                   value=size, limit=limit)
    if dst.partitions != M or dst.free_size != N:
        raise MatmulShapeError(f"shape mismatch: double_row dst {dst.shape} should be [M={M}, N={N}]",
                               value=dst.shape, limit=(M, N))
    # "The dst tile must be a float32 tile in NeuronCore-v2 and NeuronCore-v3. Starting NeuronCore-v4, dst can
    # either be a float32 or bfloat16 tile" [NC-MATMUL], "Data types" (for every performance mode)
    if dst.tensor.dtype != dtypes.float32 and not (dst.tensor.dtype == dtypes.bfloat16 and spec.generation >= "v4"):
        raise DtypeError(f"data type: nc_matmul writes fp32 to PSUM (bf16 also on NeuronCore-v4), dst is "
                         f"{dtypes.name(dst.tensor.dtype)}", value=dst.tensor.dtype, limit="float32")
    check_pe_result(spec, dst, OPCODE)
    return K, M, N


def nc_matmul_double_row(self, dst, stationary, moving, accumulate=None) -> int:
    """dst[M, N] (+)= sum over k and the pair axis of stationary[K, 2, M] * moving[K, 2, N]
    (FP8 double-row mode, NeuronCore-v3+): one pass of N columns, twice an ordinary matmul's FLOPs.
    ``accumulate``: as `nc_matmul` (None adds to a written region, overwrites a fresh one)."""
    dst = _view(dst, "dst")
    st = _view(stationary, "stationary")
    mv = _view(moving, "moving")
    K, M, N = check(self, dst, st, mv)
    self._matmul_dtypes.add(st.tensor.dtype)
    if self.full:
        t = dst.tensor
        if accumulate is None:
            accumulate = t.written is None or bool(
                (t.written if dst.index is None else t.written[dst.index]).all())
        st.check_initialized()
        mv.check_initialized()
        product = np.einsum("kri,krj->ij", np.asarray(st.values(), np.float32),
                            np.asarray(mv.values(), np.float32))
        if accumulate:
            dst.check_initialized()
            product = dst.values().astype(np.float32).reshape(M, N) + product
        dst.write(product.reshape(dst.shape).astype(t.dtype))
    # timing: the Tensor engine's generic issue; the cost model charges one pass of N columns
    # for this opcode (cost._tensor_engine), the FLOPs are those of both halves
    return self._pe_issue(OPCODE, st, (mv,), dst, 2.0 * (2 * K) * M * N, st.nbytes + mv.nbytes, dst.nbytes)


class DoubleRowInstructions:
    """NeuronCore's double-row matmul (composed into `core.NeuronCore`)."""
    nc_matmul_double_row = nc_matmul_double_row
