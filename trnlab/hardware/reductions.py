"""The Vector and GpSimd engines' reductions and scans: tensor_reduce, bn_stats / bn_aggr (mean and
variance), tensor_tensor_scan, tensor_scalar_reduce, tensor_partition_reduce.

Each checks its rules, computes its values in full mode (fp32), costs it (`cost.py`) and issues it
(`core.NeuronCore._issue`). Composed into `core.NeuronCore`.
"""
from __future__ import annotations

import numpy as np

from . import cost, ops
from .engines import DVE, POOL
from .errors import FreeSizeError, PartitionAxisError, ShapeMismatchError
from .operands import _view


class ReductionInstructions:
    """NeuronCore's reduction and scan instructions (`core.NeuronCore`)."""

    def tensor_reduce(self, dst, data, op, axis=(1,), negate=False, keepdims=False,
                      engine="vector") -> int:
        """dst = reduce_op(data, free axes `axis`) (Vector engine); partitions stay."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        eid = self._engine(engine, "tensor_reduce", (DVE, POOL))
        name, fn = ops.reduce(op)
        self._onchip(x, "data", "tensor_reduce", psum_ok=eid != POOL)
        self._onchip(dst, "dst", "tensor_reduce", psum_ok=eid != POOL)
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        axes = tuple(int(a) % x.ndim for a in axes)
        if 0 in axes:
            raise PartitionAxisError("partition axis first: tensor_reduce reduces free axes only; "
                                     "axis 0 is the partition axis (use a transpose or "
                                     "tensor_partition_reduce)", value=axes, limit="axes >= 1")
        kept = 1
        for i, s in enumerate(x.shape):
            if i not in axes:
                kept *= s
        if dst.size != kept:
            raise ShapeMismatchError(f"shape mismatch: tensor_reduce of {x.shape} over axes "
                                     f"{axes} gives {kept} elements, dst {dst.shape} has {dst.size}",
                                     value=dst.shape, limit=kept)
        if self.full:
            garbage = x.undefined()          # a result is garbage where a value it reduces was
            vals = np.asarray(x.values(), dtype=np.float32)
            out = fn(vals, axis=axes, keepdims=keepdims)
            if negate:
                out = -out
            self._store(dst, out)
            self._poison_from(dst, None if garbage is None else garbage.any(axis=axes), x)
        dur = self._cost_ns(eid, "tensor_reduce", (x,), (dst,))
        return self._issue(eid, "tensor_reduce", dur, (x,), dst)

    def bn_stats(self, dst, data) -> int:
        """Per partition, dst[P, 6] = (count, mean, variance * count) of the even- and then of the
        odd-indexed elements of data (free axes flattened, at most bn_stats_fmax = 512 of them), in
        fp32 on the Vector engine [nki.isa.bn_stats]; bn_aggr turns one or more of these into mean
        and variance."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        self._onchip(x, "data", "bn_stats")
        self._onchip(dst, "dst", "bn_stats")
        if x.free_size > self.spec.bn_stats_fmax:
            raise FreeSizeError(
                f"free size: bn_stats data has {x.free_size} elements per partition, the limit is "
                f"{self.spec.bn_stats_fmax} (nl.tile_size.bn_stats_fmax); split the row and aggregate "
                f"the pieces with one bn_aggr", value=x.free_size, limit=self.spec.bn_stats_fmax)
        if dst.partitions != x.partitions or dst.free_size != 6:
            raise ShapeMismatchError(f"shape mismatch: bn_stats dst {dst.shape} must be "
                                     f"[{x.partitions}, 6]", value=dst.shape, limit=(x.partitions, 6))
        if self.full:
            self._carried = []
            (vals,) = self._inputs(x, carry=True)
            stats = []
            for half in (vals[:, 0::2], vals[:, 1::2]):
                count = half.shape[1]
                mean = half.mean(axis=1) if count else np.zeros(len(half), np.float32)
                m2 = ((half - mean[:, None]) ** 2).sum(axis=1) if count else np.zeros(len(half), np.float32)
                stats += [np.full(len(half), count, np.float32), mean, m2]
            self._store(dst, np.stack(stats, axis=1))
            self._carry_to(dst)
        dur = self._cost_ns(DVE, "bn_stats", (x,), (dst,))
        return self._issue(DVE, "bn_stats", dur, (x,), dst)

    def bn_aggr(self, dst, data) -> int:
        """dst[P, 2] = (mean, variance) per partition from the (count, mean, variance * count)
        triples of one or more bn_stats results laid side by side in data [nki.isa.bn_aggr]."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        self._onchip(x, "data", "bn_aggr")
        self._onchip(dst, "dst", "bn_aggr")
        if x.free_size % 3:
            raise ShapeMismatchError(f"shape mismatch: bn_aggr data has {x.free_size} elements per "
                                     f"partition, not a whole number of (count, mean, variance * count) "
                                     f"triples", value=x.free_size, limit="multiple of 3")
        if dst.partitions != x.partitions or dst.free_size != 2:
            raise ShapeMismatchError(f"shape mismatch: bn_aggr dst {dst.shape} must be "
                                     f"[{x.partitions}, 2]", value=dst.shape, limit=(x.partitions, 2))
        if self.full:
            self._carried = []
            (vals,) = self._inputs(x, carry=True)
            triples = vals.reshape(len(vals), -1, 3).astype(np.float64)
            count, mean, m2 = triples[..., 0], triples[..., 1], triples[..., 2]
            total = count.sum(axis=1)
            with np.errstate(all="ignore"):
                grand = (count * mean).sum(axis=1) / total
                # Chan et al.: the pieces' M2 plus each piece's spread of its mean about the grand mean
                spread = (m2 + count * (mean - grand[:, None]) ** 2).sum(axis=1)
                variance = spread / total
            self._store(dst, np.stack([grand, variance], axis=1).astype(np.float32))
            self._carry_to(dst)
        dur = self._cost_ns(DVE, "bn_aggr", (x,), (dst,))
        return self._issue(DVE, "bn_aggr", dur, (x,), dst)

    def tensor_tensor_scan(self, dst, data0, data1, initial, op0, op1, reverse0=False,
                           reverse1=False) -> int:
        """Per partition, along the free axes (flattened) [nki.isa.tensor_tensor_scan]:
        dst[:, 0] = (data0[:, 0] <op0> initial) <op1> data1[:, 0];
        dst[:, i] = (data0[:, i] <op0> dst[:, i-1]) <op1> data1[:, i]  (Vector engine).
        `initial`: a number or a [P, 1] view; at most one of data0/data1 in PSUM."""
        dst = _view(dst, "dst")
        a = _view(data0, "data0")
        b = _view(data1, "data1")
        for v, what in ((a, "data0"), (b, "data1"), (dst, "dst")):
            self._onchip(v, what, "tensor_tensor_scan")
        self._one_psum_input(a, b, "tensor_tensor_scan", "data0 and data1", "nki.isa.tensor_tensor_scan")
        self._same_tile(a, b, "tensor_tensor_scan", "data0 vs data1")
        self._same_tile(dst, a, "tensor_tensor_scan", "dst vs data0")
        _, f0 = ops.binary(op0)
        _, f1 = ops.binary(op1)
        c0, v0 = self._operand(initial, a.partitions, "tensor_tensor_scan", "initial")
        reads = (a, b) if v0 is None else (a, b, v0)
        if self.full:
            (x, bad_x), (y, bad_y) = self._garbage(a), self._garbage(b)
            carry = np.broadcast_to(np.asarray(c0, np.float32).reshape(-1, 1), (len(x), 1))[:, 0]
            out = np.empty_like(x)
            with np.errstate(all="ignore"):
                for i in range(x.shape[1]):
                    t = f0(carry, x[:, i]) if reverse0 else f0(x[:, i], carry)
                    carry = (f1(y[:, i], t) if reverse1 else f1(t, y[:, i])).astype(np.float32)
                    out[:, i] = carry
            self._store(dst, out)
            if bad_x is not None or bad_y is not None:   # garbage runs on along its partition
                bad = (np.zeros_like(x, bool) if bad_x is None else bad_x) | (False if bad_y is None else bad_y)
                self._poison_from(dst, np.logical_or.accumulate(bad, axis=1), a, b)
        dur = cost.tensor_tensor_scan_cycles(self.spec, a.free_size) * self._clock_ns[DVE]
        return self._issue(DVE, "tensor_tensor_scan", dur, reads, dst)

    def tensor_scalar_reduce(self, dst, data, op0, operand0, reduce_op, reduce_res,
                             reverse0=False) -> int:
        """dst = data <op0> operand0 and reduce_res[P, 1] = reduce_op of it along all free axes, one
        Vector instruction [nki.isa.tensor_scalar_reduce]; reduce_op: add, multiply, maximum, minimum."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        r = _view(reduce_res, "reduce_res")
        for v, what in ((x, "data"), (dst, "dst"), (r, "reduce_res")):
            self._onchip(v, what, "tensor_scalar_reduce")
        self._same_tile(dst, x, "tensor_scalar_reduce", "dst vs data")
        if r.partitions != x.partitions or r.free_size != 1:
            raise ShapeMismatchError(f"shape mismatch: tensor_scalar_reduce reduce_res {r.shape} must be "
                                     f"[{x.partitions}, 1] (one value per partition)", value=r.shape,
                                     limit=(x.partitions, 1))
        _, f0 = ops.binary(op0)
        _, fr = ops.reduce(reduce_op)
        c0, v0 = self._operand(operand0, x.partitions, "tensor_scalar_reduce", "operand0")
        reads = (x,) if v0 is None else (x, v0)
        if self.full:
            vals, garbage = self._garbage(x)
            with np.errstate(all="ignore"):
                out = f0(c0, vals) if reverse0 else f0(vals, c0)
            self._store(dst, out)
            self._store(r, fr(np.asarray(out, np.float32), axis=1, keepdims=True))
            if garbage is not None:
                self._poison_from(dst, garbage, x)
                self._poison_from(r, garbage.any(axis=1), x)
        dur = cost.tensor_scalar_reduce_cycles(self.spec, x.free_size) * self._clock_ns[DVE]
        return self._issue(DVE, "tensor_scalar_reduce", dur, reads, dst, also_write=r)

    def tensor_partition_reduce(self, dst, data, op) -> int:
        """dst[1, ...] = op over the partitions of data[P, ...] (GpSimd engine, SBUF only)
        [nki.isa.tensor_partition_reduce]; op: add, maximum, bitwise_or, bitwise_and."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        self._onchip(x, "data", "tensor_partition_reduce", psum_ok=False)
        self._onchip(dst, "dst", "tensor_partition_reduce", psum_ok=False)
        name, fn = ops.reduce(op)
        if dst.partitions != 1 or dst.free_size != x.free_size:
            raise ShapeMismatchError(f"shape mismatch: tensor_partition_reduce of {x.shape} gives one "
                                     f"partition of {x.free_size} elements, dst is {dst.shape}",
                                     value=dst.shape, limit=(1, x.free_size))
        if self.full:
            garbage = x.undefined()
            vals = np.asarray(x.values()).reshape(x.partitions, -1)
            if name not in ops.BITVEC:
                vals = vals.astype(np.float32)
            self._store(dst, fn(vals, axis=0, keepdims=True))
            # a column of the result is garbage where any partition of it was
            self._poison_from(dst, None if garbage is None else garbage.reshape(x.partitions, -1).any(axis=0), x)
        cycles = cost.tensor_partition_reduce_cycles(self.spec, x.partitions, x.free_size)
        return self._issue(POOL, "tensor_partition_reduce", cycles * self._clock_ns[POOL], (x,), dst)
