"""`nki.isa`'s Tensor-engine instructions: `nc_matmul` (the systolic array: stationary [K, M] and
moving [K, N] tiles, K on the partitions, into PSUM [M, N]) and `nc_transpose`.
"""
from __future__ import annotations

import math

from trnlab.hardware import dtypes as hw_dtypes
from trnlab.hardware.errors import DirectAllocationOverlapError, MatmulShapeError, PETilingError
from trnlab.hardware.memory import moving_fmax
from trnlab.nki import indexing, issue
from trnlab.nki import tensor_indirection as _ti
from trnlab.nki import perf_mode as _perf_mode
from trnlab.nki import tensor_views as _views
from trnlab.hardware import onezero as _onezero
from trnlab.nki.errors import NKIError
from trnlab.nki.loop_index import plain
from trnlab.nki.isa_binder import Dtype, Mask, Tile, _block_index, _engine, _finish, engine, instruction
from trnlab.nki.isa_dma import _in_sbuf
from trnlab.nki.tensor import NkiTensor


@instruction(functional=("stationary", "moving", "is_stationary_onezero", "is_moving_onezero", "is_transpose",
                         "tile_position", "tile_size"))
def nc_matmul(dst: Tile | None, stationary: Tile, moving: Tile, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, tile_position: tuple = (),
              tile_size: tuple = (), perf_mode: object = None, name: str = "", *, accumulate: bool | None = None,
              mask: Mask | None = None, dtype: Dtype | None = None, psum_acc: bool | None = None) -> Tile | None:
    """dst[M, N...] (+)= stationary[K, M].T @ moving[K, N...] on the Tensor engine (fp32 in PSUM).

    The moving tile may have several free axes: the result keeps them (moving [K, 2, 8] gives
    [M, 2, 8]). is_transpose=True (moving an identity) passes stationary through: dst = stationary.T,
    in stationary's dtype. accumulate=None adds to what the PSUM region already holds (the first matmul into a
    fresh region overwrites it). Functional style returns the PSUM tile; ``psum += nisa.nc_matmul(a, b)``
    accumulates in place. is_stationary_onezero / is_moving_onezero: the kernel's hint that the operand
    holds ones and zeros only — the same result, fewer passes for a float32 operand, a false hint on one
    refused in full mode (trnlab/hardware/onezero.py); with is_transpose or perf_mode=double_row (no
    float32 operand) they change nothing.
    """
    hints = _onezero.hint_attrs(bool(plain(is_stationary_onezero)), bool(plain(is_moving_onezero)))
    tiling = _tiling(tile_position, tile_size)
    double_row = _perf_mode.is_double_row(perf_mode)      # FP8 [K, 2, M] x [K, 2, N] (perf_mode.py)
    if tiling and (double_row or is_transpose):
        raise NKIError(f"nc_matmul(tile_position=, tile_size=) with "
                       f"{'perf_mode=double_row' if double_row else 'is_transpose=True'}: tiling mode is simulated "
                       f"for plain matmuls only")
    stationary, moving = issue.tile(stationary, "stationary"), issue.tile(moving, "moving")
    if dst is None:
        # functional style (beta 1): AWS's compiler moves a PSUM operand (e.g. an nc_transpose result)
        # to SBUF for the Tensor engine; in destination style the operands are the kernel's to place
        stationary, moving = _in_sbuf(stationary, "stationary"), _in_sbuf(moving, "moving")
    launch = issue.begin()
    ranges = indexing.restrict(mask)
    if accumulate is None and psum_acc is not None:
        accumulate = psum_acc

    def emit(out: NkiTensor, accumulate_flag):
        # `psum[...] += nisa.nc_matmul(...)` (accumulate_flag True) starts an accumulation group on a PSUM
        # region never written (the first matmul of a group overwrites, as AWS's compiler sets the flag):
        # the core's accumulate=None adds to written regions and overwrites fresh ones. Destination
        # style (`nc_matmul(dst=psum, ...)` in a loop over K, NKI beta 2) accumulates the same way.
        # `psum[...] = nisa.nc_matmul(...)` is an assignment: it overwrites (the bytes may hold an
        # earlier logical tile of a rotating direct allocation)
        if accumulate is not None:
            flag = accumulate
        elif accumulate_flag is True or accumulate_flag == "destination":
            flag = None
        elif accumulate_flag is None:
            flag = False
        else:
            flag = accumulate_flag
        if _ti.uses(out, stationary, moving):    # Tensor Indirection: the offsets are read when it runs
            if ranges:
                _ti.refuse_mask("nc_matmul")
            mode = {"double_row": True} if double_row else {}
            return _ti.emit_matmul(launch, "nc_matmul", out, stationary, moving,
                                   {"accumulate": flag, "is_transpose": bool(is_transpose), **tiling, **mode,
                                    **({} if is_transpose or double_row else hints)})
        if is_transpose:   # the PE array passes stationary through (moving is the identity): dst = stationary.T
            (d, k0), (s, k1) = (_views.engine_operand(name, t, ranges) for name, t in (("dst", out),
                                                                                        ("src", stationary)))
            launch.core.nc_transpose(dst=d, src=s, **k0, **k1)
            return
        declared = launch.__dict__.get("declared", {}).get(id(out._hw))
        if declared is not None:
            base = out._owner if out._owner is not None else out
            own = launch.__dict__.get("declaration", {}).get(id(base))
            if own is not None and own[0] is out._hw:
                declared = own[1]         # this tensor's own declaration of the bytes, not the latest
            # a direct allocation: each logical tile — of a rotating block tensor (mod_alloc), or of
            # the same nl.ndarray declared again in a loop — is a tile of its own, so the first matmul
            # into it starts its accumulation group, whatever the earlier tile on those bytes left
            # there (AWS's attention v9: attn_out_psum[i_tile_q] += ...)
            owners = launch.__dict__.setdefault("block_owner", {})
            block = out._block
            key = (id(out._hw), block[0] if block is not None else _block_index(out))
            logical = (declared, block[1] if block is not None else key[1])
            previous = owners.get(key)
            seen = launch.__dict__.setdefault("group_tiles", {}).setdefault(key, set())
            if flag is None and previous != logical:
                if previous is not None and previous[0] > declared and logical in seen:
                    # two tiles' groups interleaved on the same bytes: on the chip each adds into the other
                    raise DirectAllocationOverlapError(
                        f"direct allocation overlap: nc_matmul resumes an accumulation group of "
                        f"{out._hw.name!r} declaration {declared} on {out._hw.kind.upper()} bytes that "
                        f"declaration {previous[0]}, placed on the same bytes, has written since; two "
                        f"accumulation groups may not interleave on one PSUM region",
                        value=(declared, previous[0]), limit="one group per region at a time")
                flag = False
            owners[key] = logical
            seen.add(logical)
        if double_row:                  # FP8 operands: the hints have "no impact for non-float32"
            launch.core.nc_matmul_double_row(dst=out.hw_view(ranges), stationary=stationary.hw_view(ranges),
                                             moving=moving.hw_view(ranges), accumulate=flag)
            return
        (st, k0), (mv, k1) = (_views.engine_operand(name, t, ranges)      # a .view(dtype) tile: its bytes
                              for name, t in (("stationary", stationary), ("moving", moving)))
        launch.core.nc_matmul(dst=out.hw_view(ranges), stationary=st, moving=mv, accumulate=flag, **tiling, **hints,
                              **k0, **k1)

    if dst is not None:
        return _finish(dst, lambda out, _flag: emit(out, "destination"), None, None, ranges=ranges)
    # the result tile is allocated before the instruction runs: check the tile limits first, so a too
    # wide moving tile is reported as the matmul rule it breaks rather than as a PSUM bank overflow
    spec = launch.core.spec
    M, N = math.prod(stationary.shape[1:]), math.prod(moving.shape[1:])
    if double_row:       # the pair axis is contracted: [K, 2, M] x [K, 2, N] -> [M, N]
        M, N = stationary.shape[-1], moving.shape[-1]
        return _finish(None, emit, (M, N), dtype or hw_dtypes.float32, "psum", ranges=ranges, accumulates=True)
    n_max, what = moving_fmax(spec, (dtype or stationary.dtype) if is_transpose else (dtype or hw_dtypes.float32))
    if M > spec.stationary_fmax or N > n_max:
        raise MatmulShapeError(
            f"matmul tile shape: stationary {stationary.shape} x moving {moving.shape} gives M={M}, N={N}; "
            f"the limits are M <= {spec.stationary_fmax} (gemm_stationary_fmax), N <= {n_max} "
            f"({what}) on {spec.name}", value=(M, N), limit=(spec.stationary_fmax, n_max))
    shape = (M,) + tuple(moving.shape[1:])
    if is_transpose:
        return _finish(None, emit, shape, dtype or stationary.dtype, "psum", ranges=ranges)
    return _finish(None, emit, shape, dtype or hw_dtypes.float32, "psum", ranges=ranges, accumulates=True)


