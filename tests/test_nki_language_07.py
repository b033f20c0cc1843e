"""NKI 0.7's language names the NKI Library needs (trnlab/nki/language_07.py, nki.typing.mutable_tensor)
and the library's QoR metrics from a run (trnlab/nki/qor.py), on kernels of our own in AWS's style."""
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
import trnlab.nki.typing as nt
from trnlab.hardware import ops
from trnlab.nki.qor import QOR_METRICS, qor


# -- activation functions ------------------------------------------------------------------------------
def _torch_reference(name: str, x: np.ndarray) -> np.ndarray:
    """Each function from PyTorch: the forward ones directly, the _dx ones by autograd."""
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    forward = {
        "gelu_apprx_sigmoid": lambda v: v * torch.sigmoid(1.702 * v),
        "gelu_apprx_sigmoid_dx": lambda v: v * torch.sigmoid(1.702 * v),
        "gelu_dx": lambda v: torch.nn.functional.gelu(v),
        "silu_dx": lambda v: torch.nn.functional.silu(v),
        "erf_dx": lambda v: torch.erf(v),
        "mish": lambda v: torch.nn.functional.mish(v),
    }[name]
    y = forward(t)
    if name.endswith("_dx"):
        (grad,) = torch.autograd.grad(y.sum(), t)
        return grad.numpy()
    return y.detach().numpy()


NEW_ACTIVATIONS = ["gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx", "gelu_dx", "silu_dx", "erf_dx", "mish"]


