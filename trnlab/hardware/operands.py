"""Operands: an instruction's Tensor or View argument as a checked View, and the facts of a view the
engines' rules and ports need (where it may start, which bytes of a partition it touches)."""
from __future__ import annotations

from .errors import FreedTensorError
from .tensor import Tensor, View


def _view(x, what: str) -> View:
    t = type(x)
    if t is View:
        v = x
    elif t is Tensor:
        v = x.full
    elif isinstance(x, View):           # a View read as another type (retype.TypedView)
        v = x
    else:
        raise TypeError(f"{what}: expected a Tensor or View, got {type(x).__name__}")
    if v.tensor.freed:
        raise FreedTensorError(f"use after free: {what} tensor {v.tensor.name!r} was freed",
                               value=v.tensor.name, limit="live tensor")
    return v

def start_partition_ok(start: int, count: int, partitions: int = 128) -> bool:
    """[ARCH-v2]: > 64 partitions start at 0; 33–64 at 0 or 64; <= 32 at 0, 32, 64 or 96."""
    quarter = max(partitions // 4, 1)
    if count > 2 * quarter:
        return start == 0
    if count > quarter:
        return start % (2 * quarter) == 0
    return start % quarter == 0

def _free_byte_range(v: View) -> tuple[int, int]:
    """[lo, hi) bytes, within one partition, that view `v` of an on-chip tensor touches."""
    t = v.tensor
    if v.box is None or not v.basic:
        return 0, t.partition_bytes
    free_axes = [a for a in range(len(t.shape)) if a != t.partition_axis]
    lo = hi = 0
    for a in free_axes:
        lo = lo * t.shape[a] + v.box[2 * a]
        hi = hi * t.shape[a] + v.box[2 * a + 1] - 1
    return lo * t.itemsize, (hi + 1) * t.itemsize

def _bytes_by_memory(views) -> tuple[int, int]:
    """(SBUF bytes, PSUM bytes) that on-chip `views` touch."""
    sbuf = psum = 0
    for v in views:
        if v.tensor.kind == "sbuf":
            sbuf += v.nbytes
        else:
            psum += v.nbytes
    return sbuf, psum
