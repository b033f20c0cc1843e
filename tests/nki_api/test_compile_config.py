"""NKI's per-kernel compile configuration (nki.compiler.CompileConfig, SpecializationConfig,
AddressRotation; awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/api/nki.compiler.html; and the options
and enums of AWS's pages of 2026-11-13: Allocation, AllocationMode, SchedulingHeuristic, OptLevel): each option
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
    with pytest.raises(TypeError, match="opt_level must be an nki.compiler.OptLevel or None"):
        ncc.CompileConfig(opt_level=2)
    with pytest.raises(TypeError, match="experimental_allocation_mode must be an nki.compiler.AllocationMode"):
        ncc.CompileConfig(allocation=ncc.Allocation.LINEAR, experimental_allocation_mode="FAST")
    with pytest.raises(TypeError, match="no option 'opt_levels'"):
        ncc.CompileConfig(opt_levels=ncc.OptLevel.O1)
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


# -- the allocation and scheduling flows of AWS's pages of 2026-11-13 ------------------------------------

LINEAR = ncc.Allocation.LINEAR


def rows_through_one_buffer(x, w):
    """out[r] = w.T @ x[r] for each row r of x [R, 128, 256]: every row loaded into one SBUF buffer declared
    before the loop, "a loop that reuses one tensor" (AWS's tuning guide)."""
    out = nl.ndarray((x.shape[0], 128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    w_sb = nl.ndarray((128, 128), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w_sb, src=w)
    x_sb = nl.ndarray((128, 256), dtype=x.dtype, buffer=nl.sbuf)
    for r in nl.sequential_range(x.shape[0]):
        nisa.dma_copy(dst=x_sb, src=x[r])
        acc = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=w_sb, moving=x_sb)
        y = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=y, src=acc)
        nisa.dma_copy(dst=out[r], src=y)
    return out


ROWS_X = RNG.standard_normal((8, 128, 256)).astype(np.float32)
ROWS_W = RNG.standard_normal((128, 128)).astype(np.float32)


def _rows(config):
    kernel = nki.jit(rows_through_one_buffer, compile_config=config)
    program = nki.trace(kernel, ROWS_X, ROWS_W, target="trn2")
    run = nki.run(kernel, nki.ShapeDtype(ROWS_X.shape, "float32"), nki.ShapeDtype(ROWS_W.shape, "float32"),
                  target="trn2", timing_only=True)
    return sum("~v" in b.name for b in program.buffers), run.latency_us


def test_the_default_flow_rotates_a_reused_tile_and_nki_allocation_keeps_it_unless_split():
    versions = {name: _rows(config) for name, config in {
        "default": None,
        "coloring, rotation disabled": ncc.CompileConfig(address_rotation=ncc.AddressRotation.DISABLE),
        "linear": ncc.CompileConfig(allocation=LINEAR),
        "linear, split_reused_buffers": ncc.CompileConfig(allocation=LINEAR, split_reused_buffers=True)}.items()}
    # neuronx-cc's flow (address rotation AUTO) and split_reused_buffers give each of the 8 loads its own
    # tile (7 new versions); rotation disabled and NKI allocation keep one, and each load waits for the
    # previous row's matmul
    assert [v[0] for v in versions.values()] == [7, 0, 0, 7]
    assert versions["default"][1] == versions["linear, split_reused_buffers"][1]
    assert versions["linear"][1] == versions["coloring, rotation disabled"][1]
    assert versions["default"][1] < 0.8 * versions["linear"][1]
    kernel = nki.jit(rows_through_one_buffer, compile_config=ncc.CompileConfig(allocation=LINEAR))
    np.testing.assert_allclose(kernel(ROWS_X, ROWS_W), np.einsum("pq,rpw->rqw", ROWS_W, ROWS_X),
                               rtol=1e-3, atol=1e-3)


def test_nki_scheduling_picks_the_list_schedule_s_heuristic_and_trivial_keeps_program_order():
    def order(heuristic):
        config = ncc.CompileConfig(allocation=LINEAR, scheduling=True, experimental_scheduling_heuristic=heuristic)
        return nki.trace(nki.jit(rows_through_one_buffer, compile_config=config), ROWS_X, ROWS_W, target="trn2")
    trivial, asap = order(ncc.SchedulingHeuristic.TRIVIAL), order(ncc.SchedulingHeuristic.ASAP)
    assert trivial.schedule in (None, "program")
    assert asap.schedule == "list"
    assert order(ncc.SchedulingHeuristic.CRITICAL_PATH).schedule == "list:critical_path"
    assert order(ncc.SchedulingHeuristic.DMA_PREFETCH).schedule == "list:dma_prefetch"
    assert [i.opcode for i in trivial.instructions][:3] == ["dma_copy", "dma_copy", "nc_matmul"]


@pytest.mark.parametrize("options, message", [
    (dict(scheduling=True), "scheduling=True needs an allocation; set allocation=Allocation.LINEAR as well."),
    (dict(allocation=ncc.Allocation.COLORING, scheduling=True),
     "scheduling=True needs allocation=Allocation.LINEAR, got allocation=Allocation.COLORING"),
    (dict(split_reused_buffers=True),
     "split_reused_buffers acts only when NKI allocates; it cannot be set with allocation=Allocation.COLORING."),
    (dict(allocation=ncc.Allocation.COLORING, experimental_allocation_mode=ncc.AllocationMode.RING),
     "experimental_allocation_mode acts only when NKI allocates"),
    (dict(allocation=LINEAR, experimental_scheduling_heuristic=ncc.SchedulingHeuristic.CRITICAL_PATH),
     "experimental_scheduling_heuristic acts only when NKI schedules; set scheduling=True as well."),
])
def test_option_combinations_aws_refuses_raise_its_value_errors(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ncc.CompileConfig(**options)


@pytest.mark.parametrize("options, refused", [
    (dict(allocation=LINEAR, opt_level=ncc.OptLevel.O2), "opt_level=OptLevel.O2"),
    (dict(allocation=LINEAR, dma_copy_elim=True), "dma_copy_elim=True"),
    (dict(allocation=LINEAR, engine_balancing=True), "engine_balancing=True"),
])
def test_nki_allocation_options_trnlab_does_not_model_are_refused_by_name(options, refused):
    with pytest.raises(UnsupportedCompileOption, match=refused):
        nki.jit(add_one, compile_config=ncc.CompileConfig(**options))(X)


@pytest.mark.parametrize("options", [
    dict(allocation=LINEAR, experimental_allocation_mode=ncc.AllocationMode.RING),
    dict(allocation=LINEAR, experimental_allocation_mode=ncc.AllocationMode.FAST),
    dict(allocation=LINEAR, experimental_allocation_mode=ncc.AllocationMode.MAX_REUSE),
    dict(allocation=LINEAR, opt_level=ncc.OptLevel.O0), dict(opt_level=ncc.OptLevel.O2),
    dict(allocation=LINEAR, scheduling=True, split_reused_buffers=True, dma_copy_elim=False),
    dict(allocation=ncc.Allocation.COLORING, address_rotation=ncc.AddressRotation.AUTO),
])
def test_options_trnlab_honours_compute_what_the_unconfigured_kernel_does(options):
    np.testing.assert_array_equal(nki.jit(add_one, compile_config=ncc.CompileConfig(**options))(X), X + 1)


def test_the_schedule_heuristic_switch_sets_the_default_list_schedule_s_rule_and_a_config_overrides_it():
    from trnlab import config
    plain = nki.jit(rows_through_one_buffer)
    trivial = nki.jit(rows_through_one_buffer, compile_config=ncc.CompileConfig(
        allocation=LINEAR, scheduling=True, experimental_scheduling_heuristic=ncc.SchedulingHeuristic.TRIVIAL))
    # a directive on one kernel of a function leaves the function's other kernels as they are
    kept_order = nki.compiler.skip_middle_end_transformations(nki.jit(rows_through_one_buffer))
    with config.override(schedule_heuristic="critical_path"):
        assert nki.trace(plain, ROWS_X, ROWS_W, target="trn2").schedule == "list:critical_path"
        assert nki.trace(trivial, ROWS_X, ROWS_W, target="trn2").schedule in (None, "program")
        assert nki.trace(kept_order, ROWS_X, ROWS_W, target="trn2").schedule in (None, "program")
    assert nki.trace(plain, ROWS_X, ROWS_W, target="trn2").schedule == "list"       # not the cached program


def test_benchmark_profile_and_baremetal_wrappers_keep_the_kernel_s_directives_and_compile_config():
    # AWS's harnesses time a configured kernel through nki.benchmark(...)(kernel): the wrapper runs the kernel
    # the student configured, not a bare copy of its function
    configured = nki.jit(rows_through_one_buffer, compile_config=ncc.CompileConfig(allocation=LINEAR))
    ordered = nki.compiler.skip_middle_end_transformations(nki.jit(rows_through_one_buffer))
    for kernel in (configured, ordered):
        bench = nki.benchmark(warmup=1, iters=1)(kernel)
        assert bench.nki_directives == kernel.nki_directives
        bench(ROWS_X, ROWS_W)
        assert bench.benchmark_result.nc_latency.get_latency_percentile(99) == pytest.approx(
            nki.run(kernel, ROWS_X, ROWS_W).latency_us)
