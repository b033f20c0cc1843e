"""The fast path of an indirect DMA's values: the moved view built from its per-axis coordinates.

The reference (`dma.DmaInstructions._copy_indirect` with `dma._shifted`) finds the elements an
indirect DMA moves as an access pattern does on the chip: every element's flat position in its
tensor, plus offset x stride, turned back into coordinates (`tensor.unravel`) — three int64 arrays
of the access's size, divided axis by axis, for each transfer (AWS's MoE kernels gather 128 token
rows of thousands of elements this way hundreds of times per block).

When the stride is a whole number of rows of one tensor axis (`indirect_dim` of the pattern: an
expert's block, a token's row) and every moved element stays inside that axis (no carry into the
axis before it), adding offset x stride to a flat position only adds offset x (stride / row size)
to that axis's coordinate. So the moved view's index is the view's own coordinates with that one
axis shifted: small broadcast arrays (the pattern's lines), the same elements in the same order,
the same `View` (shape, bounding box, partitions) as the reference builds. Anything else — a stride
that is not whole rows, a move past the axis (the reference then carries, raises
`OutOfBoundsError`, or skips rows under oob_mode.skip) — returns None and the reference runs.

Used only while `trnlab.config.fast()`; tests/test_fast_indirect.py checks views, values and
timelines against the reference.
"""
from __future__ import annotations

import math

import numpy as np

from ..tensor import View


def coordinates(view: View) -> tuple | None:
    """Each tensor axis's coordinate of each element of `view`, as arrays that broadcast to the
    view's shape (a slice's as one line along its view axis, an int as a scalar); None for an
    index this does not read (slices among index arrays, whose axes NumPy moves)."""
    shape = view.tensor.shape
    ndim = len(view.shape)
    index = view.index
    if index is None:                                   # the whole tensor
        index = (slice(None),) * len(shape)
        basic = True
    else:
        basic = view.basic
    if basic:
        coords, out_axis = [], 0
        for i, n in zip(index, shape):
            if type(i) is slice:
                line = [1] * ndim
                line[out_axis] = -1
                coords.append(np.arange(*i.indices(n), dtype=np.intp).reshape(line))
                out_axis += 1
            else:                                       # an int (the view keeps it as given: -1 is n - 1)
                coords.append(np.asarray(int(i) + n if int(i) < 0 else int(i), dtype=np.intp))
        return tuple(coords)
    if len(index) != len(shape) or not all(type(i) is np.ndarray for i in index):
        return None
    # an access pattern's arrays are broadcasts (zero strides): keep their lines only
    return tuple(i[tuple(0 if st == 0 else slice(None) for st in i.strides)].reshape(
        [1 if st == 0 else n for st, n in zip(i.strides, i.shape)]) if 0 in i.strides else i for i in index)


def shifted_view(moving: View, offsets: np.ndarray, stride: int, per_row: bool) -> View | None:
    """The view of `moving`'s tensor that the reference's `View(tensor, unravel(flat_positions +
    offsets x stride))` is (one offset, or with `per_row` one per row of the view's first axis),
    or None where that takes the reference's own path (see the module docstring)."""
    shape = moving.tensor.shape
    if stride <= 0 or not shape or moving.size == 0:
        return None
    axis = next((k for k in range(len(shape)) if stride % math.prod(shape[k + 1:]) == 0), None)
    if axis is None:
        return None
    coords = coordinates(moving)
    if coords is None:
        return None
    steps = (stride // math.prod(shape[axis + 1:])) * offsets.astype(np.intp)
    if per_row:
        shift = steps.reshape((-1,) + (1,) * (len(moving.shape) - 1))
    else:
        shift = steps[0]
    moved = coords[axis] + shift
    if moved.size and (moved.min() < 0 or moved.max() >= shape[axis]):
        return None                                     # past the axis: carry, error or skip (reference)
    coords = coords[:axis] + (moved,) + coords[axis + 1:]
    index = _basic_where_possible(coords, moving.shape)
    if index is None:
        index = tuple(np.broadcast_to(c, moving.shape) for c in coords)
    return View(moving.tensor, index)


def _basic_where_possible(coords: tuple, shape: tuple) -> tuple | None:
    """The same elements in the same order as the coordinate arrays `coords` (each broadcasting to the
    view's `shape`), indexed by ints and slices — and at most one index array, of the rows (view axis
    0), before every slice —, so NumPy reads and writes runs instead of one element per coordinate;
    None if the coordinates are not of that form."""
    index, axes, rows_array = [], [], False
    for c in coords:
        varying = [j for j, n in enumerate(c.shape) if n > 1]
        if not varying:
            index.append(int(c.reshape(-1)[0]))
            continue
        line = c.reshape(-1)
        step = int(line[1] - line[0])
        if len(varying) == 1 and step > 0 and np.array_equal(np.diff(line), np.full(line.size - 1, step)):
            index.append(slice(int(line[0]), int(line[-1]) + 1, step))
            axes.append(varying[0])
        elif varying == [0] and not axes and not rows_array:
            index.append(line)                          # an expert / token row per view row
            axes.append(0)
            rows_array = True
        else:
            return None
    # NumPy puts the one array's axis where the array is; every view axis, in order, exactly once
    if axes != list(range(len(shape))) or [shape[j] for j in axes] != [
            (i.stop - i.start - 1) // i.step + 1 if type(i) is slice else len(i) for i in index if type(i) is not int]:
        return None
    return tuple(index)
