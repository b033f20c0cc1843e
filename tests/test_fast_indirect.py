"""The indirect DMA's fast path (trnlab/hardware/fast/indirect.py) against its reference
(`dma._shifted` + `unravel`): the same moved elements in the same order, the same `View`, and on a
MoE-style kernel of our own (token rows gathered by `vector_offset`, an expert's weights picked by
`scalar_offset`, rows scattered back by a `vector_offset` on the destination) the same timeline
and output bits with the fast paths on and off."""
import numpy as np
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware import dma
from trnlab.hardware.fast import indirect
from trnlab.hardware.memory import HBM
from trnlab.hardware.presets import TRN2_CORE
from trnlab.hardware.tensor import View, unravel
from trnlab.nki.tensor_views import pattern_index


def _reference(view: View, offsets, stride, per_row):
    flat, keep = dma._shifted(view, offsets, stride, per_row, skip=True)
    return None if keep is not None else View(view.tensor, unravel(flat, view.tensor.shape))


def _same_view(a: View, b: View):
    """The same elements of the same tensor in the same order, the same shape and partitions."""
    assert a.shape == b.shape and a.tensor is b.tensor
    assert (a.part_start, a.partitions, a.part_first) == (b.part_start, b.partitions, b.part_first)
    np.testing.assert_array_equal(a.flat_positions(), b.flat_positions())


