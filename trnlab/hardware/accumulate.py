"""NKI 0.7's instructions that run a value along each partition in an engine's registers:
tensor_scalar_cumulative (a running reduction, Vector engine), exponential (exp(x - max) with a
running sum, Vector engine, NeuronCore-v4) and activate2 (tensor-scalar, activation, reduction in one
Scalar-engine instruction, NeuronCore-v4).

The Vector engine's reduce registers (one fp32 per partition, `NeuronCore._dve_regs`) are shared by
these and range_select (`select.py`); the Scalar engine's are nisa.activation's (`_act_regs`).
Composed into `core.NeuronCore`. Semantics from AWS's NKI 0.7 pages, cited as [nki.isa.<name>]
(awsdocs-neuron.readthedocs-hosted.com, v2.31.0 / v2.33.0).
"""
from __future__ import annotations

import numpy as np

from . import ops
from .engines import ACT, DVE, POOL
from .errors import DtypeError, ShapeMismatchError, UnknownOpError
from .operands import _view
from .select import need_dtype, need_generation
from .tensor import Tensor, View

CUMULATIVE_DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3", "float8_e5m2", "uint8", "uint16", "int8",
                     "int16")                                   # [nki.isa.tensor_scalar_cumulative]
CUMULATIVE_OPS = ("add", "subtract", "multiply", "maximum", "minimum")
_START = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}
# activate2's tensor-scalar stage: the (op0, op1) pairs AWS lists [nki.isa.activate2]
ACTIVATE2_PAIRS = (("multiply", "add"), ("multiply", "subtract"), ("multiply", "bypass"), ("add", "bypass"),
                   ("subtract", "bypass"), ("bypass", "bypass"))


def _command(reduce_cmd) -> str:
    command = getattr(reduce_cmd, "name", reduce_cmd) or "idle"
    if command not in ("idle", "reset", "reduce", "reset_reduce", "load_reduce"):
        raise ValueError(f"reduce_cmd must be idle, reset, reduce, reset_reduce or load_reduce, got {reduce_cmd!r}")
    return command


