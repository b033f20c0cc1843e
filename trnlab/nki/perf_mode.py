"""nki.isa.matmul_perf_mode: the Tensor engine's performance modes for `nisa.nc_matmul(perf_mode=...)`.

``none`` (the default) and ``double_row``, AWS's "Double FP8 mode, 2x matmul throughput by packing two
FP8 weight/ifmap element pairs" (nki.isa.matmul_perf_mode page); beta-1 kernels name the mode with the
string ``"double_row_gen3"`` (AWS's reference `quantized_double_row_matmul`). A double-row matmul takes
a stationary ``[K, 2, M]`` and a moving ``[K, 2, N]`` FP8 tile and writes ``[M, N]``; its rules, values
and cost are in `trnlab.hardware.double_row`.
"""
from __future__ import annotations

import enum

from trnlab.hardware import double_row as _double_row  # noqa: F401  (installs the instruction)
from trnlab.nki.errors import NKIError


class matmul_perf_mode(enum.Enum):
    """nki.isa.matmul_perf_mode: none, or double_row (FP8 double-row, NeuronCore-v3 and newer)."""
    none = "none"
    double_row = "double_row"


# the names a kernel may pass; the beta-1 string is "double_row_gen3"
_DOUBLE_ROW = {"double_row", "double_row_gen3", matmul_perf_mode.double_row}
_NONE = {None, "", "none", matmul_perf_mode.none}


def is_double_row(perf_mode) -> bool:
    """True for the double-row mode, False for none; any other value is refused by name."""
    if perf_mode in _NONE:
        return False
    if perf_mode in _DOUBLE_ROW:
        return True
    raise NKIError(f"nc_matmul(perf_mode={perf_mode!r}): unknown performance mode; expected "
                   f"nisa.matmul_perf_mode.none / .double_row (or 'double_row_gen3')")
