"""The engines' selection instructions of NKI 0.7: the eight largest values of a row and where they
are (max8, nc_find_index8, nc_match_replace8), a predicated copy, a select by free-axis position
(range_select), the indices of nonzero elements (nonzero_with_count) and the bounds of segments
(sequence_bounds).

Each checks its rules (partitions, free sizes, dtypes, the generation that has it), computes its
values in full mode (fp32 inside the engine, rounded to dst's dtype), costs it (`cost.py`,
`selection_cycles`: AWS's published figure where there is one, else ASSUMED) and issues it
(`core.NeuronCore._issue`). Composed into `core.NeuronCore`. Semantics from AWS's NKI 0.7 pages,
cited per instruction as [nki.isa.<name>] (awsdocs-neuron.readthedocs-hosted.com, v2.33.0).
"""
from __future__ import annotations

import numpy as np

from . import dtypes, ops
from .engines import DVE, POOL
from .errors import DtypeError, FreeSizeError, GenerationError, PartitionLimitError, ShapeMismatchError
from .operands import _view
from .tensor import Tensor, View

TOP = 8                                       # max8 / nc_find_index8 / nc_match_replace8: 8 per partition
TOP_FREE_MIN, TOP_FREE_MAX = 8, 16384         # elements read per partition [nki.isa.max8]
INDEX_DTYPES = ("uint16", "uint32")           # nc_find_index8's dst [nki.isa.nc_find_index8]
PREDICATE_DTYPES = ("uint8", "uint16", "uint32")   # [nki.isa.tensor_copy_predicated]
GPSIMD_CORE_PARTITIONS = 16                   # each of GpSimd's 8 cores owns 16 partitions [nki.isa.local_gather]


def need_generation(core, opcode: str, generation: str) -> None:
    """An instruction AWS documents as "available only on NeuronCore-<generation> and newer"."""
    if core.spec.generation < generation:
        raise GenerationError(
            f"generation: {opcode} needs NeuronCore-{generation} or newer; {core.spec.name} is "
            f"NeuronCore-{core.spec.generation} [nki.isa.{opcode}]", value=core.spec.generation, limit=generation)


def need_dtype(view: View, allowed: tuple, opcode: str, what: str) -> None:
    name = dtypes.name(view.tensor.dtype)
    if name not in allowed:
        raise DtypeError(f"data type: {opcode} {what} is {name}; allowed: {', '.join(allowed)} "
                         f"[nki.isa.{opcode}]", value=name, limit=allowed)


def same_partitions(a: View, b: View, opcode: str, what: str) -> None:
    if a.partitions != b.partitions:
        raise ShapeMismatchError(f"shape mismatch: {opcode} {what}: {a.partitions} vs {b.partitions} "
                                 f"partitions", value=(a.partitions, b.partitions), limit="same partitions")


def _top_free(v: View, opcode: str, what: str) -> None:
    if not TOP_FREE_MIN <= v.free_size <= TOP_FREE_MAX:
        raise FreeSizeError(f"free size: {opcode} {what} has {v.free_size} elements per partition; "
                            f"between {TOP_FREE_MIN} and {TOP_FREE_MAX} are read [nki.isa.{opcode}]",
                            value=v.free_size, limit=(TOP_FREE_MIN, TOP_FREE_MAX))


def _eight(v: View, opcode: str, what: str) -> None:
    if v.free_size != TOP:
        raise ShapeMismatchError(f"shape mismatch: {opcode} {what} {v.shape} has {v.free_size} elements per "
                                 f"partition; it holds exactly {TOP} [nki.isa.{opcode}]", value=v.shape,
                                 limit=(v.partitions, TOP))


def _sentinel(dtype) -> int:
    """The all-ones index nc_find_index8 writes for a value it does not find [nki.isa.nc_find_index8]."""
    return int(np.iinfo(np.dtype(dtype)).max) if np.dtype(dtype).kind in "ui" else -1


def find_indices(data: np.ndarray, vals: np.ndarray, reverse: bool) -> np.ndarray:
    """Per partition, the index of the first occurrence of each of the 8 vals in data, a position
    used once: duplicate vals pair with successive matches, in ascending column order
    (nc_find_index8) or, processing vals from the last to the first, in descending order
    (nc_match_replace8) [nki.isa.nc_match_replace8, "Behavior with duplicate vals"]. -1: not found."""
    out = np.full(vals.shape, -1, dtype=np.int64)
    columns = range(vals.shape[1] - 1, -1, -1) if reverse else range(vals.shape[1])
    for p in range(data.shape[0]):
        used = np.zeros(data.shape[1], dtype=bool)
        row = data[p]
        for i in columns:
            hits = np.flatnonzero((row == vals[p, i]) & ~used)
            if hits.size:
                out[p, i] = hits[0]
                used[hits[0]] = True
    return out


