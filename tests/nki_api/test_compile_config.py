"""NKI 0.7's per-kernel compile configuration (nki.compiler.CompileConfig, SpecializationConfig,
AddressRotation; awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/api/nki.compiler.html): each option
trnlab honours changes what trnlab does, each it cannot honour is refused by name, wrong types raise
TypeError as AWS's configuration errors do. Kernels of our own in AWS's style."""
import warnings

import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import errors
from trnlab.nki.compile_config import NestedConfigError, UnsupportedCompileOption
from tests.nki_kernels import direct_allocation as allocation_kernels

RNG = np.random.default_rng(7)


def add_one(x):
    tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    result = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=result, data=tile, op0=nl.add, operand0=1.0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)
    return out


def add_one_at_a_fixed_address(x):
    tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    nisa.dma_copy(dst=tile, src=x)
    nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1.0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


X = RNG.standard_normal((128, 64)).astype(np.float32)


def test_a_configured_kernel_computes_what_the_unconfigured_one_does():
    config = ncc.CompileConfig(address_rotation=ncc.AddressRotation.AUTO, non_ssa_legalization=True,
                               nki_alloc_fallback=True, prefetch_auto=False, dead_code_elim=False,
                               barrier_check=False)
    kernel = nki.jit(add_one, compile_config=config,
                     specialization_config=ncc.SpecializationConfig(allow_nested_config_override=False))
    np.testing.assert_array_equal(kernel(X), X + 1)


def test_nki_alloc_fallback_false_surfaces_the_overflow_trnlabs_fallback_would_fix():
    q = RNG.standard_normal((128, 1024)).astype(np.float32)
    k = RNG.standard_normal((128, 1024)).astype(np.float32)
    func = allocation_kernels.all_products_then_reduce.func
    fallback = nki.jit(func, compile_config=ncc.CompileConfig(nki_alloc_fallback=True))
    np.testing.assert_allclose(fallback(q, k), (q.T @ k).reshape(1024, 2, 512).max(-1), rtol=1e-5)
    surfaced = nki.jit(func, compile_config=ncc.CompileConfig(nki_alloc_fallback=False))
    with pytest.raises((errors.PSUMOverflowError, errors.SBUFOverflowError), match="nki_alloc_fallback=False"):
        surfaced(q, k)


@pytest.mark.parametrize("rotation", [ncc.AddressRotation.AUTO, ncc.AddressRotation.DISABLE])
def test_fixed_addresses_stay_where_the_kernel_put_them_under_auto_and_disable(rotation):
    kernel = nki.jit(add_one_at_a_fixed_address, compile_config=ncc.CompileConfig(address_rotation=rotation))
    np.testing.assert_array_equal(kernel(X), X + 1)


def test_address_rotation_enable_is_refused_on_a_kernel_that_fixes_addresses_only():
    enable = ncc.CompileConfig(address_rotation=ncc.AddressRotation.ENABLE)
    np.testing.assert_array_equal(nki.jit(add_one, compile_config=enable)(X), X + 1)
    with pytest.raises(UnsupportedCompileOption, match="address_rotation=AddressRotation.ENABLE"):
        nki.jit(add_one_at_a_fixed_address, compile_config=enable)(X)


@pytest.mark.parametrize("option", ["prefetch_auto", "dead_code_elim", "barrier_check"])
def test_options_trnlab_cannot_honour_are_refused_by_name(option):
    kernel = nki.jit(add_one, compile_config=ncc.CompileConfig(**{option: True}))
    with pytest.raises(UnsupportedCompileOption, match=f"{option}=True"):
        kernel(X)


def test_wrong_types_and_options_of_other_releases_raise_type_error():
    with pytest.raises(TypeError, match="address_rotation must be an nki.compiler.AddressRotation"):
        ncc.CompileConfig(address_rotation="enable")
    with pytest.raises(TypeError, match="no option 'opt_level'"):
        ncc.CompileConfig(opt_level=2)
    with pytest.raises(TypeError, match="is a bool"):
        ncc.SpecializationConfig(allow_nested_config_override="yes")
    with pytest.raises(TypeError, match="takes an nki.compiler.CompileConfig"):
        nki.jit(add_one, compile_config={"prefetch_auto": True})


def _nested(inner_config, outer_config, special=None):
    inner = nki.jit(add_one, compile_config=inner_config)

    def outer(x):
        return inner(x)
    return nki.jit(outer, compile_config=outer_config, specialization_config=special)


def test_a_nested_kernel_with_another_config_is_refused_unless_the_top_level_allows_it():
    agree = _nested(ncc.CompileConfig(nki_alloc_fallback=True), ncc.CompileConfig(nki_alloc_fallback=True))
    np.testing.assert_array_equal(agree(X), X + 1)
    disagree = _nested(ncc.CompileConfig(non_ssa_legalization=True), None)
    with pytest.raises(NestedConfigError, match="called from inside another kernel"):
        disagree(X)
    allowed = _nested(ncc.CompileConfig(non_ssa_legalization=True), None,
                      ncc.SpecializationConfig(allow_nested_config_override=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(allowed(X), X + 1)
    assert any("allow_nested_config_override=True" in str(w.message) for w in caught)