class AccumulateInstructions:
    """NeuronCore's register-accumulating instructions of NKI 0.7 (`core.NeuronCore`)."""

    def tensor_scalar_cumulative(self, dst, src, op0, op1, imm0, imm1=None, reduce_cmd="idle") -> int:
        """Per partition, along the free axes (flattened), with reg the Vector engine's register:
        reg = op1(src[i] <op0> imm0, reg); dst[i] = reg (Vector engine) [nki.isa.tensor_scalar_cumulative].
        reduce_cmd: reset_reduce starts reg at op1's identity (0 for add/subtract, 1 multiply, -inf max,
        +inf min), load_reduce at imm1, reduce from the register as it is; the register keeps the
        last value. idle (AWS's default since 2.31; its pseudocode does not cover it): ASSUMED to
        start from the register and leave it unchanged. imm0/imm1: numbers or [P, 1] tiles."""
        dst, x = _view(dst, "dst"), _view(src, "src")
        self._onchip(x, "src", "tensor_scalar_cumulative")
        self._onchip(dst, "dst", "tensor_scalar_cumulative")
        self._same_tile(dst, x, "tensor_scalar_cumulative", "dst vs src")
        need_dtype(x, CUMULATIVE_DTYPES, "tensor_scalar_cumulative", "src")
        need_dtype(dst, CUMULATIVE_DTYPES, "tensor_scalar_cumulative", "dst")
        _, first = ops.binary(op0)
        second_name, second = ops.binary(op1)
        if second_name not in CUMULATIVE_OPS:
            raise UnknownOpError(f"unknown op: tensor_scalar_cumulative op1 is {second_name!r}; the reduction is one "
                                 f"of {', '.join(CUMULATIVE_OPS)} [nki.isa.tensor_scalar_cumulative]",
                                 value=second_name, limit=CUMULATIVE_OPS)
        command = _command(reduce_cmd)
        c0, v0 = self._operand(imm0, x.partitions, "tensor_scalar_cumulative", "imm0")
        c1, v1 = (None, None) if imm1 is None else self._operand(imm1, x.partitions, "tensor_scalar_cumulative",
                                                                 "imm1")
        reads = (x,) + tuple(v for v in (v0, v1) if v is not None)
        if self.full:
            (vals,) = self._inputs(x)
            regs = self._dve_regs[x.part_start:x.part_start + x.partitions]
            if command in ("reset", "reset_reduce"):
                reg = np.full(len(vals), _START[second_name], np.float32)
            elif command == "load_reduce":
                reg = np.broadcast_to(np.asarray(0.0 if c1 is None else c1, np.float32).reshape(-1, 1),
                                      (len(vals), 1))[:, 0].copy()
            else:
                reg = regs.copy()
            scaled = first(vals, np.broadcast_to(np.asarray(c0, np.float32).reshape(-1, 1), (len(vals), 1)))
            out = np.empty_like(vals)
            with np.errstate(all="ignore"):
                for i in range(vals.shape[1]):
                    reg = np.asarray(second(scaled[:, i], reg), np.float32)
                    out[:, i] = reg
            if command != "idle":
                regs[:] = reg
            self._store(dst, out)
        dur = self._cost_ns(DVE, "tensor_scalar_cumulative", (x,), (dst,))
        return self._issue(DVE, "tensor_scalar_cumulative", dur, reads, dst)

    def exponential(self, dst, src, max_value=0.0, reduce_res=None, reduce_cmd="idle", reduce_init=0.0) -> int:
        """dst = exp(src - max_value) in fp32 (max_value a number or a [P, 1] tile), and with reduce_cmd
        the sum of dst along the free axes into the Vector engine's registers, read into reduce_res
        (Vector engine; NeuronCore-v4 and newer) [nki.isa.exponential]. reduce_init (load_reduce only)
        is the registers' start."""
        need_generation(self, "exponential", "v4")
        dst, x = _view(dst, "dst"), _view(src, "src")
        self._onchip(x, "src", "exponential")
        self._onchip(dst, "dst", "exponential")
        self._same_tile(dst, x, "exponential", "dst vs src")
        command, _, r = self._reduce_target(reduce_cmd, "add", reduce_res, x, "exponential")
        if command != "load_reduce" and not isinstance(reduce_init, (Tensor, View)) and float(reduce_init) != 0.0:
            raise ValueError(f"exponential: reduce_init is {reduce_init}; it must be unset or 0.0 unless reduce_cmd "
                             f"is load_reduce [nki.isa.exponential]")
        m, mv = self._operand(max_value, x.partitions, "exponential", "max_value")
        init, iv = self._operand(reduce_init, x.partitions, "exponential", "reduce_init")
        reads = (x,) + tuple(v for v in (mv, iv) if v is not None)
        if self.full:
            (vals,) = self._inputs(x)
            with np.errstate(all="ignore"):
                out = np.exp(vals - np.broadcast_to(np.asarray(m, np.float32).reshape(-1, 1), (len(vals), 1)))
            self._store(dst, out)
            self._vector_reduce(command, "add", out, x, r, init=init)
        dur = self._cost_ns(DVE, "exponential", (x,), (dst,), reduce=command != "idle" or r is not None)
        return self._issue(DVE, "exponential", dur, reads, dst, also_write=r)

    def activate2(self, dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, reverse1=False,
                  reduce_op=None, reduce_res=None, reduce_cmd="idle", engine="scalar") -> int:
        """dst = op((data <op0> imm0) <op1> imm1), then optionally a reduction (reduce_op) of dst along
        the free axes in the Scalar engine's registers, under reduce_cmd as nisa.activation's (Scalar
        engine, or GpSimd without the reduction; NeuronCore-v4 and newer) [nki.isa.activate2]. (op0, op1)
        is one of AWS's six pairs (nl.bypass: no operation); reverse0/1 swap an operation's operands;
        imm0/imm1: numbers or [P, 1] tiles. relu_param: ASSUMED the slope of a leaky relu for op=relu
        (0.0: plain relu); refused with another op."""
        need_generation(self, "activate2", "v4")
        dst, x = _view(dst, "dst"), _view(data, "data")
        eid = self._engine(engine, "activate2", (ACT, POOL))
        self._onchip(x, "data", "activate2", psum_ok=eid != POOL)
        self._onchip(dst, "dst", "activate2", psum_ok=eid != POOL)
        self._same_tile(dst, x, "activate2", "dst vs data")
        name, fn = ops.activation(op)
        pair = (ops.op_name(op0), ops.op_name(op1))
        if pair not in ACTIVATE2_PAIRS:
            raise UnknownOpError(f"unknown op: activate2 (op0, op1) = {pair}; the tensor-scalar stage takes "
                                 f"{', '.join(map(str, ACTIVATE2_PAIRS))} [nki.isa.activate2]", value=pair,
                                 limit=ACTIVATE2_PAIRS)
        if float(relu_param) != 0.0 and name != "relu":
            raise UnknownOpError(f"unknown op: activate2 relu_param={relu_param} with op {name!r}: trnlab models "
                                 f"relu_param as a leaky-relu slope only", value=name, limit="relu")
        command = _command(reduce_cmd)
        reduce_name = None
        r = None
        if reduce_res is not None or command != "idle":
            if eid == POOL:
                raise DtypeError("data type: activate2 reduces on the Scalar engine only [nki.isa.activate2]",
                                 value="gpsimd", limit="scalar")
            reduce_name, _ = ops.reduce(reduce_op if reduce_op is not None else "add")
            if reduce_res is not None:
                r = _view(reduce_res, "reduce_res")
                self._onchip(r, "reduce_res", "activate2")
                if r.partitions != x.partitions or r.free_size != 1:
                    raise ShapeMismatchError(f"shape mismatch: activate2 reduce_res {r.shape} must be "
                                             f"[{x.partitions}, 1]", value=r.shape, limit=(x.partitions, 1))
        c0, v0 = self._operand(imm0, x.partitions, "activate2", "imm0")
        c1, v1 = self._operand(imm1, x.partitions, "activate2", "imm1")
        reads = (x,) + tuple(v for v in (v0, v1) if v is not None)
        if self.full:
            (vals,) = self._inputs(x)
            with np.errstate(all="ignore"):
                pre = _stage(vals, pair[0], c0, reverse0)
                pre = _stage(pre, pair[1], c1, reverse1)
                out = np.where(pre >= 0, pre, np.float32(relu_param) * pre) if name == "relu" else fn(pre)
            self._store(dst, out)
            if reduce_name is not None:
                _, reduce = ops.reduce(reduce_name)
                start = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "max": -np.inf, "minimum": np.inf,
                         "min": np.inf}[reduce_name]
                regs = self._act_regs[x.part_start:x.part_start + x.partitions]
                own = reduce(np.asarray(out, np.float32), axis=1)
                if command in ("reset", "reset_reduce"):
                    regs[:] = start
                if command in ("reduce", "reset_reduce"):
                    regs[:] = reduce(np.stack([regs, own]), axis=0)
                if r is not None:
                    self._store(r, (own if command == "idle" else regs)[:, None].copy())
        dur = self._cost_ns(eid, "activate2", (x,), (dst,), reduce=reduce_name is not None)
        return self._issue(eid, "activate2", dur, reads, dst, also_write=r)


def _stage(values: np.ndarray, op: str, operand, reverse: bool) -> np.ndarray:
    """One tensor-scalar operation of activate2 (bypass: the values unchanged)."""
    if op == "bypass":
        return values
    _, fn = ops.binary(op)
    c = np.broadcast_to(np.asarray(operand, np.float32).reshape(-1, 1), (len(values), 1))
    return fn(c, values) if reverse else fn(values, c)
