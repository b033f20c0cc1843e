"""The engines' on-chip gathers and partition shuffles of NKI 0.7: nc_n_gather (along the free axes
of each partition), local_gather (across the 16 partitions of a GpSimd core) and nc_stream_shuffle
(across the 32 partitions of a quadrant).

Each checks its rules, computes its values in full mode (a copy: values move bit for bit), costs it
(`cost.selection_cycles`, ASSUMED: AWS publishes no figure) and issues it. Composed into
`core.NeuronCore`. Semantics from AWS's NKI 0.7 pages, cited as [nki.isa.<name>]
(awsdocs-neuron.readthedocs-hosted.com, v2.33.0).
"""
from __future__ import annotations

import numpy as np

from .engines import DVE, POOL
from .errors import DtypeError, IndexError_, PartitionLimitError, ShapeMismatchError, StartPartitionError
from .operands import _view
from .select import GPSIMD_CORE_PARTITIONS, need_dtype, same_partitions
from .tensor import View

QUADRANT = 32                  # nc_stream_shuffle moves data within 32-partition quadrants
SHUFFLE_KEEP = 255             # a shuffle_mask entry that leaves its dst partition unchanged


def _same_dtype(a: View, b: View, opcode: str, what: str) -> None:
    if a.tensor.dtype != b.tensor.dtype:
        raise DtypeError(f"data type: {opcode} {what}: {a.tensor.dtype} vs {b.tensor.dtype}; they must match "
                         f"[nki.isa.{opcode}]", value=(str(a.tensor.dtype), str(b.tensor.dtype)), limit="same dtype")


def _copy_rows(dst: View, rows: np.ndarray, written: np.ndarray, origin: str) -> None:
    """Full mode: write `rows` [P, F] (dst's dtype) where `written` [P] holds; dst's other partitions
    keep their values (and stay garbage where they were never written)."""
    old = np.asarray(dst.values()).reshape(rows.shape).copy()
    garbage = dst.undefined()
    old[written] = rows[written]
    dst.write(old.reshape(dst.shape))
    if garbage is not None:
        keep = garbage.reshape(rows.shape) & ~written[:, None]
        dst.set_poison(keep.reshape(dst.shape), origin)


