"""nc_matmul's one/zero hints: ``is_stationary_onezero`` / ``is_moving_onezero``.

AWS's words [NC-MATMUL] (nki.isa.nc_matmul, NKI 0.7 / v2.33.0, and every page since beta 1, "Parameters"):
"is_stationary_onezero – hints to the compiler whether the ``stationary`` operand is a tile with ones/zeros
only; setting this field explicitly could lead to 2x better performance if ``stationary`` tile is in float32;
the field has no impact for non-float32 ``stationary``" (``is_moving_onezero`` the same for ``moving``).

What trnlab makes of them:

- **values**: the ordinary matmul; a hint changes nothing the result holds;
- **cost** (`cost._tensor_engine`, `cost.onezero_passes`): a float32 matmul streams its columns
  `fp32_matmul_factor` (4) times ("4 * max(min(64, N_stationary), N_moving)" for float32, the page's
  "Estimated instruction cost" up to NKI 2.26); each hint on a float32 operand halves that — the page's
  "2x better performance", taken at its upper bound ("could lead to"); both hints on float32 operands
  halve it twice, the bf16 rate (**ASSUMED**: the page states each hint's 2x, not the two together). A
  hint on an operand of another dtype costs nothing and saves nothing ("no impact for non-float32");
- **a false hint** (an operand flagged that holds another value): the page says nothing of the result.
  trnlab is stricter than the chip here (**ASSUMED**: the faster pass reads a flagged float32 operand as
  0/1, so any other value would come out wrong): in full mode an nc_matmul whose flagged float32 operand
  holds a written value other than 0.0 / -0.0 / 1.0 (NaN included) raises `OneZeroHintError`, naming the
  operand, the first such element and its value (`check`); elements never written are garbage, which
  the uninitialized-read rules already follow. A flagged operand of another dtype is not checked ("no
  impact"). Timing mode holds no values and cannot check.

[NC-MATMUL] AWS Neuron docs, NKI API "nki.isa.nc_matmul".
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .errors import OneZeroHintError

#: nc_matmul's hint attributes, in the order of its signature (stationary's, moving's)
HINTS = ("is_stationary_onezero", "is_moving_onezero")


def hint_attrs(stationary: bool, moving: bool) -> dict:
    """The hint keyword arguments of an nc_matmul as it is issued: only the hints that are set, so a
    matmul without hints is recorded and costed exactly as before the hints existed."""
    return {name: True for name, flag in zip(HINTS, (stationary, moving)) if flag}


def check(view, what: str, opcode: str = "nc_matmul") -> None:
    """Full mode: refuse a float32 operand `view` flagged as holding ones and zeros only when a written
    element is neither 0 nor 1 (module docstring: what the page says, what is ASSUMED)."""
    dtype = getattr(view, "read_dtype", view.tensor.dtype)     # (a tile retyped by .view: the type read)
    if dtype != dtypes.float32:
        return                                      # "the field has no impact for non-float32"
    values = np.asarray(view.values())
    bad = (values != 0) & (values != 1)             # NaN compares unequal to both: refused
    undefined = view.undefined()
    if undefined is not None:
        bad &= ~np.asarray(undefined).reshape(bad.shape)
    if not bad.any():
        return
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))
    raise OneZeroHintError(
        f"nc_matmul one/zero hint: {opcode} is_{what}_onezero=True, but float32 {what} "
        f"{view.tensor.name!r} holds {float(values[where])!r} at {where} ({int(bad.sum())} elements not 0 or 1); "
        f"the hint says the operand \"is a tile with ones/zeros only\" [nki.isa.nc_matmul]",
        value=float(values[where]), limit=(0.0, 1.0))
