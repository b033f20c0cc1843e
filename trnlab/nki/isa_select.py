"""`nki.isa`'s selection instructions of NKI 0.7: max8, nc_find_index8, nc_match_replace8 (the top-8
of a row and where it is), tensor_copy_predicated, range_select, nonzero_with_count, sequence_bounds.

Names, signatures and semantics are AWS's (awsdocs-neuron.readthedocs-hosted.com, NKI API
reference, v2.33.0 pages "nki.isa.<name>"); the hardware side, rules and costs are
`trnlab/hardware/select.py`. Both call styles go through the one binder (`isa_binder.instruction`).
"""
from __future__ import annotations

from trnlab.hardware import dtypes as hw_dtypes
from trnlab.nki import issue
from trnlab.nki import tensor_indirection as _ti
from trnlab.nki.errors import NKIError
from trnlab.nki.isa_binder import Dtype, Mask, Op, Operand, Tile, _finish, instruction, op_name, reduce_cmd
from trnlab.nki.isa_vector import _scalar_operand
from trnlab.nki.tensor import NkiTensor


def _needs_dst(dst, name: str):
    if dst is None:
        raise NKIError(f"nisa.{name} writes into a tile you give: pass dst= (it has no functional form)")
    return issue.tile(dst, "dst")


def _command(value) -> str:
    return value.name if isinstance(value, reduce_cmd) else (value or "idle")


@instruction(functional=("src",))
def max8(dst: Tile | None, src: Tile, name: str = "", *, mask: Mask | None = None,
         dtype: Dtype | None = None) -> Tile | None:
    """dst[P, 8] = the 8 largest values of each partition of src, in descending order (Vector engine)
    [nki.isa.max8]. Functional style: ``vals = nisa.max8(src=x)`` returns a [P, 8] tile of src's dtype."""
    src = issue.tile(src, "src")
    ranges = issue.ranges(mask, src)
    launch = issue.begin()

    def emit(out, _accumulate):
        launch.core.max8(dst=out.hw_view(ranges), src=src.hw_view(ranges))

    return _finish(dst, emit, (src.shape[0], 8), dtype or src.dtype, "sbuf", ranges)


@instruction(functional=("data", "vals"))
def nc_find_index8(dst: Tile | None, data: Tile, vals: Tile, name: str = "", *, mask: Mask | None = None,
                   dtype: Dtype | None = None) -> Tile | None:
    """dst[P, 8] (uint16 or uint32) = per partition, the index of the first occurrence in data of each of
    the 8 vals (Vector engine) [nki.isa.nc_find_index8]; with max8 it is an arg-max of the top 8.
    Functional style returns a uint32 tile unless dtype says uint16."""
    data, vals = issue.tile(data, "data"), issue.tile(vals, "vals")
    ranges = issue.ranges(mask, data, vals)
    launch = issue.begin()

    def emit(out, _accumulate):
        launch.core.nc_find_index8(dst=out.hw_view(ranges), data=data.hw_view(ranges), vals=vals.hw_view(ranges))

    return _finish(dst, emit, (data.shape[0], 8), dtype or hw_dtypes.uint32, "sbuf", ranges)