class GatherInstructions:
    """NeuronCore's gather and shuffle instructions of NKI 0.7 (`core.NeuronCore`)."""

    def nc_n_gather(self, dst, data, indices) -> int:
        """dst[p, j] = data[p, indices[p, j]], data's free axes flattened, per partition (GpSimd
        engine, SBUF only) [nki.isa.nc_n_gather]: indices uint32 in [0, data's elements per
        partition); dst has data's dtype and as many elements per partition as indices."""
        dst, x, idx = _view(dst, "dst"), _view(data, "data"), _view(indices, "indices")
        for view, what in ((x, "data"), (idx, "indices"), (dst, "dst")):
            self._onchip(view, what, "nc_n_gather", psum_ok=False)
        same_partitions(idx, x, "nc_n_gather", "indices vs data")
        same_partitions(dst, x, "nc_n_gather", "dst vs data")
        need_dtype(idx, ("uint32",), "nc_n_gather", "indices")
        _same_dtype(dst, x, "nc_n_gather", "dst vs data")
        if dst.free_size != idx.free_size:
            raise ShapeMismatchError(f"shape mismatch: nc_n_gather dst has {dst.free_size} elements per partition, "
                                     f"indices {idx.free_size}; they must match [nki.isa.nc_n_gather]",
                                     value=dst.free_size, limit=idx.free_size)
        if self.full:
            x.check_initialized()
            idx.check_initialized()
            where = np.asarray(idx.values()).reshape(idx.partitions, -1).astype(np.int64)
            if where.size and (where.min() < 0 or where.max() >= x.free_size):
                raise IndexError_(f"index out of range: nc_n_gather index {int(where.max())} outside [0, "
                                  f"{x.free_size}) elements of a data partition [nki.isa.nc_n_gather]",
                                  value=int(where.max()), limit=x.free_size)
            rows = np.asarray(x.values()).reshape(x.partitions, -1)
            self._store(dst, np.take_along_axis(rows, where, axis=1))
        dur = self._cost_ns(POOL, "nc_n_gather", (idx, x), (dst,))
        return self._issue(POOL, "nc_n_gather", dur, (x, idx), dst)

    def local_gather(self, dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None) -> int:
        """Each GpSimd core (16 partitions) reads its 16 partitions of index, flattened partition first,
        and keeps the first num_valid_indices of them; then every one of its partitions gathers, from
        its own row of src_buffer (free axes flattened), num_elem_per_idx elements at each of those
        offsets: dst[q] = concat(src[q, i : i + num_elem_per_idx] for i in indices) (GpSimd engine, SBUF
        only) [nki.isa.local_gather] — the layout AWS's MoE token-generation kernel relies on (token t's
        expert affinities land on partition t). ASSUMED: an index counts elements (it is a "partition
        offset", the place within a partition); out of bounds, undefined on the chip, is an error here."""
        dst, src, idx = _view(dst, "dst"), _view(src_buffer, "src_buffer"), _view(index, "index")
        for view, what in ((src, "src_buffer"), (idx, "index"), (dst, "dst")):
            self._onchip(view, what, "local_gather", psum_ok=False)
            if view.partitions % GPSIMD_CORE_PARTITIONS:
                raise PartitionLimitError(f"partition limit: local_gather {what} has {view.partitions} partitions; "
                                          f"GpSimd cores own 16 each, so a multiple of 16 [nki.isa.local_gather]",
                                          value=view.partitions, limit="multiple of 16")
        same_partitions(idx, src, "local_gather", "index vs src_buffer")
        same_partitions(dst, src, "local_gather", "dst vs src_buffer")
        _same_dtype(dst, src, "local_gather", "dst vs src_buffer")
        per_core = GPSIMD_CORE_PARTITIONS * idx.free_size
        valid = per_core if num_valid_indices is None else int(num_valid_indices)
        if not 0 < valid <= per_core:
            raise ShapeMismatchError(f"shape mismatch: local_gather num_valid_indices {valid} must be in [1, "
                                     f"{per_core}] (the indices of a 16-partition slice) [nki.isa.local_gather]",
                                     value=valid, limit=per_core)
        count = valid * int(num_elem_per_idx)
        if dst.free_size != count:
            raise ShapeMismatchError(f"shape mismatch: local_gather gathers {valid} indices x {num_elem_per_idx} "
                                     f"elements = {count} per partition; dst has {dst.free_size}",
                                     value=dst.free_size, limit=count)
        if self.full:
            src.check_initialized()
            idx.check_initialized()
            rows = np.asarray(src.values()).reshape(src.partitions, -1)
            where = np.asarray(idx.values()).reshape(idx.partitions, -1).astype(np.int64)
            out = np.empty((dst.partitions, count), dtype=dst.tensor.dtype)
            for core in range(src.partitions // GPSIMD_CORE_PARTITIONS):
                part = slice(core * GPSIMD_CORE_PARTITIONS, (core + 1) * GPSIMD_CORE_PARTITIONS)
                starts = where[part].reshape(-1, order="F")[:valid]        # partition first
                picks = (starts[:, None] + np.arange(int(num_elem_per_idx))[None, :]).reshape(-1)
                if picks.size and (picks.min() < 0 or picks.max() >= rows.shape[1]):
                    raise IndexError_(f"index out of range: local_gather reads element {int(picks.max())} of a "
                                      f"partition of {rows.shape[1]} [nki.isa.local_gather: out of bounds is "
                                      f"undefined]", value=int(picks.max()), limit=rows.shape[1])
                out[part] = rows[part][:, picks]
            self._store(dst, out)
        dur = self._cost_ns(POOL, "local_gather", (idx, src), (dst,), elements=count)
        return self._issue(POOL, "local_gather", dur, (src, idx), dst)

    def nc_stream_shuffle(self, dst, src, shuffle_mask) -> int:
        """Within each quadrant of 32 partitions, dst partition i = src partition shuffle_mask[i]
        (255: dst partition i unchanged); the same mask in every quadrant; dst and src may start at
        different partitions and be the same tile; same dtype, same elements per partition (Vector
        engine, SBUF or PSUM) [nki.isa.nc_stream_shuffle]."""
        dst, src = _view(dst, "dst"), _view(src, "src")
        self._onchip(src, "src", "nc_stream_shuffle")
        self._onchip(dst, "dst", "nc_stream_shuffle")
        mask = [int(m) for m in shuffle_mask]
        if len(mask) != QUADRANT or any(not (0 <= m < QUADRANT or m == SHUFFLE_KEEP) for m in mask):
            raise ShapeMismatchError(f"shape mismatch: nc_stream_shuffle shuffle_mask must be 32 source partitions "
                                     f"in [0, 32) or 255 (keep), got {shuffle_mask!r} [nki.isa.nc_stream_shuffle]",
                                     value=len(mask), limit=QUADRANT)
        _same_dtype(dst, src, "nc_stream_shuffle", "dst vs src")
        if dst.free_size != src.free_size:
            raise ShapeMismatchError(f"shape mismatch: nc_stream_shuffle dst has {dst.free_size} elements per "
                                     f"partition, src {src.free_size} [nki.isa.nc_stream_shuffle]",
                                     value=dst.free_size, limit=src.free_size)
        if dst.part_start % QUADRANT or src.part_start % QUADRANT:
            raise StartPartitionError(f"start partition: nc_stream_shuffle dst starts at {dst.part_start}, src at "
                                      f"{src.part_start}; both start at a quadrant (0, 32, 64, 96)",
                                      value=(dst.part_start, src.part_start), limit=(0, 32, 64, 96))
        sources = [(p // QUADRANT) * QUADRANT + mask[p % QUADRANT] for p in range(dst.partitions)]
        read = [s for s, m in zip(sources, (mask[p % QUADRANT] for p in range(dst.partitions))) if m != SHUFFLE_KEEP]
        if read and max(read) >= src.partitions:
            raise IndexError_(f"index out of range: nc_stream_shuffle reads src partition {max(read)}; src has "
                              f"{src.partitions} [nki.isa.nc_stream_shuffle]", value=max(read), limit=src.partitions)
        if self.full:
            rows = np.asarray(src.values()).reshape(src.partitions, -1)
            bad = src.undefined()
            if bad is not None and bad.reshape(src.partitions, -1)[sorted(set(read))].any():
                src.check_initialized()
            written = np.array([mask[p % QUADRANT] != SHUFFLE_KEEP for p in range(dst.partitions)])
            moved = np.zeros((dst.partitions, dst.free_size), dtype=dst.tensor.dtype)
            for p in np.flatnonzero(written):
                moved[p] = rows[sources[p]]
            _copy_rows(dst, moved, written, f"nc_stream_shuffle kept never-written {dst.tensor.name!r}")
        dur = self._cost_ns(DVE, "nc_stream_shuffle", (src,), (dst,))
        return self._issue(DVE, "nc_stream_shuffle", dur, (src, dst), dst)
