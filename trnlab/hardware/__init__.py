"""trnlab.hardware — a simulated NeuronCore (see docs/hardware_api.md for the contract).

    from trnlab.hardware import NeuronCore, presets, dtypes
    core = NeuronCore(presets.TRN2.core, mode="full")     # or mode="timing"
"""
from . import cost, dtypes, errors, ops, presets
from . import gemm  # noqa: E402  (the reference tiled GEMM driver)
from .core import NeuronCore, start_partition_ok
from .errors import *  # noqa: F401,F403  (one class per hardware rule)
from .errors import HardwareError
from .memory import HBM, OnChipMemory
from .presets import (TRN1, TRN1_32XLARGE, TRN2, TRN2_48XLARGE, TRN2_ULTRASERVER, TRN3,
                      TRN3_ULTRASERVER_GEN1, TRN3_ULTRASERVER_GEN2, ChipSpec, CoreSpec,
                      ServerSpec, derive)
from .profile import Profile
from .tensor import Tensor, View
from .timeline import Instruction, Timeline

__all__ = [
    "NeuronCore", "Tensor", "View", "Timeline", "Instruction", "Profile", "HBM", "OnChipMemory",
    "CoreSpec", "ChipSpec", "ServerSpec", "derive", "presets", "dtypes", "errors", "ops", "cost", "gemm",
    "HardwareError", "start_partition_ok",
    "TRN1", "TRN2", "TRN3", "TRN1_32XLARGE", "TRN2_48XLARGE", "TRN2_ULTRASERVER",
    "TRN3_ULTRASERVER_GEN1", "TRN3_ULTRASERVER_GEN2",
]