@instruction(functional=("data", "vals", "imm"))
def nc_match_replace8(dst: Tile | None, data: Tile, vals: Tile, imm: float, dst_idx: Tile | None = None,
                      name: str = "", *, mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """dst = data with the first occurrence of each of the 8 vals per partition replaced by imm; dst_idx
    [P, 8], if given, receives where they were (Vector engine) [nki.isa.nc_match_replace8]. A top-k
    loop runs max8 then nc_match_replace8(imm=-inf) on the same tile (dst = data)."""
    data, vals = issue.tile(data, "data"), issue.tile(vals, "vals")
    index = None if dst_idx is None else issue.tile(dst_idx, "dst_idx")
    ranges = issue.ranges(mask, data, vals)
    launch = issue.begin()

    def emit(out, _accumulate):
        launch.core.nc_match_replace8(dst=out.hw_view(ranges), data=data.hw_view(ranges),
                                      vals=vals.hw_view(ranges), imm=float(imm),
                                      dst_idx=None if index is None else index.hw_view(ranges))

    return _finish(dst, emit, data.shape, dtype or data.dtype, "sbuf", ranges)


@instruction(functional=None)
def tensor_copy_predicated(dst: Tile, src: Operand, predicate: Tile, reverse_pred: bool = False,
                           name: str = "") -> None:
    """dst = src where predicate is nonzero (zero with reverse_pred), dst unchanged elsewhere; src a tile
    or a number (Vector engine) [nki.isa.tensor_copy_predicated]."""
    dst = _needs_dst(dst, "tensor_copy_predicated")
    predicate = issue.tile(predicate, "predicate")
    launch = issue.begin()
    if _ti.uses(dst, predicate, src):            # Tensor Indirection: the offsets are read when it runs
        return _ti.emit(launch, "tensor_copy_predicated", dst, predicate, None, {"reverse_pred": bool(reverse_pred)},
                        src=src)
    source = src.hw_view() if isinstance(src, NkiTensor) else src
    launch.core.tensor_copy_predicated(dst=dst.hw_view(), src=source, predicate=predicate.hw_view(),
                                       reverse_pred=bool(reverse_pred))


@instruction(functional=("on_true_tile", "comp_op0", "comp_op1", "bound0", "bound1"))
def range_select(dst: Tile | None, on_true_tile: Tile, comp_op0: Op, comp_op1: Op, bound0: Operand,
                 bound1: Operand, reduce_cmd: reduce_cmd = reduce_cmd.idle, reduce_res: Tile | None = None,
                 reduce_op: Op = "maximum", range_start: float = 0.0, on_false_value: float = 0.0,
                 name: str = "", *, mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """dst[p, j] = on_true_tile[p, j] where comp_op0(j + range_start, bound0[p]) and comp_op1(j +
    range_start, bound1[p]) hold, else on_false_value; reduce_op (default max) of the result along the
    free axes into the Vector engine's registers / reduce_res under reduce_cmd (Vector engine,
    NeuronCore-v3+) [nki.isa.range_select]. E.g. a causal or sliding-window mask with its row max."""
    on_true = issue.tile(on_true_tile, "on_true_tile")
    result = None if reduce_res is None else issue.tile(reduce_res, "reduce_res")
    ranges = issue.ranges(mask, on_true)
    launch = issue.begin()

    def emit(out, _accumulate):
        launch.core.range_select(dst=out.hw_view(ranges), on_true_tile=on_true.hw_view(ranges),
                                 comp_op0=op_name(comp_op0), comp_op1=op_name(comp_op1),
                                 bound0=_scalar_operand(bound0, ranges), bound1=_scalar_operand(bound1, ranges),
                                 reduce_cmd=_command(reduce_cmd),
                                 reduce_res=None if result is None else result.hw_view(ranges),
                                 reduce_op=op_name(reduce_op), range_start=float(range_start),
                                 on_false_value=float(on_false_value))

    return _finish(dst, emit, on_true.shape, dtype or on_true.dtype, "sbuf", ranges)


@instruction(functional=None)
def nonzero_with_count(dst: Tile, src: Tile, index_offset: int = 0, padding_val: int = -1) -> None:
    """On partitions 0, 16, ..., 112: dst[p] = the positions (+ index_offset) of src[p]'s nonzero
    elements, then padding_val, then their count (one more element than src); other partitions of dst
    unchanged (GpSimd engine, NeuronCore-v3+) [nki.isa.nonzero_with_count]."""
    dst = _needs_dst(dst, "nonzero_with_count")
    src = issue.tile(src, "src")
    launch = issue.begin()
    launch.core.nonzero_with_count(dst=dst.hw_view(), src=src.hw_view(), index_offset=int(index_offset),
                                   padding_val=int(padding_val))


@instruction(functional=("segment_ids",))
def sequence_bounds(dst: Tile | None, segment_ids: Tile, name: str = "", *,
                    dtype: Dtype | None = None) -> Tile | None:
    """dst[1, 2, n] = per element of segment_ids[1, n] the start and end of its run of equal ids;
    padding (id 0) gets start n, end -1 (GpSimd engine) [nki.isa.sequence_bounds]. Functional style
    (beta 1): ``bounds = nisa.sequence_bounds(segment_ids=ids)``."""
    ids = issue.tile(segment_ids, "segment_ids")
    launch = issue.begin()

    def emit(out, _accumulate):
        launch.core.sequence_bounds(dst=out.hw_view(), segment_ids=ids.hw_view())

    n = 1
    for extent in ids.shape[1:]:
        n *= extent
    return _finish(dst, emit, (1, 2, n), dtype or ids.dtype, "sbuf")


@instruction(functional=None)
def topk(val_dst: Tile, idx_dst: Tile, src: Tile, n: int, sorted: bool = False, name: str = "") -> None:
    """Per group of 16 partitions, read in a snake layout (element e at partition e % 16, position
    e // 16; the first n active): the k largest (k = val_dst's elements per partition, bfloat16) into
    val_dst and their snake indices (uint32) into idx_dst, in the same snake layout (GpSimd engine)
    [nki.isa.topk]. Eight independent problems in one 128-partition instruction."""
    values = _needs_dst(val_dst, "topk")
    indices = issue.tile(idx_dst, "idx_dst")
    src = issue.tile(src, "src")
    launch = issue.begin()
    launch.core.topk(dst=values.hw_view(), dst_idx=indices.hw_view(), src=src.hw_view(), n=int(n),
                     sorted=bool(sorted))
