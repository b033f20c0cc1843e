"""The Vector, Scalar and GpSimd engines' element-wise instructions (names as in ``nki.isa``):
copies, element-wise arithmetic, activation functions, fills, selections, small transposes, the
random stream.

Each checks its rules (`core.NeuronCore._onchip`, `_same_tile`, ...), computes its values in full
mode (fp32 inside the engine, rounded to dst's dtype), costs it (`cost.py`) and issues it
(`core.NeuronCore._issue`). Composed into `core.NeuronCore`.
"""
from __future__ import annotations

import numpy as np

from . import cost, dtypes, ops
from . import retype as _retype
from .engines import ACT, DVE, POOL
from .errors import MatmulShapeError, ShapeMismatchError, UnknownOpError
from .operands import _view
from .dependencies import record_reads as _record_reads, wait_reads as _wait_reads
from .tensor import Tensor, View


class VectorInstructions:
    """NeuronCore's element-wise Vector / Scalar / GpSimd instructions (`core.NeuronCore`)."""

    def tensor_copy(self, dst, src, engine="vector", src_dtype=None, dst_dtype=None) -> int:
        """dst = src, cast to dst's dtype, on any compute engine (e.g. PSUM -> SBUF). ``src_dtype`` /
        ``dst_dtype``: that operand's bytes read as this type, of any element size (a tile retyped by
        ``.view(dtype)``: `retype.py`; its shape, values and cost in that type's elements)."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        eid = self._engine(engine, "tensor_copy")
        self._onchip(src, "src", "tensor_copy", psum_ok=eid != POOL)
        self._onchip(dst, "dst", "tensor_copy", psum_ok=eid != POOL)
        src_type = _retype.read_as(src, src_dtype, "tensor_copy src", any_size=True)
        dst_type = _retype.read_as(dst, dst_dtype, "tensor_copy dst", any_size=True)
        if src_type.itemsize == src.tensor.itemsize and dst_type.itemsize == dst.tensor.itemsize:
            self._same_tile(dst, src, "tensor_copy", "dst vs src")
        else:
            _retype.same_tile(dst, dst_type, src, src_type, "tensor_copy", "dst vs src")
        if self.full:
            self._tensor_copy_values(dst, src, src_type, dst_type)
        dur = self._cost_ns(eid, "tensor_copy", (src,), (dst,),
                            read_as=_retype.type_names((src, src_type), (dst, dst_type)))
        return self._issue(eid, "tensor_copy", dur, (src,), dst)

    def _tensor_copy_values(self, dst: View, src: View, src_type=None, dst_type=None) -> None:
        """Full mode: dst = src cast; garbage is copied element on element to where it goes. `src_type` /
        `dst_type`: the types their bytes are read as (`retype.py`), by default their own."""
        src_type = src.tensor.dtype if src_type is None else src_type
        dst_type = dst.tensor.dtype if dst_type is None else dst_type
        garbage = _retype.typed_mask(src.undefined(), src, src_type)
        values = _retype.values_as(src, src_type)
        values = np.reshape(values, _retype.typed_shape(dst, dst_type)).astype(dst_type, copy=False)
        dst.write(_retype.stored_as(values, dst, dst_type))
        if garbage is not None:
            origin = src.tensor.poison_origin or (
                f"tensor_copy read never-written {src.tensor.name!r}[{src._index_str()}]"
                + (f" at {self.note}" if self.note else ""))
            garbage = _retype.own_mask(garbage.reshape(_retype.typed_shape(dst, dst_type)), dst, dst_type)
            dst.set_poison(garbage.reshape(dst.shape), origin)

    def tensor_tensor(self, dst, data1, data2, op, engine="vector", dst_dtype=None, data1_dtype=None,
                      data2_dtype=None) -> int:
        """dst = data1 <op> data2, element-wise (Vector or GpSimd engine). ``*_dtype``: that operand's bytes
        read (written) as this type of the same size (a tile retyped by ``.view(dtype)``: `retype.py`)."""
        if dst_dtype or data1_dtype or data2_dtype:
            dst, data1, data2 = (_retype.typed(x, t, f"tensor_tensor {n}") for x, t, n in (
                (dst, dst_dtype, "dst"), (data1, data1_dtype, "data1"), (data2, data2_dtype, "data2")))
        dst = _view(dst, "dst")
        a = _view(data1, "data1")
        b = _view(data2, "data2")
        eid = self._engine(engine, "tensor_tensor", (DVE, POOL))
        name, fn = ops.binary(op)
        for v, what in ((a, "data1"), (b, "data2"), (dst, "dst")):
            self._onchip(v, what, "tensor_tensor", psum_ok=eid != POOL)
        self._one_psum_input(a, b, "tensor_tensor", "data1 and data2", "nki.isa.tensor_tensor")
        self._same_tile(a, b, "tensor_tensor", "data1 vs data2")
        self._same_tile(dst, a, "tensor_tensor", "dst vs data1")
        if self.full:
            self._carried = []
            x, y = self._inputs(a, b, carry=True)
            if name in ops.BITVEC:
                x, y = a.values().reshape(x.shape), b.values().reshape(y.shape)
            with np.errstate(all="ignore"):
                self._store(dst, fn(x, y))
            self._carry_to(dst)
        dur = self._cost_ns(eid, "tensor_tensor", (a, b), (dst,), op=name)
        return self._issue(eid, "tensor_tensor", dur, (a, b), dst)

    def _operand(self, operand, P: int, opcode: str, what: str, carry: bool = False):
        """A scalar float or a [P, 1] view; returns (fp32 value or None, view or None)."""
        if isinstance(operand, (Tensor, View)):
            v = _view(operand, what)
            self._onchip(v, what, opcode)
            if v.partitions != P or v.free_size != 1:
                raise ShapeMismatchError(f"shape mismatch: {opcode} {what} {v.shape} must be "
                                         f"[{P}, 1] (one value per partition)", value=v.shape,
                                         limit=(P, 1))
            return (self._inputs(v, carry=carry)[0] if self.full else None), v
        return np.float32(operand), None

    def tensor_scalar(self, dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                      reverse1=False, engine="vector", dst_dtype=None, data_dtype=None) -> int:
        """dst = (data <op0> operand0) <op1> operand1; operands are scalars or [P, 1] views. ``dst_dtype`` /
        ``data_dtype``: a tile retyped by ``.view(dtype)`` (`retype.py`)."""
        if dst_dtype or data_dtype:
            dst, data = (_retype.typed(dst, dst_dtype, "tensor_scalar dst"),
                         _retype.typed(data, data_dtype, "tensor_scalar data"))
        dst = _view(dst, "dst")
        x = _view(data, "data")
        eid = self._engine(engine, "tensor_scalar")
        self._onchip(x, "data", "tensor_scalar", psum_ok=eid != POOL)
        self._onchip(dst, "dst", "tensor_scalar", psum_ok=eid != POOL)
        self._same_tile(dst, x, "tensor_scalar", "dst vs data")
        n0, f0 = ops.binary(op0)
        self._carried = []
        c0, v0 = self._operand(operand0, x.partitions, "tensor_scalar", "operand0", carry=True)
        reads = (x,) if v0 is None else (x, v0)
        if op1 is not None:
            n1, f1 = ops.binary(op1)
            c1, v1 = self._operand(operand1, x.partitions, "tensor_scalar", "operand1", carry=True)
            if v1 is not None:
                reads = reads + (v1,)
        if self.full:
            (vals,) = self._inputs(x, carry=True)
            if n0 in ops.BITVEC:             # bit patterns: the integers themselves, not their fp32 values
                vals, c0 = x.values().reshape(vals.shape), _bits(operand0, c0)
            with np.errstate(all="ignore"):
                out = f0(c0, vals) if reverse0 else f0(vals, c0)
                if op1 is not None:
                    c1 = _bits(operand1, c1) if n1 in ops.BITVEC else c1
                    out = f1(c1, out) if reverse1 else f1(out, c1)
            self._store(dst, out)
            self._carry_to(dst)
        dur = self._cost_ns(eid, "tensor_scalar", (x,), (dst,))
        return self._issue(eid, "tensor_scalar", dur, reads, dst)

    def scalar_tensor_tensor(self, dst, data, op0, operand0, op1, operand1, reverse0=False,
                             reverse1=False, engine="vector") -> int:
        """dst = (data <op0> operand0) <op1> operand1 in one instruction: operand0 a scalar or a
        [P, 1] view, operand1 a tile of data's shape [nki.isa.scalar_tensor_tensor]."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        other = _view(operand1, "operand1")
        eid = self._engine(engine, "scalar_tensor_tensor", (DVE, POOL))
        for v, what in ((x, "data"), (other, "operand1"), (dst, "dst")):
            self._onchip(v, what, "scalar_tensor_tensor", psum_ok=eid != POOL)
        self._one_psum_input(x, other, "scalar_tensor_tensor", "data and operand1",
                             "nki.isa.scalar_tensor_tensor")
        self._same_tile(other, x, "scalar_tensor_tensor", "operand1 vs data")
        self._same_tile(dst, x, "scalar_tensor_tensor", "dst vs data")
        name0, f0 = ops.binary(op0)
        name1, f1 = ops.binary(op1)
        c0, v0 = self._operand(operand0, x.partitions, "scalar_tensor_tensor", "operand0")
        reads = (x, other) if v0 is None else (x, v0, other)
        if self.full:
            self._carried = []
            vals, rhs = self._inputs(x, other, carry=True)
            with np.errstate(all="ignore"):
                out = f0(c0, vals) if reverse0 else f0(vals, c0)
                out = f1(rhs, out) if reverse1 else f1(out, rhs)
            self._store(dst, out)
            self._carry_to(dst)
        fast = (x.tensor.dtype == dtypes.bfloat16 and other.tensor.dtype == dtypes.bfloat16
                and name0 == "subtract" and name1 == "multiply")
        dur = self._cost_ns(eid, "scalar_tensor_tensor", (x, other), (dst,), fast_mode=fast)
        return self._issue(eid, "scalar_tensor_tensor", dur, reads, dst)

    def activation(self, dst, data, op, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
                   reduce_cmd=None, dst_dtype=None, data_dtype=None) -> int:
        """dst = op(data * scale + bias) on the Scalar engine; bias/scale: scalar or [P, 1] view.

        The engine can also sum the activated values of each partition along the free axes into
        its reduce registers (one fp32 per partition) [nki.isa.activation]: `reduce_cmd` "reset"
        zeroes them, "reduce" adds this instruction's sums, "reset_reduce" stores them, "idle"
        leaves them; with `reduce_res` ([P, 1]) the registers are then read out into it. Without
        a reduce_cmd, reduce_res gets this instruction's sums (reset_reduce, i.e.
        nisa.activation_reduce). The registers can only add. Cost max(MIN_II, N), plus MIN_II when
        the registers are used [nki.isa.activation_reduce]. ``dst_dtype`` / ``data_dtype``: a tile retyped
        by ``.view(dtype)`` (`retype.py`).
        """
        if dst_dtype or data_dtype:
            dst, data = (_retype.typed(dst, dst_dtype, "activation dst"),
                         _retype.typed(data, data_dtype, "activation data"))
        if reduce_cmd is None:
            reduce_cmd = "reset_reduce" if reduce_res is not None else "idle"
        if reduce_cmd not in ("idle", "reset", "reduce", "reset_reduce"):
            raise ValueError(f"activation reduce_cmd must be idle, reset, reduce or reset_reduce, "
                             f"got {reduce_cmd!r}")
        dst = _view(dst, "dst")
        x = _view(data, "data")
        name, fn = ops.activation(op)
        self._onchip(x, "data", "activation")
        self._onchip(dst, "dst", "activation")
        self._same_tile(dst, x, "activation", "dst vs data")
        reduce_view = None
        if reduce_res is not None or reduce_cmd in ("reduce", "reset_reduce"):
            reduce_name = ops.op_name(reduce_op if reduce_op is not None else "add")
            if reduce_name != "add":
                raise UnknownOpError(
                    f"activation reduce_op: the Scalar engine's reduce registers only add, got "
                    f"{reduce_name!r} (reduce with a separate tensor_reduce for max/min)",
                    value=reduce_name, limit="add")
        if reduce_res is not None:
            reduce_view = _view(reduce_res, "reduce_res")
            self._onchip(reduce_view, "reduce_res", "activation")
            if reduce_view.partitions != x.partitions or reduce_view.free_size != 1:
                raise ShapeMismatchError(
                    f"shape mismatch: activation reduce_res {reduce_view.shape} must be "
                    f"[{x.partitions}, 1] (one value per partition)", value=reduce_view.shape,
                    limit=(x.partitions, 1))
        reads = (x,)
        b = None
        self._carried = []
        if bias is not None:
            b, bv = self._operand(bias, x.partitions, "activation", "bias", carry=True)
            if bv is not None:
                reads = reads + (bv,)
        s, sv = self._operand(scale, x.partitions, "activation", "scale", carry=True)
        if sv is not None:
            reads = reads + (sv,)
        if self.full:
            (vals,) = self._inputs(x, carry=True)
            with np.errstate(all="ignore"):
                pre = vals * s
                if b is not None:
                    pre = pre + b
                out = fn(pre)
            self._store(dst, out)
            # the registers sum the fp32 activated values, before dst's rounding
            regs = self._act_regs[x.part_start:x.part_start + x.partitions]   # one per lane
            if reduce_cmd in ("reset", "reset_reduce"):
                regs[:] = 0.0
            if reduce_cmd in ("reduce", "reset_reduce"):
                regs += np.asarray(out, np.float32).sum(axis=1)
            if reduce_view is not None:
                self._store(reduce_view, regs[:, None].copy())
            self._carry_to(dst, reduce_view)           # the sums hold garbage where a row did
        dur = self._cost_ns(ACT, "activation", (x,), (dst,),
                            reduce=reduce_view is not None or reduce_cmd != "idle")
        return self._issue(ACT, "activation", dur, reads, dst, also_write=reduce_view)

    def memset(self, dst, value=0.0, engine="vector") -> int:
        """Fill dst with a constant."""
        dst = _view(dst, "dst")
        eid = self._engine(engine, "memset")
        self._onchip(dst, "dst", "memset", psum_ok=eid != POOL)
        if self.full:
            dst.write(np.full(dst.shape, value).astype(dst.tensor.dtype))
        dur = self._cost_ns(eid, "memset", (), (dst,), inputs=1, zero=bool(np.all(np.asarray(value) == 0)))
        return self._issue(eid, "memset", dur, (), dst)

    def iota(self, dst, expr) -> int:
        """Write the integer pattern `expr` (an array broadcastable to dst) on GpSimd: 150 + N cycles."""
        dst = _view(dst, "dst")
        self._onchip(dst, "dst", "iota", psum_ok=False)
        if self.full:
            pattern = np.broadcast_to(np.asarray(expr), dst.shape)
            dst.write(pattern.astype(dst.tensor.dtype))
        dur = self._cost_ns(POOL, "iota", (), (dst,))
        return self._issue(POOL, "iota", dur, (), dst)

    def affine_select(self, dst, predicate, on_true, on_false_value) -> int:
        """dst = on_true where `predicate` holds, else on_false_value, on GpSimd: 150 + N cycles.

        `predicate` is the boolean array (broadcastable to dst) of a compile-time affine condition
        over the tile's indices, which the engine evaluates as it goes [nki.isa.affine_select]; the
        selection copies values, so inf and NaN pass through exactly."""
        dst = _view(dst, "dst")
        x = _view(on_true, "on_true")
        self._onchip(x, "on_true", "affine_select", psum_ok=False)
        self._onchip(dst, "dst", "affine_select", psum_ok=False)
        self._same_tile(dst, x, "affine_select", "dst vs on_true")
        if self.full:
            vals, garbage = self._garbage(x)
            holds = np.broadcast_to(np.asarray(predicate, bool), x.shape).reshape(vals.shape)
            self._store(dst, np.where(holds, vals, np.float32(on_false_value)))
            self._poison_from(dst, None if garbage is None else garbage & holds, x)  # where it was kept
        dur = self._cost_ns(POOL, "affine_select", (x,), (dst,))
        return self._issue(POOL, "affine_select", dur, (x,), dst)

    def select(self, dst, predicate, on_true, on_false, reverse_pred=False, engine="vector") -> int:
        """dst = on_true where predicate != 0 (== 0 with reverse_pred), else on_false: one Vector
        instruction (nki.isa.select_reduce without the reduction). on_false: a number, a [P, 1]
        view or a tile of on_true's shape. Values are copied, so inf and NaN pass through exactly.
        Cost: the Vector model, 100 + N per input tile."""
        dst = _view(dst, "dst")
        pred = _view(predicate, "predicate")
        x = _view(on_true, "on_true")
        eid = self._engine(engine, "select", (DVE, POOL))
        for v, what in ((pred, "predicate"), (x, "on_true"), (dst, "dst")):
            self._onchip(v, what, "select", psum_ok=eid != POOL)
        self._one_psum_input(pred, x, "select", "predicate and on_true", "nki.isa.select_reduce")
        self._same_tile(pred, x, "select", "predicate vs on_true")
        self._same_tile(dst, x, "select", "dst vs on_true")
        reads = (pred, x)
        other = None
        if isinstance(on_false, (Tensor, View)):
            other = _view(on_false, "on_false")
            if other.free_size != 1 or other.partitions != x.partitions:
                self._onchip(other, "on_false", "select", psum_ok=eid != POOL)
                self._same_tile(other, x, "select", "on_false vs on_true")
                reads = reads + (other,)
                false_value = None
            else:
                false_value, other = self._operand(on_false, x.partitions, "select", "on_false")
                reads = reads + (other,)
                other = None
        else:
            false_value = np.float32(on_false)
        if self.full:
            (flags, bad_pred), (vals, bad_true) = self._garbage(pred), self._garbage(x)
            holds = (flags == 0) if reverse_pred else (flags != 0)
            bad_false = None
            if other is not None:
                false_value, bad_false = self._garbage(other)
            self._store(dst, np.where(holds, vals, false_value))
            # garbage where the predicate was, or where the chosen value was
            bad = np.zeros(vals.shape, bool)
            for mask, where in ((bad_pred, True), (bad_true, holds), (bad_false, ~holds)):
                if mask is not None:
                    bad |= mask & where
            self._poison_from(dst, bad, pred, x, *(() if other is None else (other,)))
        tiles = 3 if other is not None else 2
        dur = self._cost_ns(eid, "select", (pred, x), (dst,), inputs=tiles)
        return self._issue(eid, "select", dur, reads, dst)

    def vector_transpose(self, dst, src) -> int:
        """dst[F, P] = src[P, F].T on the Vector engine (nisa.nc_transpose(engine=nisa.vector_engine)):
        SBUF or PSUM operands, at most 32 x 32 [nki.isa.nc_transpose: "Vector Engine ... 32x32"].
        Cost: the Vector model for one input (static + N)."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        self._onchip(src, "src", "nc_transpose")
        self._onchip(dst, "dst", "nc_transpose")
        P, F = src.partitions, src.free_size
        if P > 32 or F > 32:
            raise MatmulShapeError(f"matmul tile shape: nc_transpose on the Vector engine of [{P}, {F}]; both "
                                   f"sides must be <= 32 (use the Tensor engine for larger tiles)",
                                   value=(P, F), limit=32)
        if dst.partitions != F or dst.free_size != P:
            raise ShapeMismatchError(f"shape mismatch: nc_transpose dst {dst.shape}, expected [{F}, {P}]",
                                     value=dst.shape, limit=(F, P))
        if self.full:
            self._transpose_values(dst, src)
        dur = self._cost_ns(DVE, "vector_transpose", (src,), (dst,))
        return self._issue(DVE, "nc_transpose", dur, (src,), dst)

    def set_rng_seed(self, seed) -> int:
        """Seed the engines' random number generator with an int or a [1, 1] view (its value is read
        in full mode) [nki.language.random_seed]; a tiny Vector instruction (ASSUMED cost: static)."""
        reads = ()
        if isinstance(seed, (Tensor, View)):
            v = _view(seed, "seed")
            self._onchip(v, "seed", "random_seed")
            reads = (v,)
        if self.full:
            self._seed_values(seed)
        dur = self.spec.vector_static_cycles * self._clock_ns[DVE]
        idx = len(self._records)
        ready, waited = _wait_reads(reads, 0.0, -1)
        start, end, waited = self.engine_times.queue(DVE, ready, waited, dur)
        _record_reads(reads, end, idx)
        return self._append(DVE, "random_seed", start, end, end, 0.0, 0, 0, 0, waited)

    def _seed_values(self, seed) -> None:
        """Full mode: seed the random stream with an int or the value of a [1, 1] view."""
        if isinstance(seed, (Tensor, View)):
            v = _view(seed, "seed")
            v.check_initialized()
            seed = int(np.asarray(v.values()).reshape(-1)[0])
        self._rng = np.random.default_rng(int(seed) & 0xFFFFFFFF)
        self._seed_generators(int(seed))      # the XORWOW generators of nisa.rng (system.py)

    def dropout(self, dst, data, rate) -> int:
        """dst = data with each element set to 0 with probability `rate` (a number or a [P, 1] view),
        Vector engine [nki.isa.dropout]; no rescaling. The random stream is NumPy's PCG64 seeded by
        set_rng_seed (0 before any seed): deterministic, not the hardware's generator."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        self._onchip(x, "data", "dropout")
        self._onchip(dst, "dst", "dropout")
        self._same_tile(dst, x, "dropout", "dst vs data")
        p, pv = self._operand(rate, x.partitions, "dropout", "rate")
        reads = (x,) if pv is None else (x, pv)
        if self.full:
            vals, garbage = self._garbage(x)
            rng = getattr(self, "_rng", None)
            if rng is None:
                rng = self._rng = np.random.default_rng(0)
            keep = rng.random(vals.shape, dtype=np.float32) >= np.asarray(p, np.float32).reshape(-1, 1)
            self._store(dst, np.where(keep, vals, np.float32(0)))
            self._poison_from(dst, None if garbage is None else garbage & keep, x)
        dur = cost.dropout_cycles(self.spec, x.free_size) * self._clock_ns[DVE]
        return self._issue(DVE, "dropout", dur, reads, dst)


def _bits(operand, value):
    """A bitvec operator's scalar operand as an integer (a [P, 1] tile's fp32 values rounded)."""
    if isinstance(operand, (Tensor, View)):
        return np.asarray(value).astype(np.int64)
    return np.int64(operand)