def _tiling(tile_position, tile_size) -> dict:
    """The tiling-mode arguments for the core (nki.isa.nc_matmul, "Tiling mode": "tile_position and
    tile_size must both be set to enable tiling mode"; their values may be affine expressions of
    loop indices, read here as their values), or {} for the whole PE array."""
    if not tile_position and not tile_size:
        return {}
    if not tile_position or not tile_size:
        raise PETilingError(f"PE array tiling: tile_position={tile_position!r} and tile_size={tile_size!r}; "
                            f"both must be set to enable tiling mode", value=(tile_position, tile_size),
                            limit="both set")
    return {"tile_position": tuple(int(plain(v)) for v in tile_position),
            "tile_size": tuple(int(plain(v)) for v in tile_size)}


@instruction(functional=("data",))
def nc_transpose(dst: Tile | None, data: Tile, engine: engine = engine.unknown, name: str = "", *,
                 mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """dst[F, P] = data[P, F]: on the Tensor engine (SBUF -> PSUM, up to 128 x 128) by default, or on
    the Vector engine with ``engine=nisa.vector_engine`` (SBUF/PSUM, at most 32 x 32)."""
    data = issue.tile(data, "data")
    ranges = indexing.restrict(mask)
    on_vector = _engine(engine) == "dve"
    launch = issue.begin()

    def emit(out, _accumulate):
        if on_vector:
            launch.core.vector_transpose(dst=out.hw_view(ranges), src=data.hw_view(ranges))
        else:                       # (a .view(dtype) tile: its bytes, read as its type)
            (d, k0), (s, k1) = (_views.engine_operand(name, t, ranges) for name, t in (("dst", out), ("src", data)))
            launch.core.nc_transpose(dst=d, src=s, **k0, **k1)

    shape = (math.prod(data.shape[1:]), data.shape[0])
    return _finish(dst, emit, shape, dtype or data.dtype, "sbuf" if on_vector else "psum")
