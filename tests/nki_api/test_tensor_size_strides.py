"""`NkiTensor.size`, `.strides` and `.reinterpret_cast` (attributes of AWS's nki.language.NkiTensor page):
size is the number of elements a view covers, strides each dimension's step in elements of the storage
(the strides of get_pattern, in the order of shape), reinterpret_cast the same method as view(dtype).
Checked against NumPy's views of the same array (strides // itemsize, size), and in full mode through
values: an .ap() built from a view's strides and offset reads what the view reads, a tile read through
reinterpret_cast is NumPy's .view of its bytes."""
import ml_dtypes
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config

RNG = np.random.default_rng(33)

# (name, the view on a NumPy array, the same view on an NkiTensor)
VIEWS = [
    ("whole", lambda a: a, lambda t: t),
    ("row", lambda a: a[1], lambda t: t[1]),
    ("stepped slice", lambda a: a[1, 8:40, 0:64:2], lambda t: t[1, 8:40, 0:64:2]),
    ("permute", lambda a: a.transpose(0, 2, 1), lambda t: t.permute((0, 2, 1))),
    ("reshape", lambda a: a.reshape(4, 2, 64, 64), lambda t: t.reshape((4, 2, 64, 64))),
    ("select then slice", lambda a: a[:, 5, 16:48], lambda t: t[:, 5, 16:48]),
]


def _trace(kernel, *args):
    """Run a kernel that records what it reads at trace time; the recorded values."""
    seen = {}
    nki.run(kernel(seen), *args)
    return seen


@pytest.mark.parametrize("name,np_view,nki_view", VIEWS, ids=[v[0] for v in VIEWS])
def test_size_and_strides_of_an_hbm_view_are_numpys(name, np_view, nki_view):
    x = np.zeros((4, 128, 64), np.float32)

    def kernel(seen):
        @nki.jit
        def read(t):
            view = nki_view(t)
            seen["size"], seen["strides"], seen["shape"] = view.size, view.strides, view.shape
            out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=t[0, 0:1, 0:1])
            return out
        return read

    seen = _trace(kernel, x)
    expected = np_view(x)
    assert tuple(seen["shape"]) == expected.shape
    assert seen["size"] == expected.size
    assert seen["strides"] == tuple(s // x.itemsize for s in expected.strides)


def test_strides_of_an_sbuf_tile_and_its_retyped_view():
    """A (P, F) tile steps F elements a partition (AWS's ap example: a (128, 32) tile is [[32, 128], [1, 32]]);
    read as uint8 its last axis and its partition step scale by 4, the number of elements too, the bytes not."""
    def kernel(seen):
        @nki.jit
        def read(x):
            tile = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x)
            seen["tile"] = (tile.strides, tile.size, tile.get_pattern())
            seen["cols"] = tile[:, 4:28:3].strides
            as_bytes = tile.reinterpret_cast(nl.uint8)
            seen["bytes"] = (as_bytes.shape, as_bytes.strides, as_bytes.size)
            out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=tile)
            return out
        return read

    seen = _trace(kernel, np.zeros((128, 32), np.float32))
    assert seen["tile"] == ((32, 1), 128 * 32, [[32, 128], [1, 32]])
    assert seen["cols"] == (32, 3)
    assert seen["bytes"] == ((128, 128), (128, 1), 128 * 128)


@nki.jit
def view_and_its_pattern(x):
    """(x[1, 8:40, 0:64:2] DMA'd out, the same elements read by an .ap() of its strides, shape and offset)."""
    view = x[1, 8:40, 0:64:2]
    direct = nl.ndarray(view.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=direct, src=view)
    rebuilt = nl.ndarray(view.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pattern = [[stride, count] for stride, count in zip(view.strides, view.shape)]
    nisa.dma_copy(dst=rebuilt, src=x.ap(pattern=pattern, offset=view.offset))
    return direct, rebuilt


@pytest.mark.parametrize("fast", [True, False])
def test_an_ap_of_a_views_strides_reads_the_views_elements(fast):
    x = RNG.normal(size=(4, 128, 64)).astype(np.float32)
    with config.override(fast=fast):
        direct, rebuilt = nki.run(view_and_its_pattern, x).outputs
    np.testing.assert_array_equal(direct, x[1, 8:40, 0:64:2])
    np.testing.assert_array_equal(rebuilt, x[1, 8:40, 0:64:2])


@nki.jit
def words_reinterpreted(words):
    """A uint32 tile [P, F] reinterpret_cast to bf16 [P, 2F], DMA'd out."""
    P, F = words.shape
    tile = nl.ndarray((P, F), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=words)
    halves = tile.reinterpret_cast(nl.bfloat16)
    out = nl.ndarray((P, 2 * F), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=halves)
    return out


@pytest.mark.parametrize("fast", [True, False])
def test_reinterpret_cast_reads_a_tiles_bytes_as_numpy_view(fast):
    words = RNG.integers(0, 2**32, size=(16, 8), dtype=np.uint32)
    with config.override(fast=fast):
        out = nki.run(words_reinterpreted, words).outputs
    np.testing.assert_array_equal(out.view(np.uint16), words.view(ml_dtypes.bfloat16).view(np.uint16))


def test_reinterpret_cast_is_view_under_a_second_name():
    assert nl.NkiTensor.reinterpret_cast is nl.NkiTensor.view
