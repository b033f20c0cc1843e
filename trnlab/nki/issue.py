"""Where a `nki.isa` / `nki.language` call meets the simulated core: the one seam both modules issue through.

The layering reads one way: ``language -> isa -> issue -> (tensor, launches, hardware)``. `begin()` is
what every instruction does first (issue the pending result, note the kernel line for the timeline);
`produce()` makes the pending tile of a functional call (``t = nl.exp(x)``: the instruction is issued
once the program shows where ``t`` goes, see tensor.py); `ranges()` turns a ``mask=`` (or the valid
rows of a masked earlier result) into the ranges the instruction runs on. When kernels are traced into
programs, this module is the one place that changes from "issue to a core" to "append to a program".
"""
from __future__ import annotations

import numpy as np

from trnlab.hardware import dtypes as hw_dtypes
from trnlab.nki import indexing, launches
from trnlab.nki.errors import NKIError, locate, site_note, user_site
from trnlab.nki.tensor import NkiTensor

Number = (int, float, np.integer, np.floating)


def begin() -> launches.Launch:
    """The running launch, with the pending result issued and the caller's kernel line noted."""
    launch = launches.current()
    if launch.pending is not None:
        launch.flush()
    launch.site = site = user_site(2)
    launch.core.note = site_note(site)   # shown with each instruction in the timeline / Chrome trace
    if launch.budget is not None:        # a runaway trace stops here, named (runaway.py)
        launch.budget.check(site)
    return launch


def tile(x, what: str) -> NkiTensor:
    """`x` if it is a tile, else an NKIError naming the parameter."""
    if not isinstance(x, NkiTensor):
        raise NKIError(f"{what} must be a tile (an NkiTensor), got {type(x).__name__}")
    return x


def is_number(x) -> bool:
    return isinstance(x, Number) and not isinstance(x, bool)


# stands for "rows lo..hi of the partition axis" in a ranges dict (see ranges)
PARTITION_ROWS = indexing.NO_ROWS
skipped = indexing.skipped


def ranges(mask, *operands) -> dict:
    """The ranges an instruction runs on: its mask, or else the valid rows of its operands.

    A functional result of a masked instruction (e.g. `nl.load(x[...], mask=rows < n)` for the last,
    partial tile) is only written on the rows the mask kept. Later unmasked element-wise calls on it
    run on those rows too, as if the mask had been repeated: the other partitions hold garbage on the
    hardware and are never stored, and the engines cost the same either way (they process all
    partitions in parallel).
    """
    if mask is not None:
        restricted = indexing.restrict(mask)
        if any(it.axis == 0 for it in restricted):
            return restricted
        # a mask on free axes only (bn_stats of the last, partial row tile, masked along F): the
        # rows still follow the operands' valid rows, as if the row mask had been repeated
        rows = _valid_rows(operands)
        if rows is not None and rows is not _PATTERN:
            restricted = dict(restricted)
            restricted[rows[0]] = rows[1]
        return restricted
    rows = _valid_rows(operands)
    if rows is _PATTERN:
        return {}
    return {} if rows is None else {rows[0]: rows[1]}


_PATTERN = object()   # an operand read through an access pattern: no row restriction applies


def _valid_rows(operands):
    """(key, (lo, hi)): the rows every operand has valid (a masked functional result's rows), keyed by
    the partition iterator that names them (PARTITION_ROWS for plain tiles); None if unrestricted."""
    valid, key = None, PARTITION_ROWS
    for x in operands:
        if isinstance(x, NkiTensor):
            if x._ap is not None:
                if x._valid is None or (key is not PARTITION_ROWS and key is not x._valid_iterator):
                    return _PATTERN
                key = x._valid_iterator
            rows = x._valid
            if rows is not None:
                valid = rows if valid is None else (max(valid[0], rows[0]), min(valid[1], rows[1]))
    return None if valid is None else (key, valid)


def produce(shape, dtype, buffer: str, emit, accumulates: bool = False, ranges: dict | None = None,
            storage: tuple | None = None) -> NkiTensor:
    """A pending tile: `emit(dst, accumulate)` issues its instruction once the program says where.

    `storage`: the shape in memory when it differs from `shape` (reductions keep size-1 axes)."""
    launch = launches.current()
    core, note, site = launch.core, launch.core.note, launch.site

    def emit_at_call_site(out, accumulate):
        if skipped(ranges):
            return                    # masked off entirely: no instruction
        core.note = note              # the instruction belongs to the line that asked for it
        try:
            emit(out, accumulate)
        except Exception as error:
            raise locate(error, site)

    emit_at_call_site.site = site
    emit_at_call_site.accumulates = accumulates
    result = NkiTensor.pending(tuple(storage or shape), hw_dtypes.as_dtype(dtype), buffer, emit_at_call_site,
                               launch)
    if storage is not None:
        result._storage = tuple(storage)
        result.shape = tuple(shape)
    if ranges:
        rows = [bounds for it, bounds in ranges.items() if it.axis == 0]
        if rows:
            result._valid = rows[0]
    return result


def dma_casts(core) -> bool:
    """Can this core's DMA engines convert dtypes on the way (NeuronCore-v3 / Trn2 and later)?"""
    return str(getattr(core.spec, "generation", "v3")).lower().lstrip("v") != "2"


def partition_position(t: NkiTensor) -> int:
    """Which axis of tile `t` is its partition axis (0 for ordinary tiles; 1 for a block of a
    ``(n, par_dim(128), f)`` tensor indexed whole)."""
    hw = t._hw
    pa = getattr(hw, "partition_axis", None)
    if pa is None or not pa:
        return 0
    if t._ap is not None:
        return 0
    if t._index is None:
        return pa
    return sum(1 for entry in t._index[:pa] if isinstance(entry, slice))


def blocks(t: NkiTensor) -> list[NkiTensor]:
    """The partition-first tiles of `t`: `t` itself, or one per block of a block tensor
    ``(n, par_dim(P), f)`` (AWS's compiler issues one instruction per logical tile)."""
    k = partition_position(t)
    if k == 0:
        return [t]
    out = [t]
    for _ in range(k):
        out = [sub[i] for sub in out for i in range(sub.shape[0])]
    return out