@st.composite
def _moves(draw):
    """A tensor, a view of it (a box of slices and ints, or an access pattern's index arrays), a
    stride (whole rows of an axis, or not), offsets (one, or one per row) — some past the axis."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=2, max_size=3)))
    tensor = HBM(TRN2_CORE, True).allocate(shape, np.float32, name="t")
    if draw(st.booleans()):
        index = []
        for n in shape:
            lo = draw(st.integers(0, n - 1))
            if draw(st.booleans()):
                index.append(lo - n if draw(st.booleans()) else lo)     # an int, counted from either end
            else:
                index.append(slice(lo, draw(st.integers(lo + 1, n)), draw(st.integers(1, 2))))
        view = View(tensor, tuple(index))
    else:       # an access pattern [[stride, count], ...] inside the tensor, as NkiTensor.ap builds it
        rows = draw(st.integers(1, shape[0]))
        cols = draw(st.integers(1, shape[-1]))
        row_step = int(np.prod(shape[1:])) * draw(st.integers(0, 1))    # 0: each row at its offset
        view = View(tensor, pattern_index([[row_step, rows], [1, cols]], 0, shape))
    if not view.shape or view.size == 0:
        view = View(tensor, None)
    axis = draw(st.integers(0, len(shape) - 1))
    stride = int(np.prod(shape[axis + 1:])) * draw(st.integers(1, 2)) + draw(st.sampled_from([0, 0, 0, 1]))
    per_row = draw(st.booleans())
    count = view.shape[0] if per_row else 1
    offsets = np.array(draw(st.lists(st.integers(-1, shape[axis]), min_size=count, max_size=count)), np.int64)
    return view, offsets, stride, per_row


@settings(max_examples=150, deadline=None)
@given(_moves())
def test_the_shifted_view_is_the_references_or_none(move):
    view, offsets, stride, per_row = move
    fast = indirect.shifted_view(view, offsets, stride, per_row)
    reference = _reference(view, offsets, stride, per_row)
    if fast is not None:
        assert reference is not None            # the fast path never moves what the reference refuses
        _same_view(fast, reference)
        data = np.arange(int(np.prod(view.tensor.shape)), dtype=np.float32).reshape(view.tensor.shape)
        view.tensor.data = data                 # reads and writes through both give the same elements
        np.testing.assert_array_equal(fast.values(), reference.values())
        fast.write(-np.ones(fast.shape, np.float32))
        moved = data.copy()
        reference.write(-np.ones(reference.shape, np.float32))
        np.testing.assert_array_equal(moved, data)


def test_whole_rows_inside_the_axis_take_the_fast_path():
    tensor = HBM(TRN2_CORE, True).allocate((8, 4, 16), np.float32, name="experts")
    view = View(tensor, pattern_index([[16, 4], [1, 16]], 0, tensor.shape))    # expert 0's [4, 16] block
    fast = indirect.shifted_view(view, np.array([5]), 64, per_row=False)      # scalar_offset 5 on axis 0
    _same_view(fast, _reference(view, np.array([5]), 64, False))
    rows = View(tensor, pattern_index([[0, 4], [1, 16]], 0, tensor.shape))    # row r at offsets[r] x stride
    moved = indirect.shifted_view(rows, np.array([3, 0, 1, 7]), 64, per_row=True)   # an expert per row
    _same_view(moved, _reference(rows, np.array([3, 0, 1, 7]), 64, True))
    assert fast.basic and type(moved.index[0]) is np.ndarray and type(moved.index[2]) is slice   # runs, not elements
    within = indirect.shifted_view(rows, np.array([3, 0, 1, 2]), 16, per_row=True)  # a row of expert 0 per row
    _same_view(within, _reference(rows, np.array([3, 0, 1, 2]), 16, True))
    assert indirect.shifted_view(rows, np.array([3, 0, 1, 4]), 16, per_row=True) is None   # carries into axis 0
    assert indirect.shifted_view(rows, np.array([3, 0, 1, 8]), 64, per_row=True) is None   # past the tensor


@nki.jit
def moe_rows(hidden, experts, token_ids, expert_id):
    """out = hidden with the rows token_ids[p] replaced by hidden[token_ids[p]] * experts[e][p]: a
    block of tokens gathered, scaled by one expert's weights and scattered back, all three through
    access patterns with run-time offsets (the way AWS's blockwise MoE kernels move tokens)."""
    T, H = hidden.shape
    E, P, _ = experts.shape
    idx = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=token_ids)
    e = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=e, src=expert_id)
    rows = nl.ndarray((P, H), dtype=hidden.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=hidden.ap([[H, P], [1, H]], offset=0, vector_offset=idx, indirect_dim=0))
    weights = nl.ndarray((P, H), dtype=experts.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=weights, src=experts.ap([[H, P], [1, H]], offset=0, scalar_offset=e, indirect_dim=0))
    scaled = nl.ndarray((P, H), dtype=hidden.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=scaled, data1=rows, data2=weights, op=nl.multiply)
    out = nl.ndarray((T, H), dtype=hidden.dtype, buffer=nl.shared_hbm)
    whole = nl.ndarray((T, H), dtype=hidden.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=whole, src=hidden)
    nisa.dma_copy(dst=out, src=whole)
    nisa.dma_copy(dst=out.ap([[H, P], [1, H]], offset=0, vector_offset=idx, indirect_dim=0), src=scaled)
    return out


def test_a_moe_style_kernel_gives_the_reference_timeline_and_bits(monkeypatch):
    taken = []
    shifted_view = indirect.shifted_view
    monkeypatch.setattr(indirect, "shifted_view", lambda *a: taken.append(shifted_view(*a)) or taken[-1])
    rng = np.random.default_rng(21)
    hidden = rng.standard_normal((96, 32)).astype(np.float32)
    experts = rng.standard_normal((4, 64, 32)).astype(np.float32)
    token_ids = rng.permutation(96)[:64].reshape(64, 1).astype(np.int32)
    expert_id = np.array([[2]], np.int32)
    runs = {}
    for fast in (True, False):
        with config.override(fast=fast):
            runs[fast] = nki.run(moe_rows, hidden, experts, token_ids, expert_id, target="trn2")
    assert len(taken) == 3 and all(v is not None for v in taken)     # the fast path ran, fast runs only
    expected = hidden.copy()
    expected[token_ids[:, 0]] = hidden[token_ids[:, 0]] * experts[2]
    np.testing.assert_array_equal(runs[True].outputs, expected)
    assert np.asarray(runs[True].outputs).tobytes() == np.asarray(runs[False].outputs).tobytes()
    assert runs[True].core.timeline.records == runs[False].core.timeline.records