class SelectInstructions:
    """NeuronCore's selection instructions of NKI 0.7 (`core.NeuronCore`)."""

    def max8(self, dst, src) -> int:
        """dst[P, 8] = the 8 largest values of each partition of src, in descending order, compared in
        fp32 (Vector engine) [nki.isa.max8]; src reads 8 to 16,384 elements per partition."""
        dst, x = _view(dst, "dst"), _view(src, "src")
        self._onchip(x, "src", "max8")
        self._onchip(dst, "dst", "max8")
        same_partitions(dst, x, "max8", "dst vs src")
        _top_free(x, "max8", "src")
        _eight(dst, "max8", "dst")
        if self.full:
            (vals,) = self._inputs(x)
            self._store(dst, -np.sort(-vals, axis=1, kind="stable")[:, :TOP])
        dur = self._cost_ns(DVE, "max8", (x,), (dst,))
        return self._issue(DVE, "max8", dur, (x,), dst)

    def nc_find_index8(self, dst, data, vals) -> int:
        """dst[P, 8] (uint16 / uint32) = the index of the first occurrence in each partition of data of
        each of the 8 vals, duplicates paired with successive matches in ascending order; a value not
        found gives the all-ones sentinel (0xFFFF / 0xFFFFFFFF) (Vector engine) [nki.isa.nc_find_index8]."""
        dst, x, v = _view(dst, "dst"), _view(data, "data"), _view(vals, "vals")
        for view, what in ((x, "data"), (v, "vals"), (dst, "dst")):
            self._onchip(view, what, "nc_find_index8")
        same_partitions(x, v, "nc_find_index8", "data vs vals")
        same_partitions(dst, x, "nc_find_index8", "dst vs data")
        _top_free(x, "nc_find_index8", "data")
        _eight(v, "nc_find_index8", "vals")
        _eight(dst, "nc_find_index8", "dst")
        need_dtype(dst, INDEX_DTYPES, "nc_find_index8", "dst")
        if self.full:
            values, wanted = self._inputs(x, v)
            found = find_indices(values, wanted, reverse=False)
            self._store(dst, np.where(found < 0, _sentinel(dst.tensor.dtype), found))
        dur = self._cost_ns(DVE, "nc_find_index8", (x, v), (dst,))
        return self._issue(DVE, "nc_find_index8", dur, (x, v), dst)

    def nc_match_replace8(self, dst, data, vals, imm, dst_idx=None) -> int:
        """dst = data with the first occurrence of each of the 8 vals per partition replaced by imm; vals
        are processed from the last to the first, so duplicates take successive matches in descending
        column order; dst_idx[P, 8], if given, receives the positions (Vector engine)
        [nki.isa.nc_match_replace8]. In place (dst = data) is allowed."""
        dst, x, v = _view(dst, "dst"), _view(data, "data"), _view(vals, "vals")
        for view, what in ((x, "data"), (v, "vals"), (dst, "dst")):
            self._onchip(view, what, "nc_match_replace8")
        same_partitions(x, v, "nc_match_replace8", "data vs vals")
        self._same_tile(dst, x, "nc_match_replace8", "dst vs data")
        _top_free(x, "nc_match_replace8", "data")
        _eight(v, "nc_match_replace8", "vals")
        idx = None
        if dst_idx is not None:
            idx = _view(dst_idx, "dst_idx")
            self._onchip(idx, "dst_idx", "nc_match_replace8")
            same_partitions(idx, x, "nc_match_replace8", "dst_idx vs data")
            _eight(idx, "nc_match_replace8", "dst_idx")
        if self.full:
            values, wanted = self._inputs(x, v)
            found = find_indices(values, wanted, reverse=True)
            out = values.copy()
            rows, cols = np.nonzero(found >= 0)
            out[rows, found[rows, cols]] = np.float32(imm)
            self._store(dst, out)
            if idx is not None:
                # a value not found: the all-ones index, as nc_find_index8 (ASSUMED: the page is silent)
                self._store(idx, np.where(found < 0, _sentinel(idx.tensor.dtype), found))
        dur = self._cost_ns(DVE, "nc_match_replace8", (x, v), (dst,))
        return self._issue(DVE, "nc_match_replace8", dur, (x, v), dst, also_write=idx)

    def tensor_copy_predicated(self, dst, src, predicate, reverse_pred=False) -> int:
        """dst = src where predicate is nonzero (zero with reverse_pred), dst unchanged elsewhere; src a
        tile or a number (Vector engine) [nki.isa.tensor_copy_predicated]. predicate is uint8 / uint16 /
        uint32; a tile src has dst's dtype; src and predicate are not both in PSUM; reverse_pred only
        with a number src."""
        dst, pred = _view(dst, "dst"), _view(predicate, "predicate")
        self._onchip(pred, "predicate", "tensor_copy_predicated")
        self._onchip(dst, "dst", "tensor_copy_predicated")
        self._same_tile(pred, dst, "tensor_copy_predicated", "predicate vs dst")
        need_dtype(pred, PREDICATE_DTYPES, "tensor_copy_predicated", "predicate")
        x = None
        if isinstance(src, (Tensor, View)):
            x = _view(src, "src")
            self._onchip(x, "src", "tensor_copy_predicated")
            self._same_tile(x, dst, "tensor_copy_predicated", "src vs dst")
            self._one_psum_input(x, pred, "tensor_copy_predicated", "src and predicate",
                                 "nki.isa.tensor_copy_predicated")
            if x.tensor.dtype != dst.tensor.dtype:
                raise DtypeError(f"data type: tensor_copy_predicated src is {dtypes.name(x.tensor.dtype)}, dst "
                                 f"{dtypes.name(dst.tensor.dtype)}; they must match [nki.isa.tensor_copy_predicated]",
                                 value=dtypes.name(x.tensor.dtype), limit=dtypes.name(dst.tensor.dtype))
            if reverse_pred:
                raise DtypeError("data type: tensor_copy_predicated reverse_pred=True needs a number src "
                                 "[nki.isa.tensor_copy_predicated]", value="tile src", limit="scalar src")
        reads = (pred, dst) if x is None else (x, pred, dst)     # dst keeps its values where not copied
        if self.full:
            (flags,) = self._inputs(pred)
            holds = (flags == 0) if reverse_pred else (flags != 0)
            old = np.asarray(dst.values()).reshape(holds.shape)
            garbage = dst.undefined()
            if x is None:
                new = np.full(holds.shape, src).astype(dst.tensor.dtype)
            else:
                bad = x.undefined()
                if bad is not None and (bad.reshape(holds.shape) & holds).any():
                    x.check_initialized()           # copying garbage that lands in dst: an error
                new = np.asarray(x.values()).reshape(holds.shape)
            dst.write(np.where(holds, new, old).reshape(dst.shape).astype(dst.tensor.dtype, copy=False))
            if garbage is not None:                # what was never written stays garbage
                dst.set_poison(garbage.reshape(holds.shape) & ~holds, f"tensor_copy_predicated kept "
                               f"never-written {dst.tensor.name!r}")
        mixed = x is not None and sorted((x.tensor.kind, pred.tensor.kind)) == ["psum", "sbuf"]
        dur = self._cost_ns(DVE, "tensor_copy_predicated", (pred,), (dst,), passes=1 if mixed else 2)
        return self._issue(DVE, "tensor_copy_predicated", dur, reads, dst)

    def range_select(self, dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd="idle",
                     reduce_res=None, reduce_op="maximum", range_start=0.0, on_false_value=0.0) -> int:
        """dst[p, j] = on_true_tile[p, j] where comp_op0(j + range_start, bound0[p]) and comp_op1(j +
        range_start, bound1[p]) both hold, else on_false_value (j: the flattened free index), and a
        reduction of dst along the free axes into the Vector engine's registers / reduce_res, under
        reduce_cmd as nisa.activation's (Vector engine; NeuronCore-v3 and newer) [nki.isa.range_select]."""
        need_generation(self, "range_select", "v3")
        dst, x = _view(dst, "dst"), _view(on_true_tile, "on_true_tile")
        self._onchip(x, "on_true_tile", "range_select")
        self._onchip(dst, "dst", "range_select")
        self._same_tile(dst, x, "range_select", "dst vs on_true_tile")
        _, first = ops.binary(comp_op0)
        _, second = ops.binary(comp_op1)
        lo, lo_view = self._operand(bound0, x.partitions, "range_select", "bound0")
        hi, hi_view = self._operand(bound1, x.partitions, "range_select", "bound1")
        reads = (x,) + tuple(v for v in (lo_view, hi_view) if v is not None)
        command, reduce_name, r = self._reduce_target(reduce_cmd, reduce_op, reduce_res, x, "range_select")
        if self.full:
            (vals,) = self._inputs(x)
            position = np.arange(vals.shape[1], dtype=np.float32)[None, :] + np.float32(range_start)
            lo = np.broadcast_to(np.asarray(lo, np.float32).reshape(-1, 1), (len(vals), 1))
            hi = np.broadcast_to(np.asarray(hi, np.float32).reshape(-1, 1), (len(vals), 1))
            keep = (first(position, lo) != 0) & (second(position, hi) != 0)
            out = np.where(keep, vals, np.float32(on_false_value))
            self._store(dst, out)
            self._vector_reduce(command, reduce_name, out, x, r)
        dur = self._cost_ns(DVE, "range_select", (x,), (dst,), reduce=command != "idle" or r is not None)
        return self._issue(DVE, "range_select", dur, reads, dst, also_write=r)

    def nonzero_with_count(self, dst, src, index_offset=0, padding_val=-1) -> int:
        """On partitions 0, 16, ..., 112 only (each GpSimd core reads and writes its first partition):
        dst[p, :T+1] = the positions (+ index_offset) of src[p]'s T elements that are nonzero, then
        padding_val, and last the count; dst's other partitions are unchanged (GpSimd engine;
        NeuronCore-v3 and newer) [nki.isa.nonzero_with_count]."""
        need_generation(self, "nonzero_with_count", "v3")
        dst, x = _view(dst, "dst"), _view(src, "src")
        self._onchip(x, "src", "nonzero_with_count", psum_ok=False)
        self._onchip(dst, "dst", "nonzero_with_count", psum_ok=False)
        same_partitions(dst, x, "nonzero_with_count", "dst vs src")
        if dst.free_size != x.free_size + 1:
            raise ShapeMismatchError(f"shape mismatch: nonzero_with_count dst has {dst.free_size} elements per "
                                     f"partition; src has {x.free_size}, so dst needs {x.free_size + 1} (the "
                                     f"indices, then the count) [nki.isa.nonzero_with_count]",
                                     value=dst.free_size, limit=x.free_size + 1)
        if self.full:
            rows = [p for p in range(x.partitions) if (x.part_start + p) % GPSIMD_CORE_PARTITIONS == 0]
            vals = np.asarray(x.values()).reshape(x.partitions, -1)
            old = np.asarray(dst.values()).reshape(dst.partitions, -1).copy()
            garbage = dst.undefined()
            garbage = None if garbage is None else garbage.reshape(old.shape).copy()
            undefined = x.undefined()
            undefined = None if undefined is None else undefined.reshape(x.partitions, -1)
            origin = ""
            for p in rows:
                row = vals[p]
                hits = np.flatnonzero(row != 0)
                out = np.full(x.free_size + 1, padding_val, dtype=np.float64)
                out[:hits.size] = hits + int(index_offset)
                out[-1] = hits.size
                old[p] = out
                bad = undefined is not None and bool(undefined[p].any())
                if bad or garbage is not None:
                    # a row read with garbage (a partition never written, e.g. a kernel that fills only
                    # partition 0) gives a whole row of garbage, as the GpSimd core computes it; only a
                    # later read that matters (a store to HBM) is the error
                    if garbage is None:
                        garbage = np.zeros(old.shape, dtype=bool)
                    garbage[p] = bad
                    if bad and not origin:
                        origin = x.tensor.poison_origin or (f"nonzero_with_count read never-written "
                                                            f"{x.tensor.name!r} partition {x.part_start + p}")
            dst.write(old.reshape(dst.shape).astype(dst.tensor.dtype))
            if garbage is not None:
                dst.set_poison(garbage.reshape(dst.shape), origin or f"nonzero_with_count left "
                               f"{dst.tensor.name!r} partitions it does not write unwritten")
        dur = self._cost_ns(POOL, "nonzero_with_count", (x,), (dst,))
        return self._issue(POOL, "nonzero_with_count", dur, (x, dst), dst)

    def sequence_bounds(self, dst, segment_ids) -> int:
        """dst[1, 2, n] = per element of segment_ids[1, n], the start (row 0) and end (row 1) of the run
        of equal ids it belongs to; padding (id 0) gets start n and end -1 (GpSimd engine)
        [nki.isa.sequence_bounds]. One partition; float32 or int32 operands."""
        dst, ids = _view(dst, "dst"), _view(segment_ids, "segment_ids")
        self._onchip(ids, "segment_ids", "sequence_bounds", psum_ok=False)
        self._onchip(dst, "dst", "sequence_bounds", psum_ok=False)
        for view, what in ((ids, "segment_ids"), (dst, "dst")):
            need_dtype(view, ("float32", "int32"), "sequence_bounds", what)
            if view.partitions != 1:
                raise PartitionLimitError(f"partition limit: sequence_bounds {what} has {view.partitions} "
                                          f"partitions; the partition dimension must be 1 "
                                          f"[nki.isa.sequence_bounds]", value=view.partitions, limit=1)
        if dst.free_size != 2 * ids.free_size:
            raise ShapeMismatchError(f"shape mismatch: sequence_bounds dst {dst.shape} must hold [1, 2, "
                                     f"{ids.free_size}] (a start and an end per id)", value=dst.shape,
                                     limit=(1, 2, ids.free_size))
        if self.full:
            (vals,) = self._inputs(ids)
            self._store(dst, segment_bounds(vals[0])[None])
        dur = self._cost_ns(POOL, "sequence_bounds", (ids,), (dst,))
        return self._issue(POOL, "sequence_bounds", dur, (ids,), dst)

    def topk(self, dst, dst_idx, src, n, sorted=False) -> int:
        """nisa.topk(val_dst, idx_dst, src, n): each group of 16 partitions holds one problem, read in a
        snake layout (element e at partition e % 16, free position e // 16; the first n elements are
        active); dst (val_dst, bfloat16) gets the k largest, k = dst's elements per partition, and
        dst_idx (idx_dst, uint32) their indices in the snake, both written in the same snake layout
        (result j at partition j % 16, position j // 16) (GpSimd engine) [nki.isa.topk]. ASSUMED where
        AWS's page was not readable in full: results in descending order (also with sorted=False, whose
        order AWS leaves open), equal values by lower index first, and the slots of the last position
        past k left as garbage (the hardware writes whole positions); later positions keep their values."""
        dst, idx, x = _view(dst, "val_dst"), _view(dst_idx, "idx_dst"), _view(src, "src")
        for view, what in ((x, "src"), (dst, "val_dst"), (idx, "idx_dst")):
            self._onchip(view, what, "topk", psum_ok=False)
            if view.partitions % GPSIMD_CORE_PARTITIONS:
                raise PartitionLimitError(f"partition limit: topk {what} has {view.partitions} partitions; a "
                                          f"problem is a group of 16 [nki.isa.topk]", value=view.partitions,
                                          limit="multiple of 16")
        same_partitions(dst, x, "topk", "val_dst vs src")
        same_partitions(idx, x, "topk", "idx_dst vs src")
        need_dtype(x, ("bfloat16",), "topk", "src")
        need_dtype(dst, ("bfloat16",), "topk", "val_dst")
        need_dtype(idx, ("uint32",), "topk", "idx_dst")
        k, n = dst.free_size, int(n)
        slots = GPSIMD_CORE_PARTITIONS * x.free_size
        if not 0 < n <= slots:
            raise ShapeMismatchError(f"shape mismatch: topk n={n} active elements; a 16-partition group of src "
                                     f"holds {slots} [nki.isa.topk]", value=n, limit=slots)
        if not 0 < k <= n or idx.free_size != k:
            raise ShapeMismatchError(f"shape mismatch: topk k = val_dst's {k} elements per partition (idx_dst "
                                     f"{idx.free_size}) must match and be in [1, n={n}] [nki.isa.topk]",
                                     value=(k, idx.free_size), limit=n)
        if self.full:
            x.check_initialized()
            vals = np.asarray(x.values(), np.float32).reshape(x.partitions, -1)
            G = GPSIMD_CORE_PARTITIONS
            positions = -(-k // G)
            result = np.zeros((x.partitions, k), bool)     # the slots results go to, in snake order
            tail = np.zeros((x.partitions, k), bool)       # the rest of the last position: written, unknown
            results = {dst: np.zeros((x.partitions, k), np.float64), idx: np.zeros((x.partitions, k), np.float64)}
            for group in range(x.partitions // G):
                base = group * G
                snake = vals[base:base + G].reshape(-1, order="F")[:n]      # element e: (e % 16, e // 16)
                order = np.argsort(-snake, kind="stable")[:k]
                for j in range(positions * G):
                    p, f = base + j % G, j // G
                    if j < k:
                        result[p, f] = True
                        results[dst][p, f], results[idx][p, f] = snake[order[j]], order[j]
                    else:
                        tail[p, f] = True
            for view, values in results.items():
                old = np.asarray(view.values()).reshape(values.shape)
                garbage = view.undefined()
                garbage = np.zeros(values.shape, bool) if garbage is None else garbage.reshape(values.shape)
                view.write(np.where(result, values.astype(view.tensor.dtype), old).reshape(view.shape))
                view.set_poison(((garbage & ~result) | tail).reshape(view.shape),
                                f"topk left {view.tensor.name!r} slots it does not define")
        dur = self._cost_ns(POOL, "topk", (x,), (dst,), elements=n)
        return self._issue(POOL, "topk", dur, (x, dst, idx), dst, also_write=idx)

    # -- the Vector engine's reduce registers (range_select, exponential, tensor_scalar_cumulative) ----
    def _reduce_target(self, reduce_cmd, reduce_op, reduce_res, like: View, opcode: str):
        """(command, reduce operator name, reduce_res view or None), checked."""
        command = getattr(reduce_cmd, "name", reduce_cmd) or "idle"
        if command not in ("idle", "reset", "reduce", "reset_reduce", "load_reduce"):
            raise ValueError(f"{opcode} reduce_cmd must be idle, reset, reduce, reset_reduce or load_reduce, "
                             f"got {reduce_cmd!r}")
        name, _ = ops.reduce(reduce_op if reduce_op is not None else "add")
        r = None
        if reduce_res is not None:
            r = _view(reduce_res, "reduce_res")
            self._onchip(r, "reduce_res", opcode)
            if r.partitions != like.partitions or r.free_size != 1:
                raise ShapeMismatchError(f"shape mismatch: {opcode} reduce_res {r.shape} must be "
                                         f"[{like.partitions}, 1] (one value per partition)", value=r.shape,
                                         limit=(like.partitions, 1))
        return command, name, r

    def _vector_reduce(self, command: str, reduce_name: str, out: np.ndarray, like: View, r, init=None) -> None:
        """Full mode: apply `command` to the Vector engine's reduce registers (one fp32 per partition)
        with this instruction's `out` [P, F], then read them into r. With reduce_res and idle, r gets
        this instruction's own reduction (as nisa.activation does in trnlab)."""
        _, fn = ops.reduce(reduce_name)
        start = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "max": -np.inf,
                 "minimum": np.inf, "min": np.inf}[reduce_name]
        regs = self._dve_regs[like.part_start:like.part_start + like.partitions]
        own = fn(np.asarray(out, np.float32), axis=1) if out.shape[1] else np.full(len(out), start, np.float32)
        if command in ("reset", "reset_reduce"):
            regs[:] = start
        if command == "load_reduce":                # the registers start from reduce_init
            regs[:] = np.broadcast_to(np.asarray(0.0 if init is None else init, np.float32).reshape(-1, 1),
                                      (len(regs), 1))[:, 0]
        if command in ("reduce", "reset_reduce", "load_reduce"):
            regs[:] = fn(np.stack([regs, own]), axis=0)
        if r is not None:
            self._store(r, (own if command == "idle" else regs)[:, None].copy())


def segment_bounds(ids: np.ndarray) -> np.ndarray:
    """[2, n]: per element the start and the (exclusive) end of its run of equal nonzero ids; id 0 is
    padding with start n and end -1 [nki.isa.sequence_bounds, its NumPy equivalent]."""
    n = len(ids)
    start = np.empty(n, np.float64)
    end = np.empty(n, np.float64)
    for i in range(n):
        if ids[i] == 0:
            start[i] = n
        elif i and ids[i] == ids[i - 1]:
            start[i] = start[i - 1]
        else:
            start[i] = i
    for i in range(n - 1, -1, -1):
        if ids[i] == 0:
            end[i] = -1
        elif i + 1 < n and ids[i] == ids[i + 1]:
            end[i] = end[i + 1]
        else:
            end[i] = i + 1
    return np.stack([start, end])
