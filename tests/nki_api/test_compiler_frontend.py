"""nki.compiler.frontend (served from trnlab.nki.compiler_frontend by the zero-edit hook): the NKI
Library harness's trace-only step, ``ParserFrontend().compile(kernel, inputs=..., target=..., lnc=...)``,
specializes a kernel for its inputs without running it — in trnlab, the traced program; the kernel's own
checks raise during it."""
import numpy as np
import pytest

import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.nki import zero_edit
from trnlab.nki.compiler_frontend import NKIFrontend, ParserFrontend, TracerFrontend


def copy_rows(x, rows: int):
    assert rows <= x.shape[0], f"rows {rows} > {x.shape[0]}"          # a kernel's own check
    tile = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x[0:rows, :])
    out = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


X = np.zeros((128, 64), np.float32)


@pytest.mark.parametrize("frontend", [ParserFrontend(), TracerFrontend()])
@pytest.mark.parametrize("target, lnc, generation", [("trn2", 1, "v3"), ("trn3", 2, "v4"), ("gen2", 1, "v2")])
def test_compile_traces_the_kernel_for_the_target_and_lnc(frontend, target, lnc, generation):
    result = frontend.compile(copy_rows, inputs={"x": X, "rows": 32}, target=target, lnc=lnc)
    assert isinstance(frontend, NKIFrontend) and result.name == "copy_rows" and result.module is None
    assert result.program.spec.generation == generation
    dmas = [i for i in result.program.instructions if i.opcode == "dma_copy"]
    assert len(dmas) == 2 * lnc                     # one program per physical core of the logical core


def test_the_kernels_own_checks_raise_while_it_is_compiled():
    with pytest.raises(AssertionError, match="rows 200 > 128"):
        ParserFrontend().compile(copy_rows, inputs={"x": X, "rows": 200}, target="trn2", lnc=1)


def test_the_zero_edit_hook_serves_nki_compiler_frontend():
    zero_edit.install(force=True)
    try:
        from nki.compiler.frontend import ParserFrontend as served
        assert served is ParserFrontend
    finally:
        zero_edit.uninstall()
