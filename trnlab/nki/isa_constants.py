"""`nki.isa.constants`: the enumerations the `nki.isa` instructions take (AWS's NKI Library imports
``from nki.isa.constants import oob_mode, dge_mode, matmul_perf_mode``).

The classes are `nki.isa`'s own (nki.isa.engine, reduce_cmd, dge_mode, oob_mode, nc_version,
matmul_perf_mode pages of AWS's NKI reference); any other name is read from `nki.isa`.
"""
from __future__ import annotations

from trnlab.nki.isa_binder import dge_mode, engine, nc_version, oob_mode, reduce_cmd  # noqa: F401
from trnlab.nki.perf_mode import matmul_perf_mode  # noqa: F401


def __getattr__(name: str):
    from trnlab.nki import isa
    try:
        return getattr(isa, name)
    except AttributeError:
        raise AttributeError(f"module 'nki.isa.constants' has no attribute {name!r}") from None
