"""`nki.builtin`: the module AWS's NKI Library harness binds as the global ``builtin`` in simulation
mode (``builtins.builtin = nki_cpu_simulator.nki.builtin``). No kernel of the library reads it; it
gives `language` and `isa`, and reads any other name from `nki.language`.
"""
from __future__ import annotations

from trnlab.nki import isa, language  # noqa: F401


def __getattr__(name: str):
    try:
        return getattr(language, name)
    except AttributeError:
        raise AttributeError(f"module 'nki.builtin' has no attribute {name!r}") from None
