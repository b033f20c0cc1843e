"""`nki.isa`'s register-accumulating instructions of NKI 0.7: tensor_scalar_cumulative (a running
reduction along each partition), exponential (exp(x - max) with a running sum) and activate2
(tensor-scalar, activation and reduction in one instruction).

Names, signatures and semantics are AWS's (awsdocs-neuron.readthedocs-hosted.com, NKI API
reference, v2.31.0 / v2.33.0 pages "nki.isa.<name>"); the hardware side, rules and costs are
`trnlab/hardware/accumulate.py`. Both call styles go through the one binder (`isa_binder.instruction`).
"""
from __future__ import annotations

from trnlab.nki import issue
from trnlab.nki import tensor_indirection as _ti
from trnlab.nki.isa_binder import (Dtype, Op, Operand, Tile, _engine, _finish, engine, instruction, op_name,
                                   reduce_cmd)
from trnlab.nki.isa_vector import _scalar_operand


def _command(value) -> str:
    return value.name if isinstance(value, reduce_cmd) else (value or "idle")


@instruction(functional=("src", "op0", "op1", "imm0", "imm1", "reduce_cmd"))
def tensor_scalar_cumulative(dst: Tile | None, src: Tile, op0: Op, op1: Op, imm0: Operand,
                             imm1: Operand | None = None, reduce_cmd: reduce_cmd = reduce_cmd.idle,
                             name: str = "", *, dtype: Dtype | None = None) -> Tile | None:
    """Per partition, along the free axes: reg = op1(src[i] <op0> imm0, reg); dst[i] = reg, with reg the
    Vector engine's register, started by reduce_cmd (reset_reduce: op1's identity, load_reduce: imm1,
    reduce: as it is) (Vector engine) [nki.isa.tensor_scalar_cumulative]: a cumulative sum, product,
    max or min in one instruction."""
    src = issue.tile(src, "src")
    launch = issue.begin()

    def emit(out, _accumulate):
        if _ti.uses(out, src, imm0, imm1):       # Tensor Indirection: the offsets are read when it runs
            return _ti.emit(launch, "tensor_scalar_cumulative", out, src, None,
                            {"op0": op_name(op0), "op1": op_name(op1), "reduce_cmd": _command(reduce_cmd)},
                            operand0=imm0, operand1=imm1)
        launch.core.tensor_scalar_cumulative(dst=out.hw_view(), src=src.hw_view(), op0=op_name(op0),
                                             op1=op_name(op1), imm0=_scalar_operand(imm0, {}),
                                             imm1=None if imm1 is None else _scalar_operand(imm1, {}),
                                             reduce_cmd=_command(reduce_cmd))

    return _finish(dst, emit, src.shape, dtype or src.dtype, "sbuf")


@instruction(functional=("src", "max_value", "reduce_res", "reduce_cmd", "reduce_init"))
def exponential(dst: Tile | None, src: Tile, max_value: Operand = 0.0, reduce_res: Tile | None = None,
                reduce_cmd: reduce_cmd = reduce_cmd.idle, reduce_init: Operand = 0.0, name: str = "", *,
                dtype: Dtype | None = None) -> Tile | None:
    """dst = exp(src - max_value) and, with reduce_cmd, its sum along the free axes in the Vector
    engine's registers, read into reduce_res (Vector engine, NeuronCore-v4+) [nki.isa.exponential]: a
    softmax numerator and denominator in one instruction."""
    src = issue.tile(src, "src")
    result = None if reduce_res is None else issue.tile(reduce_res, "reduce_res")
    launch = issue.begin()

    def emit(out, _accumulate):
        if _ti.uses(out, src, max_value, result):   # Tensor Indirection: the offsets are read when it runs
            return _ti.emit(launch, "exponential", out, src, None,
                            {"reduce_cmd": _command(reduce_cmd), "reduce_init": float(reduce_init)},
                            operand0=max_value, reduce_res=result)
        launch.core.exponential(dst=out.hw_view(), src=src.hw_view(), max_value=_scalar_operand(max_value, {}),
                                reduce_res=None if result is None else result.hw_view(),
                                reduce_cmd=_command(reduce_cmd), reduce_init=_scalar_operand(reduce_init, {}))

    return _finish(dst, emit, src.shape, dtype or src.dtype, "sbuf")


@instruction(functional=("op", "data", "imm0", "imm1", "op0", "op1"))
def activate2(dst: Tile | None, op: Op, data: Tile, imm0: Operand, imm1: Operand, op0: Op, op1: Op,
              relu_param: Operand = 0.0, reverse0: bool = False, reverse1: bool = False, reduce_op: Op | None = None,
              reduce_res: Tile | None = None, reduce_cmd: reduce_cmd = reduce_cmd.idle,
              engine: engine = engine.scalar, name: str = "", *, dtype: Dtype | None = None) -> Tile | None:
    """dst = op((data <op0> imm0) <op1> imm1), optionally reduced (reduce_op) along the free axes in the
    Scalar engine's registers into reduce_res under reduce_cmd; (op0, op1) one of AWS's six pairs with
    nl.bypass for none (Scalar engine, or GpSimd; NeuronCore-v4+) [nki.isa.activate2]."""
    data = issue.tile(data, "data")
    result = None if reduce_res is None else issue.tile(reduce_res, "reduce_res")
    engine_name = _engine(engine, "act")
    launch = issue.begin()

    def emit(out, _accumulate):
        if _ti.uses(out, data, imm0, imm1, result):   # Tensor Indirection: the offsets are read when it runs
            return _ti.emit(launch, "activate2", out, data, None,
                            {"op": op_name(op), "op0": op_name(op0), "op1": op_name(op1),
                             "relu_param": float(relu_param), "reverse0": bool(reverse0), "reverse1": bool(reverse1),
                             "reduce_op": None if reduce_op is None else op_name(reduce_op),
                             "reduce_cmd": _command(reduce_cmd), "engine": engine_name},
                            operand0=imm0, operand1=imm1, reduce_res=result)
        launch.core.activate2(dst=out.hw_view(), op=op_name(op), data=data.hw_view(),
                              imm0=_scalar_operand(imm0, {}), imm1=_scalar_operand(imm1, {}),
                              op0=op_name(op0), op1=op_name(op1), relu_param=float(relu_param),
                              reverse0=bool(reverse0), reverse1=bool(reverse1),
                              reduce_op=None if reduce_op is None else op_name(reduce_op),
                              reduce_res=None if result is None else result.hw_view(),
                              reduce_cmd=_command(reduce_cmd), engine=engine_name)

    return _finish(dst, emit, data.shape, dtype or data.dtype, "sbuf")
