"""`nki.compiler.frontend`: the step that turns a kernel's Python into the compiler's program.

AWS's NKI Library test harness (test/utils/kernel_tracer.py, in its trace-only and compile modes)
imports ``NKIFrontend`` and ``ParserFrontend`` from ``nki.compiler.frontend`` and calls
``ParserFrontend().compile(kernel, inputs=..., target=..., lnc=..., artifacts_dir=..., ...)`` to
specialize a kernel for its inputs without running it ("NKI specializes kernels by tracing them with
Python. During tracing, each NKI API call records an operation in an intermediate representation",
Neuron 2.33 "Announcing changes to NKI specialization"). The zero-edit hook (`zero_edit.py`) serves
this module under that name.

In trnlab the intermediate representation is the traced `trnlab.hardware.Program`: `compile` traces
the kernel with the inputs (arrays become HBM inputs, the other values pass through, as in a run) on
the target's preset, LNC2 as the ``nl.nc(2)`` grid, and returns a `FrontendResult` holding the
program. The kernel's own checks (``kernel_assert``, shape rules) raise as they would on AWS's
frontend. There is no MLIR: ``result.module`` is None, and compiling on to a NEFF
(``nki.compiler.ncc_driver``) is not part of trnlab.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FrontendResult:
    """What a frontend's `compile` gives: the traced program (trnlab's IR) and the kernel's name."""
    program: object
    name: str
    module: object = None        # AWS's MLIR module; trnlab has none


class NKIFrontend:
    """The frontend interface: `compile(kernel, inputs, target, lnc)` -> a `FrontendResult`."""

    def compile(self, kernel, inputs: dict | None = None, target: str | None = None, lnc: int = 1,
                artifacts_dir=None, dump_python_ast: bool = False, output_names=None,
                **options) -> FrontendResult:
        import trnlab.nki as nki
        from trnlab.nki import language
        from trnlab.nki.platform import default_target
        kernel = kernel if isinstance(kernel, nki.Kernel) else nki.Kernel(getattr(kernel, "func", kernel))
        lnc = int(lnc or 1)
        if lnc > 1:
            kernel = kernel[language.nc(lnc)]
        program = nki.trace(kernel, target=_preset(target) or kernel.target or default_target(),
                            **dict(inputs or {}))
        return FrontendResult(program=program, name=kernel.func.__name__)


class ParserFrontend(NKIFrontend):
    """AWS's frontend that reads the kernel's Python source; here the same trace as every frontend."""


class TracerFrontend(NKIFrontend):
    """AWS's frontend that runs the kernel's Python (NKI 0.7's default); here the same trace."""


def _preset(target) -> str | None:
    """AWS's compile target ("trn2", "gen3", "trn3", ...) as a trnlab preset name, or None."""
    if target is None:
        return None
    text = str(target).lower().split(".")[-1]
    return {"gen2": "trn1", "inf2": "trn1", "gen3": "trn2", "gen4": "trn3"}.get(text, text)
