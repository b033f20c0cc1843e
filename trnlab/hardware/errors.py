"""Errors of the simulated NeuronCore: one exception class per hardware rule.

Every message names the rule that was broken, the value seen and the limit, e.g.
``SBUF overflow: 26.0 MiB requested, 24.0 MiB per core``. All classes derive from
`HardwareError` (itself a `ValueError`), so ``except HardwareError`` catches any broken rule.
"""
from __future__ import annotations


class HardwareError(ValueError):
    """A program broke a rule of the (simulated) hardware."""

    rule = "hardware rule"

    def __init__(self, message: str, *, value=None, limit=None):
        super().__init__(message)
        self.value = value
        self.limit = limit


class PartitionLimitError(HardwareError):
    """More partitions than the memory has (128 on every NeuronCore) [ARCH-v2]."""
    rule = "partition limit"


class SBUFOverflowError(HardwareError):
    """An SBUF allocation does not fit in the bytes left per partition."""
    rule = "SBUF capacity"


class PSUMOverflowError(HardwareError):
    """A PSUM allocation does not fit in the bytes (banks) left per partition."""
    rule = "PSUM capacity"


class SBUFBlockTensorOverflowError(SBUFOverflowError):
    """A block tensor ``(B..., par_dim(P), F...)`` whose logical tiles, all live at once, need more
    bytes per partition than the whole SBUF: the kernel's loops as written keep every tile alive."""
    rule = "block tensor larger than SBUF"


class PSUMBlockTensorOverflowError(PSUMOverflowError):
    """A PSUM block tensor whose logical tiles, all live at once, need more than the 8 banks (AWS's
    attention tutorial v3: a (32, 8, par_dim(128), 512) fp32 qk written in full before it is read)."""
    rule = "block tensor larger than PSUM"


class DirectAllocationOverlapError(HardwareError):
    """Two tiles the kernel placed itself (``nki.compiler.sbuf/psum.mod_alloc``) share bytes while
    both are live at one instruction: each would overwrite the other's values. Direct allocations
    may share bytes only when their live ranges (first to last instruction) do not overlap."""
    rule = "direct allocation overlap"


class HBMOverflowError(HardwareError):
    """An HBM allocation does not fit in the core's share of device memory."""
    rule = "HBM capacity"


class PSUMBankError(HardwareError):
    """A Tensor-engine result (a matmul's dst) spans more than one 2 KiB PSUM bank per partition
    on NeuronCore-v2/-v3 [ARCH-v2] (`memory.check_pe_result`); a PSUM tensor itself may span banks."""
    rule = "PSUM bank"


class StartPartitionError(HardwareError):
    """An instruction's access starts on a partition the engines cannot start on [ARCH-v2]."""
    rule = "start partition"


class PartitionStrideError(HardwareError):
    """An access pattern strides (or gathers) across partitions, which engines cannot do [ARCH-v2]."""
    rule = "partition stride"


class PartitionAxisError(HardwareError):
    """An on-chip access whose first axis is not the partition axis."""
    rule = "partition axis first"


class MatmulShapeError(HardwareError):
    """nc_matmul operands break K <= 128, M <= 128, N <= 512 (from NeuronCore-v4: 16 KiB of dst per
    partition, `memory.moving_fmax`) or disagree on K [nki.isa.nc_matmul]."""
    rule = "matmul tile shape"


class PETilingError(MatmulShapeError):
    """nc_matmul's tiling mode broken: tile_size / tile_position outside the PE array's row and
    column tiles (2 x 64 from NeuronCore-v2, 4 x 32 from v3), or an operand larger than its tile
    [NC-MATMUL, "Tiling mode"]."""
    rule = "PE array tiling"


class OneZeroHintError(HardwareError):
    """nc_matmul(is_stationary_onezero= / is_moving_onezero=True) on a float32 operand holding a value other
    than 0 or 1. AWS's page calls the fields hints that the operand "is a tile with ones/zeros only" and says
    nothing of the result when it is not (trnlab/hardware/onezero.py: refused in full mode, ASSUMED)."""
    rule = "nc_matmul one/zero hint"


class ShapeMismatchError(HardwareError):
    """Operands of an instruction have shapes that do not match."""
    rule = "shape mismatch"


class MemoryPlacementError(HardwareError):
    """An operand lives in a memory the engine cannot read or write (e.g. matmul output not in PSUM)."""
    rule = "operand memory"


class PSUMToHBMError(MemoryPlacementError):
    """PSUM cannot be copied straight to HBM: go PSUM -> SBUF (tensor_copy) -> HBM [MM]."""
    rule = "PSUM to HBM"


class DtypeError(HardwareError):
    """A data type the instruction or memory does not support."""
    rule = "data type"


class FreeSizeError(HardwareError):
    """An access with more elements per partition than the engine's free-dimension limit [PERF]."""
    rule = "free size"


class UninitializedReadError(HardwareError):
    """Reading on-chip (or HBM) memory that was never written: the result would be garbage."""
    rule = "uninitialized read"


class FreedTensorError(HardwareError):
    """Using a tensor after its memory was freed."""
    rule = "use after free"


class EngineError(HardwareError):
    """An instruction asked for an engine that does not exist or cannot run it."""
    rule = "engine"


class UnknownOpError(HardwareError):
    """An operator name the engines do not implement."""
    rule = "unknown op"


class GenerationError(HardwareError):
    """An instruction the target's NeuronCore generation does not have (AWS: "available only on
    NeuronCore-v3 and newer")."""
    rule = "generation"


class IndexError_(HardwareError, IndexError):
    """An index outside the tensor's shape."""
    rule = "index out of range"


OutOfBoundsError = IndexError_
