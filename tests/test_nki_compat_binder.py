"""One signature table and one binder serve both call styles of nki.isa: functional (beta 1,
``t = nisa.nc_matmul(a, b)``) and destination (beta 2, ``nisa.nc_matmul(dst=, stationary=, moving=)``)."""
import inspect

import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.nki.errors import NKIError


def test_every_instruction_is_in_the_signature_table_with_every_parameter_typed():
    public = [name for name, fn in vars(nisa).items() if callable(fn) and hasattr(fn, "signature")]
    assert sorted(public) == sorted(nisa.SIGNATURES)
    for name, signature in nisa.SIGNATURES.items():
        parameters = inspect.signature(getattr(nisa, name)).parameters.values()
        untyped = [p.name for p in parameters if p.annotation is inspect.Parameter.empty]
        assert not untyped, f"nisa.{name}: untyped {untyped}"
        assert signature.destination[0] == ("val_dst" if name == "topk" else "dst")   # AWS's names
        assert "dst" not in (signature.functional or ())


def test_the_binder_reads_the_style_from_the_call():
    table = nisa.SIGNATURES
    tile = nisa.NkiTensor((128, 8), nl.float32, "sbuf")
    # functional: no dst, arguments in beta-1 order
    assert not table["nc_matmul"].is_destination((tile, tile), {})
    assert not table["tensor_scalar"].is_destination((tile, nl.multiply, 2.0), {})
    assert not table["activation"].is_destination((nl.exp, tile), {})
    assert not table["tensor_reduce"].is_destination((np.add, tile, 1), {})
    # destination: dst named, an extra positional tile, or a keyword re-filling a positional slot
    assert table["nc_matmul"].is_destination((), {"dst": tile, "stationary": tile, "moving": tile})
    assert table["nc_matmul"].is_destination((tile, tile, tile), {})
    assert table["tensor_copy"].is_destination((tile,), {"src": tile})
    assert table["activation"].is_destination((tile, nl.exp, tile), {})
    # a number where the functional signature has an operator: (dst, data0, data1, initial, op0, op1)
    assert table["tensor_tensor_scan"].is_destination((tile, tile, tile, 0.0, nl.multiply, nl.add), {})
    assert not table["tensor_tensor_scan"].is_destination((tile, tile, 0.0, nl.multiply, nl.add), {})
    assert table["dma_copy"].is_destination((), {"dst": tile, "src": tile})


def test_unknown_and_missing_parameters_are_named():
    @nki.jit
    def unknown(x):
        t = nl.load(x)
        nisa.tensor_copy(t, enigne=nisa.vector_engine)
        return x

    with pytest.raises(NKIError, match="no parameter 'enigne'.*engine"):
        unknown(np.ones((128, 8), np.float32))

    @nki.jit
    def missing(x):
        nisa.tensor_tensor(nl.load(x), nl.load(x))
        return x

    with pytest.raises(NKIError, match="missing required parameter.*op"):
        missing(np.ones((128, 8), np.float32))


@pytest.mark.parametrize("style", ["functional", "destination", "positional"])
def test_the_same_instructions_in_each_style_give_the_same_result_and_timeline(style):
    @nki.jit
    def kernel(a_tensor, b_tensor):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        a, b = nl.load(a_tensor), nl.load(b_tensor)
        if style == "functional":
            product = nisa.nc_matmul(a, b)
            scaled = nisa.tensor_scalar(product, nl.multiply, 0.5)
            shifted = nisa.activation(nl.exp, scaled, bias=None, scale=1.0)
        else:
            product = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            scaled = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            shifted = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            if style == "destination":
                nisa.nc_matmul(dst=product, stationary=a, moving=b)
                nisa.tensor_scalar(dst=scaled, data=product, op0=nl.multiply, operand0=0.5)
                nisa.activation(dst=shifted, op=nl.exp, data=scaled)
            else:
                nisa.nc_matmul(product, a, b)
                nisa.tensor_scalar(scaled, product, nl.multiply, 0.5)
                nisa.activation(shifted, nl.exp, scaled)
        nl.store(out, value=shifted)
        return out

    rng = np.random.default_rng(0)
    a = (rng.normal(size=(128, 128)) * 0.1).astype(np.float32)
    b = (rng.normal(size=(128, 512)) * 0.1).astype(np.float32)
    run = nki.run(kernel, a, b)
    np.testing.assert_allclose(run.outputs, np.exp(0.5 * (a.T @ b)), rtol=1e-5)
    opcodes = [(run.timeline[i].engine, run.timeline[i].opcode) for i in range(len(run.timeline))
               if not run.timeline[i].engine.startswith("dma")]
    assert opcodes == [("pe", "nc_matmul"), ("dve", "tensor_scalar"), ("act", "activation")]
