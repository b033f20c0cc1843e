"""The DMA instructions: dma_copy, dma_gather, dma_copy_cast, dma_transpose.

Each checks its rules (PSUM is not reachable by DMA; no conversion on NeuronCore-v2), copies the
values in full mode, costs the transfer (`cost.py`: descriptors, fixed latency, DMA engines, HBM)
and issues it on a DMA queue (`engines.EngineTimes.dma`: the queue named or the one free first,
the shared DMA engines and HBM channel). Composed into `core.NeuronCore`.
"""
from __future__ import annotations

import numpy as np

from .. import config
from . import cost, dtypes
from .fast import indirect as _fast_indirect
from .errors import DtypeError, EngineError, MemoryPlacementError, OutOfBoundsError, PSUMToHBMError, ShapeMismatchError
from .operands import _view
from .dependencies import (record_reads as _record_reads, record_write as _record_write,
                           wait_reads as _wait_reads, wait_write as _wait_write)
from .system import register_value
from .tensor import View, unravel



def _check_dma_endpoints(src, dst) -> None:
    """DMA moves data between HBM and SBUF; it does not reach PSUM (results go PSUM -> SBUF first)."""
    sk, dk = src.tensor.kind, dst.tensor.kind
    if sk == "psum" or dk == "psum":
        cls = PSUMToHBMError if "hbm" in (sk, dk) else MemoryPlacementError
        raise cls(f"PSUM to HBM: dma_copy {sk.upper()} -> {dk.upper()} is refused; DMA does "
                  f"not reach PSUM. Copy PSUM -> SBUF with tensor_copy, then SBUF -> HBM",
                  value=(sk, dk), limit="SBUF/HBM endpoints")

def _shifted(view: View, offsets: np.ndarray, stride: int, per_row: bool, skip: bool):
    """(the flat positions of `view` moved by offsets x stride elements — one offset, or one per row —,
    the rows kept or None). Out-of-bounds elements raise `OutOfBoundsError`, or (`skip`) mark their rows
    dropped (their positions then clipped into the tensor, unused)."""
    t = view.tensor
    flat = view.flat_positions()
    if per_row:
        flat = flat + (offsets * stride).reshape((-1,) + (1,) * (flat.ndim - 1))
    else:
        flat = flat + int(offsets[0]) * stride
    size = int(np.prod(t.shape))
    bad = (flat < 0) | (flat >= size)
    keep = None
    if bad.any():
        if not skip:
            first = int(flat[bad].flat[0])
            raise OutOfBoundsError(f"out-of-bounds index: an indirect DMA reaches element {first} of "
                                   f"{t.name!r} {t.shape} ({size} elements) at run time", value=first, limit=size)
        keep = ~bad.reshape(bad.shape[0], -1).any(axis=1) if bad.ndim else np.array([False])
        flat = np.clip(flat, 0, size - 1)
    return flat, keep


# nki.isa.dma_transpose: "For 2-d input tile, the permutation will be [1, 0]; for 3-d [2, 1, 0]; for 4-d
# [3, 1, 2, 0]" (the only axes its page lists)
DMA_TRANSPOSE_AXES = ((1, 0), (2, 1, 0), (3, 1, 2, 0))


