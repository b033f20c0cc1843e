"""The Tensor engine's instructions: nc_matmul and nc_transpose (a 128 x 128 systolic array that reads
SBUF and writes PSUM).

Each instruction checks its rules (`_check_matmul`), computes its values in full mode
(`_matmul_values`, `_transpose_values`: fp32 products accumulated in PSUM), costs it (`cost.py`)
and issues it: LoadStationary of a new stationary tile in the background, the array busy for the
moving columns, the result after the drain (`engines.EngineTimes.tensor`).
Composed into `core.NeuronCore`.
"""
from __future__ import annotations

import numpy as np

from . import cost, dtypes, onezero
from . import retype as _retype
from .engines import PE
from .memory import check_pe_result, moving_fmax
from .errors import (DtypeError, MatmulShapeError, MemoryPlacementError, PartitionAxisError, PETilingError,
                     ShapeMismatchError, StartPartitionError)
from .operands import _view, start_partition_ok
from .tensor import View
from .dependencies import record_reads as _record_reads, record_write as _record_write, wait_reads as _wait_reads, wait_write as _wait_write


def pe_tiles(spec, tile_position, tile_size, K: int, M: int) -> int:
    """The 32 x 32 PE blocks a matmul in tiling mode occupies, as a bit mask (bit 4 * row block +
    column block), after checking nki.isa.nc_matmul's "Tiling mode" rules: both tuples given; row
    and column tile sizes 64 or 128 (2 x 64 tiles, NeuronCore-v2 on) or 32 (4 x 32 tiles, NeuronCore-v3
    on); each start a multiple of its size inside the 128 x 128 array; the stationary's K rows
    (partitions) within the row tile and its M columns (free size) within the column tile."""
    if tile_position is None or tile_size is None or len(tuple(tile_position)) != 2 or len(tuple(tile_size)) != 2:
        raise PETilingError(f"PE array tiling: tile_position {tile_position} and tile_size {tile_size} must both "
                            f"be 2-tuples (start_row, start_column) and (row_size, column_size)",
                            value=(tile_position, tile_size), limit="both set")
    (row, col), (rows, cols) = (int(x) for x in tile_position), (int(x) for x in tile_size)
    sizes = (32, 64, 128) if str(spec.generation).lower().lstrip("v") != "2" else (64, 128)
    for what, size in (("row_size", rows), ("column_size", cols)):
        if size not in sizes:
            raise PETilingError(f"PE array tiling: {what} {size}; {spec.name} tiles the 128 x 128 PE array into "
                                f"tiles of {', '.join(map(str, sizes))}", value=size, limit=sizes)
    for what, start, size in (("start_row", row, rows), ("start_column", col, cols)):
        if start < 0 or start % size or start + size > 128:
            raise PETilingError(f"PE array tiling: {what} {start} must be a multiple of the tile size {size} "
                                f"inside the 128 x 128 array", value=start, limit=size)
    if K > rows or M > cols:
        raise PETilingError(f"PE array tiling: stationary [K={K}, M={M}] does not fit the tile_size "
                            f"({rows}, {cols}): K <= row_size, M <= column_size", value=(K, M), limit=(rows, cols))
    mask = 0
    for rb in range(row // 32, (row + rows) // 32):
        for cb in range(col // 32, (col + cols) // 32):
            mask |= 1 << (4 * rb + cb)
    return mask


class TensorEngineInstructions:
    """NeuronCore's Tensor-engine instructions (the core's machinery: `core.NeuronCore`)."""

    def nc_matmul(self, dst, stationary, moving, accumulate=None, tile_position=None, tile_size=None,
                  is_stationary_onezero: bool = False, is_moving_onezero: bool = False, stationary_dtype=None,
                  moving_dtype=None) -> int:
        """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] on the Tensor engine.

        Inputs in SBUF, output in PSUM (fp32; bf16 also on NeuronCore-v4), K <= 128 (partitions),
        M <= 128, N <= 512 (from NeuronCore-v4: the whole PSUM partition, 4096 fp32 / 8192 bf16
        columns over several banks: `memory.moving_fmax`). ``accumulate``: True adds to dst, False overwrites it, None (default)
        adds if dst was already written and overwrites a fresh tile (NKI's PSUM accumulation).
        ``tile_position=(start_row, start_column)``, ``tile_size=(row_size, column_size)``: tiling
        mode, the matmul on a row x column tile of the PE array (`pe_tiles`), where matmuls on
        other tiles run at the same time (`engines.EngineTimes.tensor_tiled`); the values are the same.
        ``is_stationary_onezero`` / ``is_moving_onezero``: the kernel's hint that an operand holds ones and
        zeros only — the same values, fewer passes for an fp32 operand, a false hint on one refused in
        full mode (`onezero.py`). ``stationary_dtype`` / ``moving_dtype``: a tile retyped by ``.view(dtype)``,
        its bytes read as that type of the same size (`retype.py`).
        """
        if stationary_dtype or moving_dtype:
            stationary, moving = _retype.typed_pair(stationary, stationary_dtype, moving, moving_dtype)
        # The rules depend only on the operands' shapes and places: check each triple of operand
        # objects once (tiled loops reuse the same views) — the hot path of every GEMM.
        if is_stationary_onezero or is_moving_onezero:
            hints = onezero.hint_attrs(is_stationary_onezero, is_moving_onezero)
            key = (dst, stationary, moving, is_stationary_onezero, is_moving_onezero)
        else:
            hints, key = None, (dst, stationary, moving)
        checked = self._matmul_checked.get(key)
        if checked is None:
            checked = self._check_matmul(dst, stationary, moving, hints)
            if len(self._matmul_checked) > 1024:
                self._matmul_checked.clear()
            self._matmul_checked[key] = checked
        dst, st, mv, K, M, N, busy_ns, latency_ns, load_ns, flops, sbuf, psum = checked
        check_pe_result(self.spec, dst, "nc_matmul")         # its result in one PSUM bank (v2, v3)
        tiles = 0 if tile_position is None and tile_size is None else \
            pe_tiles(self.spec, tile_position, tile_size, K, M)
        if st.tensor.freed or mv.tensor.freed or dst.tensor.freed:
            for v, what in ((st, "stationary"), (mv, "moving"), (dst, "dst")):
                _view(v, what)
        if self.full:
            if hints:
                self._check_onezero(st, mv, hints)
            self._matmul_values(dst, st, mv, K, M, N, accumulate)

        # --- time: LoadStationary in the background, MultiplyMoving busy, result after drain ---
        times = self.engine_times
        start, waited = _wait_reads((mv,), 0.0, -1)        # RAW on the moving tile
        last = self._stationary
        st_tensor = st.tensor
        version = st_tensor.version
        new = last is not st and (last is None or last.tensor is not st_tensor or last.box != st.box) \
            or version != self._stationary_version
        if new:
            st_ready, st_waited = _wait_reads((st,), 0.0, -1)
            self._stationary = st
            self._stationary_version = version
        else:
            st_ready, st_waited = 0.0, -1
        dst_ready, dst_waited, group_ready = _wait_write(dst, 0.0, -1, True)   # WAR / WAW on dst
        start, end, ready, waited = times.tensor(start, waited, new, st_ready, st_waited, load_ns,
                                                 dst_ready, dst_waited, group_ready, busy_ns, latency_ns, tiles)
        records = self._records
        idx = len(records)
        _record_reads((st, mv), end, idx)
        _record_write(dst, ready, idx, True)
        records.append((PE, "nc_matmul", start, end, ready, flops, 0, sbuf, psum, waited,
                        self.note))                                       # a records.Record
        if ready > self._now:
            self._now = ready
        return idx

    def _check_onezero(self, st: View, mv: View, hints: dict) -> None:
        """Full mode: the one/zero hints an nc_matmul was given hold for its fp32 operands (`onezero.check`)."""
        if hints.get("is_stationary_onezero"):
            onezero.check(st, "stationary")
        if hints.get("is_moving_onezero"):
            onezero.check(mv, "moving")

    def _check_matmul(self, dst, stationary, moving, hints: dict | None = None):
        dst = _view(dst, "dst")
        st = _view(stationary, "stationary")
        mv = _view(moving, "moving")
        for v, what in ((st, "stationary"), (mv, "moving")):
            if v.tensor.kind != "sbuf":
                raise MemoryPlacementError(
                    f"operand memory: nc_matmul {what} {v.tensor.name!r} is in "
                    f"{v.tensor.kind.upper()}; the Tensor engine reads SBUF only",
                    value=v.tensor.kind, limit="sbuf")
        if dst.tensor.kind != "psum":
            raise MemoryPlacementError(
                f"operand memory: nc_matmul dst {dst.tensor.name!r} is in "
                f"{dst.tensor.kind.upper()}; the Tensor engine writes PSUM only",
                value=dst.tensor.kind, limit="psum")
        K, M, N = st.partitions, st.free_size, mv.free_size
        if mv.partitions != K:
            raise MatmulShapeError(
                f"matmul tile shape: contraction (partition) sizes differ: stationary {st.shape} "
                f"has K={K}, moving {mv.shape} has K={mv.partitions}", value=mv.partitions,
                limit=K)
        if K > self._max_k:
            raise MatmulShapeError(f"matmul tile shape: K={K} partitions, the limit is "
                                   f"{self._max_k} (PE rows)", value=K, limit=self._max_k)
        if M > self._max_m:
            raise MatmulShapeError(f"matmul tile shape: stationary free size M={M}, the limit is "
                                   f"{self._max_m} (gemm_stationary_fmax)", value=M,
                                   limit=self._max_m)
        n_max, what = moving_fmax(self.spec, dst.tensor.dtype)
        if N > n_max:
            raise MatmulShapeError(f"matmul tile shape: moving free size N={N}, the limit is "
                                   f"{n_max} ({what}) on {self.spec.name}", value=N, limit=n_max)
        if dst.partitions != M or dst.free_size != N:
            raise ShapeMismatchError(
                f"shape mismatch: nc_matmul dst {dst.shape} should be [M={M}, N={N}] "
                f"(stationary {st.shape}, moving {mv.shape})", value=dst.shape, limit=(M, N))
        sdt, mdt = _retype.dtype_of(st), _retype.dtype_of(mv)
        if sdt not in dtypes.MATMUL_INPUTS or mdt not in dtypes.MATMUL_INPUTS:
            raise DtypeError(f"data type: nc_matmul inputs {dtypes.name(sdt)} x {dtypes.name(mdt)}; "
                             f"the Tensor engine takes fp32, bf16, fp16 and fp8",
                             value=(sdt, mdt), limit=dtypes.MATMUL_INPUTS)
        ddt = dst.tensor.dtype
        if ddt != dtypes.float32 and not (ddt == dtypes.bfloat16 and self.spec.generation >= "v4"):
            raise DtypeError(f"data type: nc_matmul writes fp32 to PSUM, dst is {dtypes.name(ddt)}",
                             value=ddt, limit="float32")
        parts = self.spec.partitions
        for v, what in ((st, "stationary"), (mv, "moving"), (dst, "dst")):
            if not v.part_first:
                raise PartitionAxisError(
                    f"partition axis first: nc_matmul {what} {v!r} does not have the partition "
                    f"axis first", value=v.shape, limit="partition axis first")
            if v.part_start and not start_partition_ok(v.part_start, v.partitions, parts):
                raise StartPartitionError(
                    f"start partition: nc_matmul {what} starts at partition {v.part_start} with "
                    f"{v.partitions} partitions; allowed starts: 0 for >64 partitions, 0/64 for "
                    f"33-64, 0/32/64/96 for <=32", value=v.part_start, limit=(0, 32, 64, 96))
        matmul_dtype = dtypes.float32 if dtypes.float32 in (sdt, mdt) else sdt
        self._matmul_dtypes.add(matmul_dtype)
        c = cost.cost(cost.Instruction("nc_matmul", "pe", (cost.operand(st), cost.operand(mv)),
                                       (cost.operand(dst),), hints or {}), self.spec)
        pe_ns = self._pe_ns
        return (dst, st, mv, K, M, N, c.cycles * pe_ns, c.latency_cycles * pe_ns,
                c.setup_cycles * pe_ns, 2.0 * K * M * N, st.nbytes + mv.nbytes, dst.nbytes)

    def _matmul_values(self, dst, st, mv, K, M, N, accumulate, defer: bool = True):
        """Full mode: fp32 products of the (exactly widened) inputs, accumulated in PSUM (`defer`: into
        the PSUM tile's pending accumulation group where it can; False for gathered operands)."""
        t = dst.tensor
        if accumulate is None:
            accumulate = t.written is None or bool(
                (t.written if dst.index is None else t.written[dst.index]).all())
        # garbage in (memory never written) lands where it goes, as on the chip: result row m
        # depends on stationary column m, result column n on moving column n (all of K)
        garbage = None
        bad_st, bad_mv = st.undefined(), mv.undefined()
        if bad_st is not None or bad_mv is not None:
            rows = np.zeros(M, bool) if bad_st is None else bad_st.reshape(K, M).any(axis=0)
            cols = np.zeros(N, bool) if bad_mv is None else bad_mv.reshape(K, N).any(axis=0)
            garbage = (rows[:, None] | cols[None, :]).reshape(dst.shape)
            source = st if bad_st is not None else mv
            origin = (f"nc_matmul read never-written {source.tensor.name!r}[{source._index_str()}]"
                      + (f" at {self.note}" if self.note else ""))
        if accumulate:                           # adding onto garbage keeps it garbage
            before = dst.undefined()
            if before is not None:
                garbage = before if garbage is None else garbage | before
                # a group started with accumulate=True on a fresh tile: name the matmul that did it
                origin = dst.tensor.poison_origin or (f"nc_matmul accumulated onto never-written {t.name!r}"
                                                      + (f" at {self.note}" if self.note else ""))
        if defer and dst.basic and (t.dtype == dtypes.float32 or t.dtype == dtypes.bfloat16) \
                and type(st) is View and type(mv) is View:        # (a retyped operand: its bytes read now)
            # computed when the PSUM tile is next read, together with the rest of its group
            t.defer_matmul(dst, st.tensor.snapshot(st), mv.tensor.snapshot(mv), accumulate)
            dst.mark_written()
            if garbage is not None:
                dst.set_poison(garbage, origin)
            return
        product = (np.asarray(st.values(), np.float32).reshape(K, M).T
                   @ np.asarray(mv.values(), np.float32).reshape(K, N))
        if accumulate:
            dst.write((dst.values().astype(np.float32) + product.reshape(dst.shape))
                      .astype(t.dtype))
        else:
            self._store(dst, product)
        if garbage is not None:
            dst.set_poison(garbage, origin)

    def _pe_issue(self, opcode, st, reads, dst, flops, sbuf, psum, tiles: int = 0, attrs: dict | None = None):
        """Schedule a Tensor-engine instruction other than nc_matmul (nc_transpose): the array
        loads `st` as its stationary tile (in the background), then streams N columns (on the PE
        blocks `tiles` in tiling mode: `pe_tiles`); `attrs` the cost model's (an indirect nc_matmul's hints)."""
        busy_ns, latency_ns, load_ns = self._pe_cost(opcode, st, reads, dst, attrs)
        times = self.engine_times
        start, waited = _wait_reads(reads, 0.0, -1)
        st_ready, st_waited = _wait_reads((st,), 0.0, -1)
        self._stationary = None
        dst_ready, dst_waited, _ = _wait_write(dst, 0.0, -1)
        start, end, ready, waited = times.tensor(start, waited, True, st_ready, st_waited, load_ns,
                                                 dst_ready, dst_waited, 0.0, busy_ns, latency_ns, tiles)
        idx = len(self._records)
        _record_reads((st,) + reads, end, idx)
        _record_write(dst, ready, idx)
        return self._append(PE, opcode, start, end, ready, flops, 0, sbuf, psum, waited)

    def _pe_cost(self, opcode, st, reads, dst, attrs: dict | None = None) -> tuple[float, float, float]:
        """(busy, ready-after, LoadStationary) ns of a Tensor-engine instruction (`cost.cost`)."""
        c = cost.cost(cost.Instruction(opcode, "pe", (cost.operand(st),) + tuple(
            cost.operand(v) for v in reads), (cost.operand(dst),), attrs or {}), self.spec)
        pe_ns = self._pe_ns
        return c.cycles * pe_ns, c.latency_cycles * pe_ns, c.setup_cycles * pe_ns

    def _transpose_values(self, dst: View, src: View) -> None:
        """Full mode: dst = src.T (nc_transpose on either engine); garbage is transposed with it."""
        x, garbage = self._garbage(src)
        self._store(dst, x.T)
        self._poison_from(dst, None if garbage is None else garbage.T, src)

    def nc_transpose(self, dst, src, dst_dtype=None, src_dtype=None) -> int:
        """dst[F, P] = src[P, F].T through the Tensor engine (a matmul by the identity): SBUF → PSUM.
        ``dst_dtype`` / ``src_dtype``: a tile retyped by ``.view(dtype)`` (`retype.py`)."""
        if dst_dtype or src_dtype:
            dst, src = (_retype.typed(dst, dst_dtype, "nc_transpose dst"),
                        _retype.typed(src, src_dtype, "nc_transpose src"))
        dst = _view(dst, "dst")
        src = _view(src, "src")
        if src.tensor.kind != "sbuf" or dst.tensor.kind != "psum":
            raise MemoryPlacementError(
                f"operand memory: nc_transpose on the Tensor engine reads SBUF and writes PSUM, "
                f"got {src.tensor.kind.upper()} -> {dst.tensor.kind.upper()}",
                value=(src.tensor.kind, dst.tensor.kind), limit=("sbuf", "psum"))
        self._onchip(src, "src", "nc_transpose")
        self._onchip(dst, "dst", "nc_transpose")
        P, F = src.partitions, src.free_size
        if P > self._max_k or F > self._max_m:
            raise MatmulShapeError(f"matmul tile shape: nc_transpose of [{P}, {F}]; both sides "
                                   f"must be <= {self._max_m}", value=(P, F), limit=self._max_m)
        if dst.partitions != F or dst.free_size != P:
            raise ShapeMismatchError(f"shape mismatch: nc_transpose dst {dst.shape}, expected "
                                     f"[{F}, {P}]", value=dst.shape, limit=(F, P))
        check_pe_result(self.spec, dst, "nc_transpose")
        if self.full:
            self._transpose_values(dst, src)
        # an identity matmul: src is the stationary [K=P, M=F], the identity streams N=P columns
        return self._pe_issue("nc_transpose", src, (), dst, 2.0 * P * F * P, src.nbytes, dst.nbytes)
