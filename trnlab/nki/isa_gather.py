"""`nki.isa`'s on-chip gathers and partition shuffles of NKI 0.7: nc_n_gather (within each
partition), local_gather (within a GpSimd core's 16 partitions), nc_stream_shuffle (within a
32-partition quadrant).

Names, signatures and semantics are AWS's (awsdocs-neuron.readthedocs-hosted.com, NKI API
reference, v2.33.0 pages "nki.isa.<name>"); the hardware side, rules and costs are
`trnlab/hardware/gather.py`. Both call styles go through the one binder (`isa_binder.instruction`).
"""
from __future__ import annotations

from trnlab.nki import issue
from trnlab.nki.errors import NKIError
from trnlab.nki.isa_binder import Tile, _finish, instruction


@instruction(functional=("data", "indices"))
def nc_n_gather(dst: Tile | None, data: Tile, indices: Tile, name: str = "") -> Tile | None:
    """dst[p, j] = data[p, indices[p, j]] with data's free axes flattened, per partition (GpSimd engine,
    SBUF only; indices uint32) [nki.isa.nc_n_gather]. dst has data's dtype and indices' shape."""
    data, indices = issue.tile(data, "data"), issue.tile(indices, "indices")
    launch = issue.begin()

    def emit(out, _accumulate):
        launch.core.nc_n_gather(dst=out.hw_view(), data=data.hw_view(), indices=indices.hw_view())

    return _finish(dst, emit, indices.shape, data.dtype, "sbuf")


@instruction(functional=("src_buffer", "index", "num_elem_per_idx", "num_valid_indices"))
def local_gather(dst: Tile | None, src_buffer: Tile, index: Tile, num_elem_per_idx: int = 1,
                 num_valid_indices: int | None = None, name: str = "") -> Tile | None:
    """Each GpSimd core reads its 16 partitions of index partition first (the first num_valid_indices),
    and each of its partitions gathers num_elem_per_idx elements of its own src_buffer row at each of
    those offsets (GpSimd engine, SBUF only) [nki.isa.local_gather]. Functional style (beta 1) returns a
    [P, indices x elements] tile of src_buffer's dtype."""
    src, index_tile = issue.tile(src_buffer, "src_buffer"), issue.tile(index, "index")
    if int(num_elem_per_idx) < 1:
        raise NKIError(f"local_gather: num_elem_per_idx must be >= 1, got {num_elem_per_idx}")
    launch = issue.begin()

    def emit(out, _accumulate):
        launch.core.local_gather(dst=out.hw_view(), src_buffer=src.hw_view(), index=index_tile.hw_view(),
                                 num_elem_per_idx=int(num_elem_per_idx),
                                 num_valid_indices=None if num_valid_indices is None else int(num_valid_indices))

    free = 1
    for extent in index_tile.shape[1:]:
        free *= extent
    per_core = 16 * free if num_valid_indices is None else int(num_valid_indices)
    return _finish(dst, emit, (src.shape[0], per_core * int(num_elem_per_idx)), src.dtype, "sbuf")


@instruction(functional=None)
def nc_stream_shuffle(dst: Tile, src: Tile, shuffle_mask: list, name: str = "") -> None:
    """Within each 32-partition quadrant, dst partition i = src partition shuffle_mask[i] (255: dst
    partition i unchanged), the same mask in every quadrant; dst may be src (Vector engine)
    [nki.isa.nc_stream_shuffle]. E.g. ``shuffle_mask=[0] * 32`` broadcasts partition 0 to 32."""
    if dst is None:
        raise NKIError("nisa.nc_stream_shuffle writes into a tile you give: pass dst=")
    dst, src = issue.tile(dst, "dst"), issue.tile(src, "src")
    launch = issue.begin()
    launch.core.nc_stream_shuffle(dst=dst.hw_view(), src=src.hw_view(), shuffle_mask=[int(m) for m in shuffle_mask])