@nki.jit
def apply_activation(x, op_name):
    """out = op(x) with the nl function, and again through nisa.activation(op=nl.<function>)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out_isa = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    fn = getattr(nl, op_name)
    nl.store(out, fn(tile))
    via_isa = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.activation(dst=via_isa, op=fn, data=tile)
    nl.store(out_isa, via_isa)
    return out, out_isa


@pytest.mark.parametrize("name", NEW_ACTIVATIONS)
def test_activation_functions_match_pytorch_on_the_scalar_engine(name):
    x = np.random.default_rng(0).normal(0, 2, (128, 64)).astype(np.float32)
    out, out_isa = apply_activation(x, name)
    expected = _torch_reference(name, x.astype(np.float64))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out, out_isa)
    run = nki.run(apply_activation, x, name)
    assert run.profile().instructions.get("activation") == 2      # one Scalar-engine instruction each


@settings(max_examples=60, deadline=None)
@given(st.floats(-8, 8, allow_nan=False), st.sampled_from(["gelu_apprx_sigmoid", "gelu_dx", "silu_dx", "erf_dx"]))
def test_derivative_functions_are_the_derivatives(x, name):
    """gelu_dx / silu_dx / erf_dx / gelu_apprx_sigmoid_dx are the slopes of gelu / silu / erf /
    gelu_apprx_sigmoid."""
    base = {"gelu_apprx_sigmoid": "gelu_apprx_sigmoid", "gelu_dx": "gelu", "silu_dx": "silu", "erf_dx": "erf"}[name]
    derivative = name if name.endswith("_dx") else "gelu_apprx_sigmoid_dx"
    f, df = ops.ACTIVATION[base], ops.ACTIVATION[derivative]
    h = 1e-5
    slope = (f(np.float64(x + h)) - f(np.float64(x - h))) / (2 * h)
    assert df(np.float64(x)) == pytest.approx(slope, rel=1e-5, abs=1e-6)


def test_gelu_apprx_sigmoid_is_close_to_gelu():
    """The sigmoid approximation stays within 0.021 of GELU everywhere (it is an approximation of it)."""
    x = np.linspace(-10, 10, 20001)
    assert np.max(np.abs(ops.ACTIVATION["gelu_apprx_sigmoid"](x) - ops.ACTIVATION["gelu"](x))) < 0.021


# -- NKIObject ------------------------------------------------------------------------------------------
class TileConfig(nl.NKIObject):
    rows: int
    cols: int
    tiles: int = 1
    note: str

    def __post_init__(self):
        self.tiles = self.rows // 128


class PaddedTileConfig(TileConfig):
    pad: int = 0


@dataclass(frozen=True)
class FrozenConfig(nl.NKIObject):
    scale: float = 2.0
    bias: float = 0.0


def test_nkiobject_builds_from_annotated_fields_by_keyword_or_in_order():
    by_keyword = TileConfig(cols=512, rows=256)
    assert (by_keyword.rows, by_keyword.cols, by_keyword.tiles, by_keyword.note) == (256, 512, 2, None)
    in_order = TileConfig(384, 64)
    assert (in_order.rows, in_order.cols, in_order.tiles) == (384, 64, 3)
    padded = PaddedTileConfig(128, 32, pad=4)            # base class fields first, then the subclass's
    assert (padded.rows, padded.cols, padded.pad, padded.tiles) == (128, 32, 4, 1)


class Section(nl.NKIObject):
    index = None          # plain class attributes, no annotations (as the NKI Library writes some)
    offset = 0


@dataclass
class SectionFields(nl.NKIObject):
    index = None          # plain class attributes under @dataclass: still fields, by keyword
    offset = 0

    def shifted(self):
        return self.offset + 1


def test_nkiobject_keywords_set_any_attribute():
    section_fields = SectionFields(index=2, offset=5)
    assert (section_fields.index, section_fields.offset, section_fields.shifted()) == (2, 5, 6)
    assert SectionFields().offset == 0
    section = Section(index=3)
    assert (section.index, section.offset) == (3, 0)
    config = TileConfig(rows=128, depth=3)
    assert (config.depth, config.tiles) == (3, 1)


def test_nkiobject_refuses_too_many_or_repeated_fields_by_name():
    with pytest.raises(TypeError, match="twice"):
        TileConfig(128, rows=256)
    with pytest.raises(TypeError, match="takes 4 fields"):
        TileConfig(1, 2, 3, 4, 5)


@dataclass
class Dims(nl.NKIObject):
    rows: int
    cols: int
    groups: int = 1


def test_nkiobject_dataclass_subclasses_keep_the_dataclass_init():
    config = FrozenConfig(scale=3.0)
    assert (config.scale, config.bias) == (3.0, 0.0)
    with pytest.raises(Exception):        # frozen: a dataclass's FrozenInstanceError
        config.scale = 1.0
    dims = Dims(4, groups=2)              # a field without a default that is left out is None
    assert (dims.rows, dims.cols, dims.groups) == (4, None, 2)
    assert Dims(1, 2) == Dims(rows=1, cols=2)


@nki.jit
def scale_rows(x, config: FrozenConfig, tiling: TileConfig):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.range(tiling.tiles):
        rows = slice(t * 128, (t + 1) * 128)
        tile = nl.load(x[rows, :])
        nl.store(out[rows, :], nl.add(nl.multiply(tile, config.scale), config.bias))
    return out


def test_nkiobject_configures_a_kernel_and_equal_frozen_configs_share_one_program():
    x = np.arange(256 * 32, dtype=np.float32).reshape(256, 32)
    out = scale_rows(x, FrozenConfig(scale=0.5, bias=1.0), TileConfig(rows=256, cols=32))
    np.testing.assert_allclose(out, x * 0.5 + 1.0)
    tiling = TileConfig(rows=256, cols=32)       # a plain NKIObject is equal only to itself, as in Python
    first = nki.trace(scale_rows, x, FrozenConfig(scale=0.5), tiling)
    again = nki.trace(scale_rows, x, FrozenConfig(scale=0.5), tiling)
    other = nki.trace(scale_rows, x, FrozenConfig(scale=0.25), tiling)
    assert first is again
    assert first is not other


# -- aliases and typing -----------------------------------------------------------------------------
def test_nl_bool_and_nl_range_are_the_library_spellings():
    assert nl.bool == nl.bool_ and np.dtype(nl.bool).itemsize == 1
    assert list(nl.range(3)) == [0, 1, 2]


@nki.jit
def fill_outputs(x, total: nt.mutable_tensor, doubled: nt.mutable_tensor):
    """Writes the caller-allocated outputs it is given (nt.mutable_tensor) and returns them."""
    assert isinstance(total, nt.mutable_tensor) and isinstance(total, nt.tensor)
    tile = nl.load(x)
    nl.store(total, nl.add(tile, 1.0))
    nl.store(doubled, nl.multiply(tile, 2.0))
    return total, doubled


def test_mutable_tensor_arguments_are_written_and_returned():
    x = np.ones((128, 16), np.float32)
    total, doubled = np.zeros_like(x), np.zeros_like(x)
    out_total, out_doubled = fill_outputs(x, total, doubled)
    np.testing.assert_array_equal(out_total, 2.0)
    np.testing.assert_array_equal(out_doubled, 2.0)
    assert not total.any()             # results are return values; the caller's array is its own


# -- the NKI Library's QoR metrics -------------------------------------------------------------------------
@nki.jit
def transpose_then_matmul(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    a_tile, b_tile = nl.load(a), nl.load(b)                   # [128, 128], [128, 512]
    a_t = nisa.nc_transpose(a_tile)
    nl.store(out, nl.copy(nl.matmul(a_t, b_tile, transpose_x=True)))
    return out


def test_qor_metrics_follow_the_library_collectors_formulas():
    a = np.ones((128, 128), nl.bfloat16)
    b = np.ones((128, 512), nl.bfloat16)
    run = nki.run(transpose_then_matmul, a, b)
    metrics = qor(run)
    assert set(metrics) == set(QOR_METRICS)
    spec = run.core.spec
    seconds = run.latency_ns * 1e-9
    assert metrics["InferenceTime"] == pytest.approx(seconds)
    assert 0 < metrics["ActiveInferenceTime"] <= seconds
    assert metrics["TpbSgCyclesSum"] == round(run.timeline.total_ns * 1e-9 * spec.pe_clock_hz)
    matmul_flops = 2 * 128 * 128 * 512                          # the transpose's FLOPs are left out
    assert metrics["ProfilerMFU"] == pytest.approx(100 * matmul_flops / (2 * 128 * 128 * spec.pe_clock_hz * seconds))
    moved = a.nbytes + b.nbytes + 128 * 512 * 4
    assert metrics["MbuEstimatedPercent"] == pytest.approx(100 * moved / (seconds * spec.hbm_bandwidth))


@nki.jit
def copy_halves(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows = slice(nl.program_id(0) * 128, (nl.program_id(0) + 1) * 128)
    nl.store(out[rows, :], nl.load(x[rows, :]))
    return out


def test_qor_of_a_two_core_launch_counts_both_cores():
    x = np.ones((256, 1024), np.float32)
    run = nki.run(copy_halves[nl.nc(2)], x)
    metrics = qor(run)
    spec = run.core.spec
    seconds = run.latency_ns * 1e-9
    assert metrics["MbuEstimatedPercent"] == pytest.approx(100 * 2 * x.nbytes / (seconds * 2 * spec.hbm_bandwidth))
    assert metrics["ProfilerMFU"] == 0.0


@nki.jit
def buffers_in_order(x):
    """nl.ndarray / nl.zeros with the buffer given in order (AWS's ndarray(shape, dtype, buffer=None, name=''))."""
    out = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
    tile = nl.ndarray(x.shape, x.dtype, nl.sbuf, "tile")
    nisa.dma_copy(dst=tile, src=x)
    zeros = nl.zeros(x.shape, x.dtype, nl.sbuf)
    nl.store(out, nl.add(tile, zeros))
    return out


def test_allocation_buffer_and_name_may_be_given_in_order():
    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    np.testing.assert_array_equal(buffers_in_order(x), x)


@nki.jit
def where_tiles_live(x):
    """Each tensor's .buffer compared with the nl memories, as kernels branch on it."""
    on_chip = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    assert on_chip.buffer == nl.sbuf and on_chip.buffer != nl.psum
    assert x.buffer in (nl.hbm, nl.shared_hbm, nl.private_hbm) and out.buffer == nl.shared_hbm
    nisa.dma_copy(dst=on_chip, src=x)
    nl.store(out, on_chip)
    return out


def test_a_tensors_buffer_compares_equal_to_its_nl_memory():
    x = np.ones((128, 8), np.float32)
    np.testing.assert_array_equal(where_tiles_live(x), x)
    assert nl.sbuf == "sbuf" and nl.sbuf != nl.hbm and len({nl.sbuf, nl.sbuf, nl.psum}) == 2
