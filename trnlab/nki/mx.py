"""nki.isa.quantize_mx and nki.isa.nc_matmul_mx: MX (microscaling) FP8 / FP4 on NeuronCore-v4 (Trn3).

Destination style only, as AWS's NKI 0.3+ pages define them; the formats, layouts, rules, values and
cost are in `trnlab.hardware.mx` (the core's instructions). nc_matmul_mx takes MXFP8 and MXFP4
(`float4_e2m1fn_x4`) operands, mixed or not; quantize_mx produces MXFP8 only, as on the chip (FP4
data is quantized on the host: `trnlab.hardware.mx.quantize`).
"""
from __future__ import annotations

from trnlab.hardware import dtypes as _dtypes
from trnlab.hardware import mx as _hw_mx  # noqa: F401  (installs the instructions on NeuronCore)
from trnlab.nki import issue
from trnlab.nki import tensor_indirection as _ti
from trnlab.nki.isa_binder import Tile, instruction
from trnlab.nki.isa_matmul import _tiling


@instruction(functional=None)
def quantize_mx(dst: Tile, src: Tile, dst_scale: Tile, name: str = "") -> None:
    """dst (4-packed FP8 [P, F/4]) and dst_scale (E8M0, one per 8 partitions x 4 values) = src
    (fp16/bf16 [P, F], P a multiple of 32) quantized to MX on the Vector engine (MXFP8 only)."""
    dst, src, dst_scale = issue.tile(dst, "dst"), issue.tile(src, "src"), issue.tile(dst_scale, "dst_scale")
    launch = issue.begin()
    # a tile retyped by .view(dtype) (or read by .ap(dtype=)): the engine reads / writes the bytes of the whole
    # elements it covers as the tile's type (AWS's mxfp_load quantizes an fp32 tile read as bf16)
    retyped = {f"{what}_dtype": _dtypes.name(t.dtype) for what, t in (("src", src), ("dst", dst))
               if t._bitcast is not None}
    launch.core.quantize_mx(dst=(dst if dst._bitcast is None else dst._bitcast).hw_view(),
                            src=(src if src._bitcast is None else src._bitcast).hw_view(),
                            dst_scale=dst_scale.hw_view(), **retyped)


@instruction(functional=None)
def nc_matmul_mx(dst: Tile, stationary: Tile, moving: Tile, stationary_scale: Tile, moving_scale: Tile,
                 tile_position: tuple | None = None, tile_size: tuple | None = None,
                 accumulate: bool | None = None, name: str = "") -> None:
    """dst[M, N] (+)= MX stationary x4 [K, M] by moving x4 [K, N] (MXFP8 or MXFP4 each), each value
    times its group's scale (a contraction of 4K values per partition column) on the Tensor engine;
    dst fp32 or bf16 in PSUM."""
    tiling = _tiling(tile_position, tile_size)      # row tiling (isa_matmul: both set, loop indices read)
    tiles = [issue.tile(t, what) for t, what in ((dst, "dst"), (stationary, "stationary"), (moving, "moving"),
                                                 (stationary_scale, "stationary_scale"), (moving_scale, "moving_scale"))]
    launch = issue.begin()
    if _ti.uses(*tiles):                         # Tensor Indirection: the offsets are read when it runs
        return _ti.emit_matmul(launch, "nc_matmul_mx", *tiles[:3], {"accumulate": accumulate, **tiling},
                               stationary_scale=tiles[3], moving_scale=tiles[4])
    retyped = {}
    for what, t in (("stationary", tiles[1]), ("moving", tiles[2])):
        if t._bitcast is not None:               # a tile retyped by .view(dtype): its bytes, read as t's type
            retyped[f"{what}_dtype"] = _dtypes.name(t.dtype)
    d, st, mv, st_s, mv_s = ((t._bitcast if t._bitcast is not None and k in (1, 2) else t).hw_view()
                             for k, t in enumerate(tiles))
    launch.core.nc_matmul_mx(dst=d, stationary=st, moving=mv, stationary_scale=st_s, moving_scale=mv_s,
                             accumulate=accumulate, **tiling, **retyped)
