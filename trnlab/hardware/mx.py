"""MX (OCP Microscaling) on NeuronCore-v4: `quantize_mx` (Vector engine) and `nc_matmul_mx` (Tensor engine).

From AWS's NKI API pages nki.isa.quantize_mx and nki.isa.nc_matmul_mx [MX] ("Available only on
NeuronCore-v4 and newer"):

- **Data**: 4-packed FP8 (`float8_e5m2_x4`, `float8_e4m3fn_x4`): one 32-bit element holds four
  contiguous FP8 values (`hardware.dtypes.PACKED_X4`), value q in byte q; 4-packed FP4
  (`float4_e2m1fn_x4`, OCP E2M1: values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives): one 16-bit
  element holds four values, value q in bits 4q..4q+3 — the order of AWS's tutorial, which stores
  FP4 data on the host as uint8 bytes of two values, the first in the low nibble [MX-TUT]
  (`ELEMENT_OF`). A tile [P, F] of x4 elements holds [P, 4F] values.
- **Scale groups**: 32 values = 8 partitions x 4 values per partition, i.e. one x4 element on each of
  8 consecutive partitions; one E8M0 scale per group (uint8 or float8_e8m0fnu: value 2^(s - 127)).
- **Scale layout** (as AWS's tutorial lays it out for nc_matmul_mx): for a data tile of P <= 32
  partitions the scales are a [P/8, F] tile; for more, group g sits on partition 32*(g//4) + g%4 of a
  scale tile of P partitions (the first 4 partitions of each 32-partition quadrant).
  quantize_mx writes the scale tile's first P partitions whole: the scales, and zero on the other 28
  partitions of each quadrant (the [P, F/4] layout the NKI Library's reference of the instruction gives,
  `mx_torch_common.quantize_mx_golden`: ASSUMED, AWS's page does not say); nc_matmul_mx reads the
  scale partitions only (a kernel may load just those). Every MX operand may be a view of partitions
  first and any free axes (a [P, 1, F] slice of a 3-D tile), its free elements taken in order.
- **quantize_mx** (fp16/bf16 [P, 4F] -> x4 [P, F] + scales; P a multiple of 32, <= 128): per group,
  the OCP sample conversion [OCP-MX]: scale exponent = floor(log2(amax)) - emax (emax 15 for e5m2, 8
  for e4m3fn: the exponent of the type's largest normal, 57344 = 1.75 * 2^15, 448 = 1.75 * 2^8); values
  = x / 2^exponent, clipped to the type's largest finite value and rounded to nearest even. A group
  whose amax has a mantissa above 1.75 saturates its largest values (amax 1.9 in e4m3fn: exponent -8,
  E8M0 byte 119, 1.9 * 2^8 = 486.4 -> 448). FP8 only: the page lists float8_e5m2_x4 /
  float8_e4m3fn_x4 as its outputs, and AWS's tutorial asserts "FP4 not supported by Quantize-MX"
  [MX-TUT]; a kernel gets FP4 data quantized on the host.
  Why the OCP scale, not the page's: the page (Neuron 2.32) adds that the instruction "uses a block
  scale that is two times larger, reserving additional range for rounding the largest values in each
  group without saturation" (exponent one higher: byte 120, 1.9 * 2^7 = 243.2 -> 240, every value
  half the OCP one — no reading of the sentence gives the OCP bytes). AWS's own tests of the chip
  say otherwise: the NKI Library's quantize_mx reference ("Golden reference matching nisa.quantize_mx
  hardware behavior", mx_torch_common.quantize_mx_golden) and its hardware tests
  (test_quantize_to_mx: the instruction's data against it at rtol 2e-2, which halved values fail;
  experimental mxfp_load: data and scales at atol = rtol = 0) use the OCP exponent, and AWS's
  mxfp-matmul tutorial says of the same host quantizer that it and its matmul golden "mimic the
  hardware" [MX-TUT]. trnlab follows the tests run on the chip (docs/nki_compat.md, "What differs").
- **Host quantization** (`quantize`, what AWS's tutorial does on the CPU, FP4 included): the same OCP
  sample conversion, shared exponent floor(log2(amax)) - emax (2 for e2m1), values x / 2^exponent
  rounded to nearest even and saturated to the element type's largest value (+-6 for e2m1).
- **nc_matmul_mx**: dst[M, N] (+)= sum over k and the 4 packed values q of
  (stationary[k, m, q] * 2^(s_st(k, m) - 127)) * (moving[k, n, q] * 2^(s_mv(k, n) - 127)): the contraction
  is 4 x K. Either operand may be MXFP8 or MXFP4 ("Multiplying an MXFP8 matrix with an MXFP4 matrix is
  also allowed" [ARCH-v4]). Timing: one pass of N columns, as a [K, M] x [K, N] matmul (4x the
  contraction per pass: 315 MXFP8/MXFP4 vs 79 BF16 TFLOPS per NeuronCore-v4; "An MX matmul with
  either the MXFP8 or MXFP4 datatype runs at 4x the throughput compared to a BF16/FP16 matmul"
  [ARCH-v4]; `presets.TRN3_CORE.fp8_peak_factor`). FP4 costs what FP8 costs. N: up to one PSUM bank
  of dst's type: "The free dimension size of moving must not exceed 512 when dst is in float32 or 1024
  when dst is in bfloat16" (nki.isa.nc_matmul_mx, "Tile size"; nc_matmul's whole-PSUM limit on
  NeuronCore-v4 is not nc_matmul_mx's).
- Cost of quantize_mx: "four input elements per partition, per cycle (i.e., 4x Vector performance
  mode)" [ARCH-v4], "MX data-type Quantization": static + N/4 Vector cycles, N the source's elements
  per partition (`cost.cost`); the static part as for every Vector instruction.

Row tiling (`tile_position` / `tile_size`) of nc_matmul_mx: the rules and timing of nc_matmul's tiling
mode (`tensor_engine.pe_tiles`), rows only.

[MX] AWS Neuron docs, NKI API "nki.isa.quantize_mx", "nki.isa.nc_matmul_mx" (NKI 0.3+ pages).
[ARCH-v4] AWS Neuron docs, Trainium3 architecture guide for NKI, "Quad-MXFP8/MXFP4 Matmul Performance".
[MX-TUT] aws-neuron/nki-samples, tutorial mxfp-matmul (mx_kernels.py, mx_cpu_utils.py, mx_toplevel.py).
[OCP-MX] OCP Microscaling Formats (MX) Specification v1.0 (Sept. 2023): E2M1 elements (max normal 6),
         E8M0 scale, the shared exponent of a block floor(log2(amax)) - emax_elem; AWS's tutorial's
         CPU quantizer (quantize_mx_golden) computes the same.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from . import dtypes
from . import retype as _retype
from .engines import DVE
from .operands import _view
from .errors import DtypeError, HardwareError, MatmulShapeError, MemoryPlacementError, PETilingError
from .tensor import View
from .memory import check_pe_result
from .tensor_engine import pe_tiles

SCALE_DTYPES = (dtypes.uint8, dtypes.float8_e8m0fnu)
float4_e2m1fn = np.dtype(ml_dtypes.float4_e2m1fn)            # one FP4 value per byte (for NumPy math)
#: x4 type -> the type of each of its four values
ELEMENT_OF = {**dtypes.PACKED_X4, dtypes.float4_e2m1fn_x4: float4_e2m1fn}
MX_DATA = tuple(ELEMENT_OF)
EMAX = {dtypes.float8_e5m2: 15, dtypes.float8_e4m3fn: 8, float4_e2m1fn: 2}   # largest exponent of the element type


class MXError(HardwareError):
    """An MX instruction used off NeuronCore-v4, or with operands that break its layout rules."""
    rule = "mx format"


def _need_v4(core, opcode: str):
    if core.spec.generation < "v4":
        raise MXError(f"mx format: {opcode} needs NeuronCore-v4 or newer (Trn3); {core.spec.name} is "
                      f"NeuronCore-{core.spec.generation}", value=core.spec.generation, limit="v4")


def scale_partitions(data_partitions: int) -> np.ndarray:
    """The scale tile's partition of each 8-partition group of a data tile (see the module docstring)."""
    groups = np.arange(data_partitions // 8)
    return groups if data_partitions <= 32 else 32 * (groups // 4) + groups % 4


def _check_scale(scale, data, what: str, gathered: bool = False):
    if scale.tensor.kind != "sbuf":
        raise MemoryPlacementError(f"operand memory: {what} is in {scale.tensor.kind.upper()}; MX scales "
                                   f"live in SBUF", value=scale.tensor.kind, limit="sbuf")
    if scale.tensor.dtype not in SCALE_DTYPES:
        raise MXError(f"mx format: {what} is {dtypes.name(scale.tensor.dtype)}; scales are uint8 or "
                      f"float8_e8m0fnu (E8M0)", value=dtypes.name(scale.tensor.dtype), limit="uint8")
    rows = int(scale_partitions(data.partitions).max()) + 1
    wider = scale.free_size > data.free_size and len(scale.shape) != 2    # which columns: only 2-D says
    if scale.partitions < rows or scale.free_size < data.free_size or wider:
        raise MXError(f"mx format: {what} {scale.shape} cannot hold the scales of a [{data.partitions}, "
                      f"{data.free_size}] data tile: needs [{rows}, {data.free_size}] (one scale per 8 "
                      f"partitions x 1 packed element)", value=scale.shape, limit=(rows, data.free_size))
    _check_partitions_first(scale, what, gathered)


def _check_partitions_first(v, what: str, gathered: bool = False):
    """MX operands are read partition by partition: the view's first axis is the partition axis. `gathered`:
    nc_matmul_mx also takes the views tensor indirection gathers (indirection.py checks their rules)."""
    if v.tensor.partition_axis != 0 or not v.part_first or not (v.basic or gathered):
        raise MXError(f"mx format: {what} {v} must be a slice of partitions first (axis 0), then free "
                      f"axes", value=v.shape, limit="[P, ...]")


def _rows(view, lo: int, hi: int, free: int):
    """Partitions [lo, hi) of `view` (from its first partition) and its first `free` elements of each
    (a 2-D view only when fewer than all), as a view of their own."""
    if lo == 0 and hi == view.partitions and free == view.free_size:
        return view
    t = view.tensor
    index = (slice(None),) * len(t.shape) if view.index is None else tuple(view.index)
    index = index + (slice(None),) * (len(t.shape) - len(index))
    start = view.part_start
    parts = slice(start + lo, start + hi)
    if free != view.free_size:                          # 2-D (see _check_scale): narrow the columns
        first = index[1].indices(t.shape[1])[0] if type(index[1]) is slice else int(index[1])
        return View(t, (parts, slice(first, first + free)))
    return View(t, (parts,) + index[1:])


def _check_data(v, what: str, gathered: bool = False, dtype=None):
    if v.tensor.kind != "sbuf":
        raise MemoryPlacementError(f"operand memory: {what} is in {v.tensor.kind.upper()}; MX data lives in "
                                   f"SBUF", value=v.tensor.kind, limit="sbuf")
    dtype = v.tensor.dtype if dtype is None else dtype
    if dtype not in MX_DATA:
        raise MXError(f"mx format: {what} is {dtypes.name(dtype) if dtype in dtypes._NAMES else dtype}; "
                      f"expected 4-packed MX data (float8_e5m2_x4 / float8_e4m3fn_x4 / float4_e2m1fn_x4)",
                      value=str(dtype), limit="*_x4")
    if v.partitions % 32 or v.partitions > 128:
        raise MXError(f"mx format: {what} has {v.partitions} partitions; MX tiles take a multiple of 32, "
                      f"at most 128", value=v.partitions, limit=128)
    _check_partitions_first(v, what, gathered)


def _garbage_columns(data, scale):
    """Full mode: per free column of an nc_matmul_mx operand [K, F], whether any of its data or of the
    scales it reads holds garbage (memory never written, or computed from it); None if none does."""
    K, F = data.partitions, data.free_size
    bad = data.undefined()
    columns = None if bad is None else bad.reshape(K, F).any(axis=0)
    bad = scale.undefined()            # only the partitions that hold scales are read (a gathered view too)
    if bad is not None:
        more = bad.reshape(scale.partitions, scale.free_size)[scale_partitions(K), :F].any(axis=0)
        columns = more if columns is None else columns | more
    return columns


def _scale_values(scale, data_partitions: int, free: int) -> np.ndarray:
    """The scale view's values as [partitions, free] (its first `free` elements of each partition)."""
    values = np.asarray(scale.values()).reshape(scale.partitions, scale.free_size)
    return values[:, :free]


def _element(x4_dtype) -> np.dtype:
    dt = np.dtype(x4_dtype)
    if dt not in ELEMENT_OF:
        raise MXError(f"mx format: {dt} is not a 4-packed MX type; expected one of "
                      f"{', '.join(dtypes.name(t) for t in MX_DATA)}", value=str(dt), limit="*_x4")
    return ELEMENT_OF[dt]


def unpack(values: np.ndarray, x4_dtype) -> np.ndarray:
    """x4 words [P, F] -> float32 values [P, F, 4] (value 0 in the lowest byte / nibble)."""
    element = _element(x4_dtype)
    raw = np.ascontiguousarray(values)
    if element == float4_e2m1fn:                      # 16-bit words, four 4-bit codes
        words = raw.view(np.uint16)
        codes = (words[..., None] >> np.array([0, 4, 8, 12], np.uint16)) & 0xF
        return codes.astype(np.uint8).view(float4_e2m1fn).astype(np.float32)
    words = raw.view(np.uint32)
    fp8 = words.view(np.uint8).reshape(words.shape + (4,)).view(element)
    return fp8.astype(np.float32)


def pack(values: np.ndarray, x4_dtype) -> np.ndarray:
    """float values [P, F, 4] -> x4 words [P, F] (rounded to the element type, nearest even; FP4
    saturates at +-6)."""
    element = _element(x4_dtype)
    rounded = np.ascontiguousarray(np.asarray(values, np.float32).astype(element))
    if element == float4_e2m1fn:
        codes = (rounded.view(np.uint8) & 0xF).astype(np.uint16)
        words = codes[..., 0] | codes[..., 1] << 4 | codes[..., 2] << 8 | codes[..., 3] << 12
        return np.ascontiguousarray(words).view(x4_dtype)
    return rounded.view(np.uint8).reshape(values.shape[:-1] + (4,)).view(np.uint32)[..., 0].view(x4_dtype)


def pack_fp4_bytes(words: np.ndarray) -> np.ndarray:
    """float4_e2m1fn_x4 words [P, F] -> the uint8 bytes [P, 2F] AWS's tutorial keeps FP4 data in on the
    host (two values a byte, the first in the low nibble); `ap(dtype=nl.float4_e2m1fn_x4)` reads them back."""
    w = np.ascontiguousarray(words).view(np.uint16)
    return w.astype("<u2").view(np.uint8).reshape(w.shape[:-1] + (2 * w.shape[-1],))


def _factors(s: np.ndarray) -> np.ndarray:
    """2^(s - 127) of E8M0 scales (uint8 bits or float8_e8m0fnu; 255 is NaN)."""
    if s.dtype == dtypes.float8_e8m0fnu:
        return s.astype(np.float32)
    return np.where(s == 255, np.nan, np.exp2(s.astype(np.float32) - 127.0))


def scale_factors(scale_values: np.ndarray, data_partitions: int, free: int) -> np.ndarray:
    """Per data partition and packed element, 2^(s - 127) of its group: [P, F] (scales in the layout
    nc_matmul_mx reads)."""
    rows = scale_partitions(data_partitions)
    return np.repeat(_factors(np.asarray(scale_values)[rows, :free]), 8, axis=0)


def quantize(x: np.ndarray, x4_dtype) -> tuple[np.ndarray, np.ndarray]:
    """(x4 words [P, F/4], uint8 scales [P/8, F/4]) of fp values x [P, F]: the OCP sample conversion
    per group of 8 partitions x 4 values, as quantize_mx computes it (see the module docstring)."""
    element = _element(x4_dtype)
    P, F = x.shape
    if P % 8 or F % 4:
        raise MXError(f"mx format: a [{P}, {F}] tile does not split into groups of 8 partitions x 4 values",
                      value=(P, F), limit="P % 8 == 0, F % 4 == 0")
    groups = np.abs(x.astype(np.float32)).reshape(P // 8, 8, F // 4, 4).max(axis=(1, 3))
    _, exponent = np.frexp(groups)                        # amax = m * 2^e, m in [0.5, 1): floor(log2) = e - 1
    shared = np.clip(np.where(groups > 0, exponent - 1 - EMAX[element], -127), -127, 127)
    factor = np.exp2(np.repeat(np.repeat(shared, 8, axis=0), 4, axis=1).astype(np.float32))
    largest = float(ml_dtypes.finfo(element).max)
    scaled = np.clip(x.astype(np.float32) / factor, -largest, largest)
    return pack(scaled.reshape(P, F // 4, 4), x4_dtype), (shared + 127).astype(np.uint8)


def dequantize(words: np.ndarray, scales: np.ndarray, x4_dtype) -> np.ndarray:
    """float32 values [P, 4F] of x4 words [P, F] and their scales ([P/8, F] as `quantize` returns
    them, or a scale tile in quantize_mx's layout with P partitions): each value times 2^(s - 127)."""
    P, F = words.shape
    values = unpack(words, x4_dtype)                                       # [P, F, 4]
    rows = np.asarray(scales)
    if rows.shape[0] != P // 8:                                            # the on-chip layout
        rows = rows[scale_partitions(P)]
    factors = np.repeat(_factors(rows[:, :F]), 8, axis=0)                  # [P, F]
    return (values * factors[..., None]).reshape(P, 4 * F)


def quantize_mx(self, dst, src, dst_scale, src_dtype=None, dst_dtype=None) -> int:
    """dst (x4 [P, F/4]), dst_scale (E8M0) = MX quantization of src (fp16/bf16 [P, F]) on the Vector engine.
    ``src_dtype``: src's bytes read as this type (a tile of another element type: its whole elements'
    bytes in order, as NumPy's ``.view``), e.g. an fp32 tile [P, F/2] read as bf16 [P, F]. ``dst_dtype``:
    dst's bytes written as this x4 type (a uint32 tile retyped by ``.view``: `retype.py`)."""
    _need_v4(self, "quantize_mx")
    dst, src, scale = _view(dst, "dst"), _view(src, "src"), _view(dst_scale, "dst_scale")
    if src.tensor.kind != "sbuf":
        raise MemoryPlacementError(f"operand memory: quantize_mx src is in {src.tensor.kind.upper()}; it "
                                   f"reads SBUF", value=src.tensor.kind, limit="sbuf")
    read_as = src.tensor.dtype if src_dtype is None else dtypes.as_dtype(src_dtype)
    ratio = src.tensor.itemsize // read_as.itemsize if src.tensor.itemsize >= read_as.itemsize else 0
    if read_as not in (dtypes.float16, dtypes.bfloat16) or not ratio:
        raise DtypeError(f"data type: quantize_mx src is {dtypes.name(read_as)}; it takes float16 or "
                         f"bfloat16", value=read_as, limit=("float16", "bfloat16"))
    dst_type = _retype.read_as(dst, dst_dtype, "quantize_mx dst")
    _check_data(dst, "quantize_mx dst", dtype=dst_type)
    if dst_type not in dtypes.PACKED_X4:
        raise MXError("mx format: quantize_mx dst is float4_e2m1fn_x4; quantize_mx produces MXFP8 only "
                      "(float8_e5m2_x4 / float8_e4m3fn_x4, nki.isa.quantize_mx) — quantize FP4 on the host "
                      "(trnlab.hardware.mx.quantize), as AWS's mxfp-matmul tutorial does",
                      value="float4_e2m1fn_x4", limit="float8_*_x4")
    if src.partitions != dst.partitions or ratio * src.free_size != 4 * dst.free_size:
        raise MXError(f"mx format: quantize_mx src {src.shape} must be [P, 4F] for dst {dst.shape} [P, F] "
                      f"(four values per packed element)", value=src.shape, limit=(dst.partitions, 4 * dst.free_size))
    _check_scale(scale, dst, "quantize_mx dst_scale")
    if self.full:
        x, bad = self._garbage(src)                           # [P, 4F] values, garbage mask or None
        if read_as != src.tensor.dtype:                       # the elements' bytes, read as src_dtype
            raw = np.ascontiguousarray(np.asarray(src.values()).astype(src.tensor.dtype, copy=False))
            x = raw.reshape(src.partitions, -1).view(read_as).astype(np.float32)
            bad = None if bad is None else np.repeat(bad, ratio, axis=1)
        if bad is not None:
            x = np.where(bad, 0.0, x)
        words, scales = quantize(x, dst_type)
        dst.write(_retype.stored_as(words.reshape(dst.shape), dst, dst_type))
        # the scale partitions of the quadrants the data covers: their scales, zero on the others (the
        # [P, F/4] layout the NKI Library's reference of quantize_mx gives: mx_torch_common.quantize_mx_golden)
        covered = min(scale.partitions, dst.partitions)
        region = _rows(scale, 0, covered, dst.free_size)
        current = np.zeros((covered, dst.free_size), scale.tensor.dtype)
        current[scale_partitions(dst.partitions)] = scales.view(scale.tensor.dtype)  # E8M0 bits = biased exponent
        region.write(current.reshape(region.shape))
        if bad is not None:       # garbage in a group: that group's values and scale are garbage
            groups = bad.reshape(dst.partitions // 8, 8, dst.free_size, 4).any(axis=(1, 3))   # [P/8, F]
            self._poison_from(dst, np.repeat(groups, 8, axis=0), src)
            scale_bad = np.zeros((covered, dst.free_size), bool)
            scale_bad[scale_partitions(dst.partitions)] = groups
            self._poison_from(region, scale_bad, src)
    dur = self._cost_ns(DVE, "quantize_mx", (src,), (dst,), values=4 * dst.free_size)
    return self._issue(DVE, "quantize_mx", dur, (src,), dst, also_write=scale)


def nc_matmul_mx(self, dst, stationary, moving, stationary_scale, moving_scale, accumulate=None,
                 tile_position=None, tile_size=None, stationary_dtype=None, moving_dtype=None) -> int:
    """dst[M, N] (+)= the MX product of stationary x4 [K, M] and moving x4 [K, N] with their scales.
    ``stationary_dtype`` / ``moving_dtype``: the operand's SBUF bytes read as this x4 type (a uint32 tile
    retyped by ``.view(nl.float8_e4m3fn_x4)``: AWS's MoE kernels load their weights so).
    ``tile_position`` / ``tile_size``: row tiling of the PE array ("For nc_matmul_mx, Tensor Engine
    supports only row tiling mode": column_size 128, start_column 0; nki.isa.nc_matmul_mx)."""
    _need_v4(self, "nc_matmul_mx")
    dst, st, mv = _view(dst, "dst"), _view(stationary, "stationary"), _view(moving, "moving")
    st_s, mv_s = _view(stationary_scale, "stationary_scale"), _view(moving_scale, "moving_scale")
    st_type = _retype.read_as(st, stationary_dtype, "nc_matmul_mx stationary")
    mv_type = _retype.read_as(mv, moving_dtype, "nc_matmul_mx moving")
    _check_data(st, "nc_matmul_mx stationary", gathered=True, dtype=st_type)
    _check_data(mv, "nc_matmul_mx moving", gathered=True, dtype=mv_type)
    _check_scale(st_s, st, "nc_matmul_mx stationary_scale", gathered=True)
    _check_scale(mv_s, mv, "nc_matmul_mx moving_scale", gathered=True)
    K, M, N = st.partitions, st.free_size, mv.free_size
    if mv.partitions != K:
        raise MatmulShapeError(f"matmul tile shape: contraction sizes differ: stationary {st.shape}, moving "
                               f"{mv.shape}", value=mv.partitions, limit=K)
    # N: as many columns as one PSUM bank holds of dst's type ("must not exceed 512 when dst is in float32 or
    # 1024 when dst is in bfloat16", nki.isa.nc_matmul_mx, "Tile size")
    n_max = self.spec.psum_bank_bytes // dst.tensor.itemsize if dst.tensor.kind == "psum" else self.spec.moving_fmax
    if M > self.spec.stationary_fmax or N > max(n_max, self.spec.moving_fmax):
        raise MatmulShapeError(f"matmul tile shape: nc_matmul_mx M={M}, N={N}; limits {self.spec.stationary_fmax}, "
                               f"{max(n_max, self.spec.moving_fmax)} (one PSUM bank of {dtypes.name(dst.tensor.dtype)})",
                               value=(M, N), limit=(self.spec.stationary_fmax, max(n_max, self.spec.moving_fmax)))
    if dst.tensor.kind != "psum":
        raise MemoryPlacementError(f"operand memory: nc_matmul_mx dst is in {dst.tensor.kind.upper()}; the "
                                   f"Tensor engine writes PSUM", value=dst.tensor.kind, limit="psum")
    if dst.partitions != M or dst.free_size != N:
        raise MatmulShapeError(f"shape mismatch: nc_matmul_mx dst {dst.shape} should be [M={M}, N={N}]",
                               value=dst.shape, limit=(M, N))
    if dst.tensor.dtype not in (dtypes.float32, dtypes.bfloat16):
        raise DtypeError(f"data type: nc_matmul_mx writes fp32 or bf16 to PSUM, dst is "
                         f"{dtypes.name(dst.tensor.dtype)}", value=dst.tensor.dtype, limit="float32")
    check_pe_result(self.spec, dst, "nc_matmul_mx")
    tiles = 0
    if tile_position is not None or tile_size is not None:
        if tile_size is not None and len(tuple(tile_size)) == 2 and int(tuple(tile_size)[1]) != 128 or \
                tile_position is not None and len(tuple(tile_position)) == 2 and int(tuple(tile_position)[1]) != 0:
            raise PETilingError(f"PE array tiling: nc_matmul_mx tiles rows only (tile_size column_size 128, "
                                f"tile_position start_column 0), got tile_position {tile_position}, tile_size "
                                f"{tile_size}", value=(tile_position, tile_size), limit=("(r, 0)", "(rows, 128)"))
        tiles = pe_tiles(self.spec, tile_position, tile_size, K, M)
    self._matmul_dtypes.add(dtypes.float8_e4m3)          # MFU against the fp8 peak (the MX rate)
    if self.full:
        # garbage in (memory never written) lands where it goes, as nc_matmul's: result row m depends on
        # stationary column m and its scales, result column n on moving column n and its scales
        rows, cols = _garbage_columns(st, st_s), _garbage_columns(mv, mv_s)
        a = unpack(st.values(), st_type).reshape(K, M, 4) * scale_factors(_scale_values(st_s, K, M), K, M)[..., None]
        b = unpack(mv.values(), mv_type).reshape(K, N, 4) * scale_factors(_scale_values(mv_s, K, N), K, N)[..., None]
        product = np.einsum("kmq,knq->mn", a.reshape(K, M, 4), b.reshape(K, N, 4))
        t = dst.tensor
        if accumulate is None:
            accumulate = t.written is None or bool((t.written if dst.index is None else t.written[dst.index]).all())
        garbage = None if rows is None and cols is None else \
            (np.zeros(M, bool) if rows is None else rows)[:, None] | (np.zeros(N, bool) if cols is None else cols)[None, :]
        if accumulate:                                   # adding onto garbage keeps it garbage
            before = dst.undefined()
            if before is not None:
                before = before.reshape(M, N)
                garbage = before if garbage is None else garbage | before
            product = product + dst.values().astype(np.float32).reshape(M, N)
        dst.write(product.reshape(dst.shape).astype(t.dtype))
        if garbage is not None:
            self._poison_from(dst, garbage, st, mv, st_s, mv_s)
    # one pass of N columns (cost._tensor_engine: K, M from the stationary, N from the moving)
    return self._pe_issue("nc_matmul_mx", st, (mv, st_s, mv_s), dst, 2.0 * 4 * K * M * N,
                          st.nbytes + mv.nbytes + st_s.nbytes + mv_s.nbytes, dst.nbytes, tiles)


class MxInstructions:
    """NeuronCore's MX instructions (composed into `core.NeuronCore`)."""
    quantize_mx = quantize_mx
    nc_matmul_mx = nc_matmul_mx