class DmaInstructions:
    """NeuronCore's DMA instructions (the core's machinery: `core.NeuronCore`)."""

    def dma_copy(self, dst, src, queue: int | None = None) -> int:
        """Copy src to dst with a DMA queue (HBM <-> SBUF, SBUF <-> SBUF, HBM <-> HBM).

        PSUM is not reachable by DMA: results go PSUM -> SBUF (tensor_copy) -> HBM [MM].
        No dtype conversion (cast on an engine first). ``queue``: a DMA queue number, or None for
        the queue that can start the transfer earliest (the one free first; ties: lowest number).
        Each queue runs its transfers in order; the shared DMA engines and HBM channel give each
        transfer the earliest free slot at or after its start (not the issue order).
        """
        dst = _view(dst, "dst")
        src = _view(src, "src")
        _check_dma_endpoints(src, dst)
        if src.size != dst.size or (src.shape != dst.shape and
                                    tuple(s for s in src.shape if s != 1)
                                    != tuple(s for s in dst.shape if s != 1)):
            raise ShapeMismatchError(f"shape mismatch: dma_copy src {src.shape} -> dst {dst.shape}",
                                     value=src.shape, limit=dst.shape)
        if src.tensor.dtype != dst.tensor.dtype:
            raise DtypeError(f"data type: dma_copy does not convert: src "
                             f"{dtypes.name(src.tensor.dtype)}, dst {dtypes.name(dst.tensor.dtype)}"
                             f"; cast with tensor_copy on an engine", value=src.tensor.dtype,
                             limit=dst.tensor.dtype)
        if self.full:
            self._dma_copy_values(dst, src)
        return self._schedule_dma(dst, src, (src,), src.nbytes, queue, "dma_copy")

    def _dma_copy_values(self, dst: View, src: View) -> None:
        """Full mode: dst = src's values, unchanged (a DMA does not convert)."""
        garbage = _garbage_moved(dst, src)
        dst.write(np.reshape(src.values(), dst.shape))
        self._poison_from(dst, garbage, src)

    def _dma_cast_values(self, dst: View, src: View) -> None:
        """Full mode: dst = src's values converted to dst's dtype, as a DMA that casts (dma_copy_cast)."""
        garbage = _garbage_moved(dst, src)
        values = np.asarray(src.values(), dtype=np.float32) if dtypes.is_float(src.tensor.dtype) \
            else np.asarray(src.values())
        dst.write(np.reshape(values, dst.shape).astype(dst.tensor.dtype))
        self._poison_from(dst, garbage, src)

    def dma_gather(self, dst, src, indices, queue: int | None = None) -> int:
        """Indirect DMA: dst[r, ...] = src[indices[r], ...] for the R rows of dst (a gather).

        `indices` is an integer [R, 1] view in SBUF, read at run time (NKI's ``nl.load(table[ids_tile,
        i_f])``; the DMA needs the index values on chip first). An index outside src's rows raises
        `OutOfBoundsError` (NKI's default oob_mode.error). Each row is one DMA descriptor of one
        row's bytes; the R rows are spread over the DMA engines like a dense transfer of R rows,
        and the transfer waits for the whole of src (its rows are known only at run time)."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        idx = _view(indices, "indices")
        if src.tensor.kind != "hbm" or dst.tensor.kind != "sbuf":
            raise MemoryPlacementError(
                f"operand memory: dma_gather reads rows of an HBM tensor into SBUF, got "
                f"{src.tensor.kind.upper()} -> {dst.tensor.kind.upper()}",
                value=(src.tensor.kind, dst.tensor.kind), limit=("hbm", "sbuf"))
        self._onchip(idx, "indices", "dma_gather", psum_ok=False)
        if dtypes.is_float(idx.tensor.dtype):
            raise DtypeError(f"data type: dma_gather indices must be integers, got "
                             f"{dtypes.name(idx.tensor.dtype)}", value=idx.tensor.dtype, limit="int32")
        R = dst.shape[0] if dst.shape else 1
        if idx.size != R or tuple(dst.shape[1:]) != tuple(src.shape[1:]):
            raise ShapeMismatchError(
                f"shape mismatch: dma_gather of {idx.size} indices from src {src.shape} into dst "
                f"{dst.shape}; dst must be [{idx.size}, {', '.join(map(str, src.shape[1:]))}]",
                value=dst.shape, limit=(idx.size,) + tuple(src.shape[1:]))
        if dst.tensor.dtype != src.tensor.dtype:
            raise DtypeError(f"data type: dma_gather does not convert: src "
                             f"{dtypes.name(src.tensor.dtype)}, dst {dtypes.name(dst.tensor.dtype)}",
                             value=src.tensor.dtype, limit=dst.tensor.dtype)
        if self.full:
            idx.check_initialized()
            rows = np.asarray(idx.values()).reshape(-1).astype(np.int64)
            n = src.shape[0]
            bad = rows[(rows < 0) | (rows >= n)]
            if bad.size:
                raise OutOfBoundsError(f"out-of-bounds index: dma_gather row {int(bad[0])} of a source "
                                       f"with {n} rows", value=int(bad[0]), limit=n)
            garbage = _garbage_moved(dst, src)
            dst.write(np.asarray(src.values())[rows].reshape(dst.shape))
            self._poison_from(dst, None if garbage is None else garbage[rows], src)
        whole = src.tensor.full                    # which rows is known only at run time
        nbytes = dst.nbytes
        return self._schedule_dma(dst, whole, (whole, idx), nbytes, queue, "dma_gather")

    def dma_copy_indirect(self, dst, src, offsets, stride: int, per_row: bool = False, side: str = "src",
                          skip_out_of_bounds: bool = False, queue: int | None = None) -> int:
        """dma_copy one of whose ends (`side`: "src" or "dst") starts further on by an offset read at
        run time from the SBUF tile `offsets` (integers), in units of `stride` elements: NKI's access
        pattern with ``scalar_offset=`` (one value moves the whole access) or ``vector_offset=``
        (`per_row`: row r of the access moves by offsets[r]), both on ``indirect_dim`` (whose stride
        `stride` is) [nki-aps, NKI Access Patterns]. The view given for that side is its access
        pattern with the offset 0. An element outside the tensor raises `OutOfBoundsError`
        (oob_mode.error), or with `skip_out_of_bounds` its row is not moved (oob_mode.skip). Which
        elements move is known only at run time: the transfer waits for (or, writing, claims) the
        whole tensor on that side; it is costed as the access pattern it is (descriptors per run). Between
        dtypes it converts as `dma_copy_cast` does (NeuronCore-v3/-v4; refused on NeuronCore-v2)."""
        return self._copy_indirect(dst, src, _view(offsets, "offsets"), None, stride, per_row, side,
                                   skip_out_of_bounds, queue, "dma_copy_indirect")

    def dma_copy_register_offset(self, dst, src, register: int, stride: int, side: str = "src",
                                 skip_out_of_bounds: bool = False, queue: int | None = None) -> int:
        """dma_copy_indirect whose scalar offset is a register's value when the program runs (NKI's
        ``tensor.ap(..., scalar_offset=register)``, e.g. the rank a ring collective's data came from:
        nki.collectives.collective_permute_implicit_current_processing_rank_id). A register instruction
        (`system.py`): kept in program order with the instructions that set registers (STATEFUL_OPCODES)."""
        return self._copy_indirect(dst, src, None, int(register), stride, False, side, skip_out_of_bounds, queue,
                                   "dma_copy_register_offset")

    def _copy_indirect(self, dst, src, idx, register, stride, per_row, side, skip_out_of_bounds, queue, opcode):
        """The two indirect copies: offsets from the SBUF view `idx`, or (idx None) from `register`."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        _check_dma_endpoints(src, dst)
        if side not in ("src", "dst"):
            raise ValueError(f"dma_copy_indirect: side is 'src' or 'dst', got {side!r}")
        if idx is None:
            pass                                  # the offset is a register's (dma_copy_register_offset)
        elif idx.tensor.kind != "sbuf":             # (read in any order: [128, N] offsets column by column)
            raise MemoryPlacementError(f"operand memory: dma_copy_indirect offsets {idx.tensor.name!r} are in "
                                       f"{idx.tensor.kind.upper()}; the DMA reads them from SBUF",
                                       value=idx.tensor.kind, limit="sbuf")
        elif dtypes.is_float(idx.tensor.dtype):
            raise DtypeError(f"data type: an access pattern's scalar_offset / vector_offset must be integers, "
                             f"got {dtypes.name(idx.tensor.dtype)}", value=idx.tensor.dtype, limit="int32")
        if src.size != dst.size:
            raise ShapeMismatchError(f"shape mismatch: dma_copy src {src.shape} -> dst {dst.shape}",
                                     value=src.shape, limit=dst.shape)
        cast = src.tensor.dtype != dst.tensor.dtype
        if cast and str(self.spec.generation).lower().lstrip("v") == "2":
            raise DtypeError(f"data type: an indirect dma_copy does not convert on NeuronCore-v2 ({self.spec.name}): "
                             f"src {dtypes.name(src.tensor.dtype)}, dst {dtypes.name(dst.tensor.dtype)}; cast with "
                             f"tensor_copy on an engine (DMA casts from NeuronCore-v3 / Trn2 on)",
                             value=src.tensor.dtype, limit=dst.tensor.dtype)
        moving = src if side == "src" else dst
        rows = moving.shape[0] if moving.shape else 1
        if per_row and idx is not None and idx.size != rows:
            raise ShapeMismatchError(f"shape mismatch: vector_offset has {idx.size} offsets for an access of "
                                     f"{rows} rows {moving.shape}", value=idx.size, limit=rows)
        if self.full:
            if idx is None:
                registers = self._system_state()["registers"]
                if register not in registers:
                    from .system import RegisterError
                    raise RegisterError(f"register: an indirect dma_copy's scalar_offset is register {register}, "
                                        f"which holds no value", value=register, limit="an initialised register")
                offsets = np.array([register_value(self._system_state(), register)], np.int64)
            else:
                idx.check_initialized()
                offsets = np.asarray(idx.values()).reshape(-1).astype(np.int64)
            fixed = dst if side == "src" else src
            # fast path: the moved view from the view's coordinates, one axis shifted (fast/indirect.py)
            shifted = _fast_indirect.shifted_view(moving, offsets, int(stride), per_row) if config.fast() else None
            if shifted is not None:
                flat, keep = None, None
                pairs = [(shifted, fixed)]
            else:                                 # the reference: every element's flat position, moved
                flat, keep = _shifted(moving, offsets, int(stride), per_row, skip_out_of_bounds)
                pairs = [(View(moving.tensor, unravel(flat, moving.tensor.shape)), fixed)]
            if keep is not None:                  # oob_mode.skip: only the rows inside the tensor move, one by one
                fixed_flat = fixed.flat_positions().reshape(len(keep), -1)
                flat = flat.reshape(len(keep), -1)
                pairs = [(View(moving.tensor, unravel(flat[r], moving.tensor.shape)),
                          View(fixed.tensor, unravel(fixed_flat[r], fixed.tensor.shape)))
                         for r in np.flatnonzero(keep)]
            copy = self._dma_cast_values if cast else self._dma_copy_values
            for shifted, other in pairs:
                if side == "src":
                    copy(other, shifted)
                else:
                    copy(shifted, other)
        whole = moving.tensor.full
        nbytes = max(src.nbytes, dst.nbytes)       # a cast: costed as dma_copy_cast, the larger byte count
        reads = () if idx is None else (idx,)
        if side == "src":
            return self._schedule_dma(dst, src, (whole,) + reads, nbytes, queue, opcode)
        # the write claims the whole tensor (where it lands is known at run time) but moves the access
        # pattern: costed as the unshifted dst view, not as a write of the whole tensor
        return self._schedule_dma(whole, src, (src,) + reads, nbytes, queue, opcode, costed_dst=dst)

    def dma_copy_cast(self, dst, src, queue: int | None = None) -> int:
        """dma_copy that converts src's dtype to dst's on the way, which NeuronCore-v3/-v4 DMA engines
        can do (Trn2/Trn3: nisa.dma_copy with dst and src of different dtypes; ⚠ stated in AWS's
        Trainium2 architecture guide's DMA section, not on the dma_copy page). NeuronCore-v2 (Trn1)
        refuses it: cast on an engine there. Costed as a copy of the larger of the two byte counts."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        if str(self.spec.generation).lower().lstrip("v") == "2":
            raise DtypeError(f"data type: dma_copy does not convert on NeuronCore-v2 ({self.spec.name}): src "
                             f"{dtypes.name(src.tensor.dtype)}, dst {dtypes.name(dst.tensor.dtype)}; cast with "
                             f"tensor_copy on an engine (DMA casts from NeuronCore-v3 / Trn2 on)",
                             value=src.tensor.dtype, limit=dst.tensor.dtype)
        _check_dma_endpoints(src, dst)
        if src.size != dst.size:
            raise ShapeMismatchError(f"shape mismatch: dma_copy src {src.shape} -> dst {dst.shape}",
                                     value=src.shape, limit=dst.shape)
        if self.full:
            garbage = _garbage_moved(dst, src)
            values = np.asarray(src.values(), dtype=np.float32) if dtypes.is_float(src.tensor.dtype) \
                else np.asarray(src.values())
            dst.write(np.reshape(values, dst.shape).astype(dst.tensor.dtype))
            self._poison_from(dst, garbage, src)
        return self._schedule_dma(dst, src, (src,), max(src.nbytes, dst.nbytes), queue, "dma_copy")

    def dma_copy_bytes(self, dst, src, queue: int | None = None) -> int:
        """dma_copy of src's bytes into dst unchanged, the two of different element types and sizes: an
        on-chip tile read as another type (NKI's ``sbuf_tile.ap(pattern, dtype=...)``, NKI Access
        Patterns). The bytes of src's elements in order become dst's elements in order (little-endian,
        as NumPy's ``.view``); both ends hold the same number of bytes. Costed as a copy of those bytes."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        _check_dma_endpoints(src, dst)
        if src.nbytes != dst.nbytes:
            raise ShapeMismatchError(f"shape mismatch: dma_copy of {src.nbytes} bytes ({src.shape} "
                                     f"{dtypes.name(src.tensor.dtype)}) into {dst.nbytes} bytes ({dst.shape} "
                                     f"{dtypes.name(dst.tensor.dtype)})", value=src.nbytes, limit=dst.nbytes)
        if self.full:
            garbage = _garbage_moved(dst, src)
            raw = np.ascontiguousarray(np.asarray(src.values()).astype(src.tensor.dtype, copy=False))
            dst.write(raw.view(np.uint8).view(dst.tensor.dtype).reshape(dst.shape))
            if garbage is not None:               # an element's garbage spreads to the bytes it held
                per_byte = np.repeat(np.reshape(garbage, -1), src.tensor.itemsize)
                self._poison_from(dst, per_byte.reshape(-1, dst.tensor.itemsize).any(axis=1), src)
        return self._schedule_dma(dst, src, (src,), src.nbytes, queue, "dma_copy")

    def dma_transpose(self, dst, src, queue: int | None = None, axes: tuple | None = None) -> int:
        """dst[B, A] = src[A, B].T moved by a DMA (nisa.dma_transpose, nl.load_transpose2d): src in
        HBM or SBUF, dst in SBUF (or HBM). From NeuronCore-v3 on the DMA engines transpose in
        hardware into SBUF and may convert the dtype on the way; on NeuronCore-v2 it is a strided
        DMA of the same dtype (`cost.dma_transpose_cost`). ``axes``: the permutations AWS's
        dma_transpose page lists for 3-D and 4-D sources, (2, 1, 0) and (3, 1, 2, 0) (dst axis i is
        src axis axes[i]); None for 2-D."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        sk, dk = src.tensor.kind, dst.tensor.kind
        if sk == "psum" or dk == "psum":
            raise MemoryPlacementError(f"operand memory: dma_transpose {sk.upper()} -> {dk.upper()} is "
                                       f"refused; DMA does not reach PSUM", value=(sk, dk),
                                       limit="SBUF/HBM endpoints")
        perm = (1, 0) if axes is None else tuple(int(a) for a in axes)
        if perm not in DMA_TRANSPOSE_AXES or len(src.shape) != len(perm) \
                or tuple(dst.shape) != tuple(src.shape[a] for a in perm):
            raise ShapeMismatchError(f"shape mismatch: dma_transpose of src {src.shape} with axes {perm} into dst "
                                     f"{dst.shape}; the transposes are {', '.join(map(str, DMA_TRANSPOSE_AXES))} "
                                     f"(dst axis i = src axis axes[i])", value=dst.shape, limit=DMA_TRANSPOSE_AXES)
        if src.tensor.dtype != dst.tensor.dtype and str(self.spec.generation).lower().lstrip("v") == "2":
            raise DtypeError(f"data type: dma_transpose does not convert on NeuronCore-v2 ({self.spec.name}): "
                             f"src {dtypes.name(src.tensor.dtype)}, dst {dtypes.name(dst.tensor.dtype)}",
                             value=src.tensor.dtype, limit=dst.tensor.dtype)
        if self.full:
            garbage = _garbage_moved(dst, src)
            values = np.asarray(src.values())
            if src.tensor.dtype != dst.tensor.dtype and dtypes.is_float(src.tensor.dtype):
                values = values.astype(np.float32)
            dst.write(np.ascontiguousarray(np.transpose(values.reshape(src.shape), perm)).astype(dst.tensor.dtype))
            self._poison_from(dst, None if garbage is None else np.transpose(garbage.reshape(src.shape), perm), src)
        return self._schedule_dma(dst, src, (src,), max(src.nbytes, dst.nbytes), queue, "dma_transpose")

    def _schedule_dma(self, dst, src, reads, nbytes, queue, opcode, costed_dst=None) -> int:
        """Schedule a DMA of `nbytes` from src to dst (after `reads` are ready) on a queue; `costed_dst`:
        the view the transfer is costed as writing, if not all of `dst` (an indirect write)."""
        sk, dk = src.tensor.kind, dst.tensor.kind
        ready, waited = _wait_reads(reads, 0.0, -1)
        ready, waited, _ = _wait_write(dst, ready, waited)
        c = self._dma_cost(dst if costed_dst is None else costed_dst, src, nbytes, opcode)
        hbm = c.hbm_bytes
        eid, start, end, waited = self.engine_times.dma(self._dma_queue(queue), ready, waited, c.fixed_ns,
                                                 c.cycles, c.dma_engine_ns, hbm)
        idx = len(self._records)
        _record_reads(reads, end, idx)
        _record_write(dst, end, idx)
        sbuf = (nbytes if sk == "sbuf" else 0) + (nbytes if dk == "sbuf" else 0)
        return self._append(eid, opcode, start, end, end, 0.0, hbm, sbuf, 0, waited)

    def _dma_queue(self, queue) -> int | None:
        """The DMA queue a kernel named (checked), or None: the queue free first."""
        if queue is None:
            return None
        nq = self.spec.dma_queues
        if not 0 <= int(queue) < nq:
            raise EngineError(f"engine: DMA queue {queue} does not exist; the core has {nq}",
                              value=queue, limit=nq)
        return int(queue)

    def _dma_cost(self, dst: View, src: View, nbytes: int, opcode: str) -> "cost.Cost":
        """The pure cost model's answer for a DMA; it depends on these numbers only, so it is
        remembered per (opcode, bytes, rows, contiguous chunk, touches HBM, dst free size, itemsize,
        the HBM side's run when it is gathered from separate runs)."""
        sk, dk = src.tensor.kind, dst.tensor.kind
        run_src, run_dst = cost.contiguous_bytes(src), cost.contiguous_bytes(dst)
        chunk = nbytes // max(dst.shape[0] if dst.shape else 1, 1) if opcode == "dma_gather" else \
            min(run_src, run_dst)
        rows = dst.partitions if dk == "sbuf" else (src.partitions if sk == "sbuf" else
                                                    (dst.shape[0] if dst.shape else 1))
        gathered = min([r for k, r, v in ((sk, run_src, src), (dk, run_dst, dst)) if k == "hbm" and r < v.nbytes],
                       default=0)
        key = (opcode, nbytes, rows, chunk, "hbm" in (sk, dk), dst.free_size, dst.tensor.itemsize, gathered)
        c = self._costs.get(key)
        if c is None:
            c = self._costs[key] = cost.cost(cost.Instruction(
                opcode, "dma", (cost.operand(src, True),), (cost.operand(dst, True),)), self.spec)
        return c


SPILL_SLOT = "spill "       # the name of an HBM slot the allocator spills a tile to (spill.py)


def _garbage_moved(dst: View, src: View):
    """Full mode: where src holds garbage (memory never written, or computed from it), which a DMA
    moves with the data within the chip (its later reads decide); a store of it into HBM is the
    error (`UninitializedReadError`, naming where the garbage came from) — except into a spill slot,
    which only holds the tile's bytes until they come back, and with TRNLAB_GARBAGE_STORES=1, where
    it leaves those HBM elements undefined (`Core._poison_from`: a later store defines them, as when a
    kernel stores a padded tile whole and then zeros over its padding; the read of an output that
    still holds garbage raises). None if src is clean."""
    garbage = src.undefined()
    if garbage is not None and dst.tensor.kind == "hbm" and not dst.tensor.name.startswith(SPILL_SLOT) \
            and not config.get("garbage_stores"):
        src.check_initialized()
    return garbage
