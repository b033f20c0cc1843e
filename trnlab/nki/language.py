"""`nki.language`: tensors, buffers, loops, index helpers and tile-level math of NKI.

Names, arguments and semantics follow the NKI API reference (nki.language.*). The functions lower to
the instructions of `nki.isa` (see isa.py) on the running kernel's simulated NeuronCore:

- element-wise binary math -> `tensor_tensor` (two tiles) or `tensor_scalar` (a number, or a [P, 1]
  tile broadcast along the free axis) on the Vector engine;
- unary math (exp, tanh, rsqrt, ...) -> `activation` on the Scalar engine;
- reductions along free axes -> `tensor_reduce`; `matmul` -> `nc_matmul` (plus a Tensor-engine
  transpose of x unless transpose_x=True); `transpose` -> `nc_transpose`;
- `load` / `store` -> `dma_copy`.

Loops are Python loops: `affine_range`, `sequential_range` and `static_range` are ranges that remember
which kind they are (iterations are issued in program order either way; the engines overlap
independent work through the scheduler's dependency tracking). While a kernel is traced, the
iterator of a `for` statement over an affine or sequential range of 4 or more iterations is a
`loop_index.LoopIndex`: iterations 0, 1 and n-1 run, the others are stamped out of them (loops.py; any
non-affine use of the iterator runs the loop concretely, as `static_range` and `range` always do).

This module is the `nki.language` namespace; the code is in `language_tiles.py` (dtypes, buffers,
tile sizes, ranges and SPMD ids, allocation, load/store), `language_math.py` (tile math, reductions,
matmul, transpose, softmax) and here (slices, SPMD over cores, limits, constants, randomness).
"""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np

from trnlab.hardware import dtypes as _dt
from trnlab.nki import isa as _isa
from trnlab.nki import issue as _issue
from trnlab.nki import launches as _launches
from trnlab.nki.indexing import arange, mgrid  # noqa: F401  (public: nl.arange, nl.mgrid)
from trnlab.nki.loop_index import plain as _plain
from trnlab.nki.tensor import NkiTensor
from trnlab.nki.language_tiles import (  # noqa: F401  (the nki.language namespace)
                                       _allocate, affine_range, bfloat16, bool_, copy, empty, empty_like, float16,
                                       float32, float4_e2m1fn_x4, float8_e4m3, float8_e4m3fn, float8_e4m3fn_x4,
                                       float8_e5m2, float8_e5m2_x4, float8_e8m0fnu, full, full_like, hbm, int16,
                                       int32, int8, load, load_transpose2d, ndarray, num_programs, ones, ones_like,
                                       par_dim, private_hbm, program_id, program_ndim, psum, sbuf, sequential_range,
                                       shared_hbm, static_range, store, tfloat32, tile_size, uint16, uint32, uint8,
                                       zeros, zeros_like)
from trnlab.nki.language_math import (  # noqa: F401
                                      abs, add, bitwise_and, bitwise_or, bitwise_xor, broadcast_to, cos,
                                      device_print, divide, equal, erf, exp, gelu, gelu_apprx_tanh, greater,
                                      greater_equal, identity, less, less_equal, log, logical_and, logical_or, matmul,
                                      max, maximum, mean, min, minimum, mod, multiply, negative, not_equal, power,
                                      prod, reciprocal, relu, rsqrt, shared_identity_matrix, sigmoid, sign, silu, sin,
                                      softmax, softplus, sqrt, square, subtract, sum, tanh, transpose, where)
from trnlab.nki.language_math import bypass  # noqa: F401  (an ALU op= only: nisa.activate2)


# -- more of NKI's language: slices, SPMD over cores, limits, constants, loops, randomness ------------------
def ds(start: int, size: int) -> slice:
    """nl.ds(start, size): the slice start:start+size (a "dynamic slice" in NKI, for tensor indexing)."""
    start = int(_plain(start))           # a loop index: the slice's box is affine in it
    return slice(start, start + int(size))


class nc:
    """nl.nc(n): n physical NeuronCores, as a launch-grid axis (``kernel[nl.nc(2), 2]``: program i of
    that axis on core i) or inside nl.spmd_dim; ``nl.nc(2) * 2`` is ``nl.spmd_dim(nl.nc(2), 2)`` and
    ``2 * nl.nc(2)`` is ``nl.spmd_dim(2, nl.nc(2))`` (nki.language.nc / spmd_dim pages)."""

    def __init__(self, count: int):
        self.count = int(count)

    def __mul__(self, size):
        return spmd_dim(self, size)

    def __rmul__(self, size):
        return spmd_dim(size, self)

    def __repr__(self) -> str:
        return f"nl.nc({self.count})"


class spmd_dim(int):
    """nl.spmd_dim: a launch-grid axis of `size` x k programs spread over k physical NeuronCores.

    It is an int (the axis size), with `cores` = k and `core_of(i)` the core of program i on this axis,
    as AWS's nki.language.spmd_dim page lays them out for a (4, 2) grid on 2 cores:
    ``nl.spmd_dim(nl.nc(2), 2)`` (cores first) puts programs 0, 1 on core 0 and 2, 3 on core 1;
    ``nl.spmd_dim(2, nl.nc(2))`` (cores last) puts 0, 2 on core 0 and 1, 3 on core 1."""

    def __new__(cls, size, cores: "nc | int" = 1):
        cores_first = isinstance(size, nc)
        if cores_first:                              # nl.spmd_dim(nl.nc(2), 4)
            size, cores = cores, size
        k = cores.count if isinstance(cores, nc) else int(cores)
        value = super().__new__(cls, int(size) * k)
        value.cores = k
        value.per_core = int(size)
        value.cores_first = cores_first
        return value

    def core_of(self, i: int) -> int:
        """The physical core (0..cores-1) that runs program `i` of this axis."""
        return i // self.per_core if self.cores_first else i % self.cores

    def __repr__(self) -> str:
        if self.cores_first:
            return f"nl.spmd_dim(nl.nc({self.cores}), {self.per_core})"
        return f"nl.spmd_dim({self.per_core}, nl.nc({self.cores}))"


class _Limits:
    """The numeric limits of a float type, as `nl.fp32.min` etc. (np.dtype(nl.fp32) is float32)."""

    def __init__(self, dtype, name: str):
        self.dtype = np.dtype(dtype)
        self.name = name
        info = ml_dtypes.finfo(self.dtype)
        self.min, self.max = float(info.min), float(info.max)
        self.eps, self.tiny, self.bits = float(info.eps), float(info.tiny), int(info.bits)

    def __repr__(self) -> str:
        return f"nl.{self.name}"


fp32, fp16, bf16 = _Limits(float32, "fp32"), _Limits(float16, "fp16"), _Limits(bfloat16, "bf16")
fp8_e4m3, fp8_e5m2 = _Limits(float8_e4m3, "fp8_e4m3"), _Limits(float8_e5m2, "fp8_e5m2")


def finfo(dtype):
    """nl.finfo(dtype): machine limits of a float dtype (.min, .max, .eps, .tiny, .bits), bf16/fp8 too."""
    return ml_dtypes.finfo(_dt.as_dtype(getattr(dtype, "dtype", dtype)))


def iinfo(dtype):
    """nl.iinfo(dtype): limits of an integer dtype."""
    return np.iinfo(_dt.as_dtype(dtype))


def floor(x: NkiTensor, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Largest integer <= x, element-wise: one Vector instruction computing x - (x mod 1) (NumPy's mod
    is a floor-mod, so this is exact for negative x too)."""
    return _isa.scalar_tensor_tensor(data=x, op0="mod", operand0=1.0, op1="subtract", operand1=x,
                                     reverse1=True, dtype=dtype, mask=mask)


floor.nki_op = "floor"


def static_cast(x, dtype):
    """Cast to `dtype`: a tile through an engine copy (tensor_copy), a NumPy array / number on the host."""
    if isinstance(x, NkiTensor):
        return _isa.tensor_copy(x, dtype=dtype)
    return np.asarray(x).astype(_dt.as_dtype(dtype))


def shared_constant(constant, dtype=None, **kwargs) -> NkiTensor:
    """An HBM tensor holding a compile-time constant (a NumPy array, or the path of a ``.npy`` file:
    "Can be a numpy array or a file path to a .npy file", nki.language.shared_constant, NKI 0.7), shared
    by every program of the launch; load it with nl.load. Like a kernel input it is in HBM before the
    kernel starts."""
    launch = _launches.current()
    launch.flush()
    if isinstance(constant, (str, os.PathLike)):
        constant = np.load(constant, allow_pickle=False)    # an array file, never pickled objects
    values = np.asarray(constant)
    values = values.astype(_dt.as_dtype(dtype) if dtype is not None else _dt.as_dtype(values.dtype))
    hw = launch.core.hbm.tensor(values, name=launch.fresh_name("constant"))
    return NkiTensor.allocation(hw, "shared_hbm", launch)


def loop_reduce(x: NkiTensor, op, loop_indices, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Reduce over loop iterations: ``acc[...] = nl.loop_reduce(tile, np.add, loop_indices=[i])`` is
    ``acc = op(acc, tile)``, one Vector-engine tensor_tensor whose second input is its own destination.
    Assign it into the accumulator tile (initialised before the loop, e.g. with nl.zeros): the
    destination is an input, so a bare value would read an uninitialised tile."""
    opcode = _isa.op_name(op)
    x = _issue.tile(x, "x")
    target = _dt.as_dtype(dtype) if dtype is not None else x.dtype
    ranges = _issue.ranges(mask, x)
    launch = _issue.begin()

    def emit(out, _accumulate):
        view = out.hw_view(ranges)
        launch.core.tensor_tensor(dst=view, data1=x.hw_view(ranges), data2=view, op=opcode)

    return _issue.produce(x.shape, target, "sbuf", emit, ranges=ranges)


def random_seed(seed, *, mask=None, **kwargs) -> None:
    """Seed the random number generator of nl.dropout (an int, or a [1, 1] tile holding one)."""
    launch = _issue.begin()
    launch.core.set_rng_seed(seed.hw_view() if isinstance(seed, NkiTensor) else int(seed))


def dropout(x: NkiTensor, rate, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Zero each element of x with probability `rate` (a number or a [P, 1] tile): nisa.dropout."""
    return _isa.dropout(x, rate, dtype=dtype, mask=mask)


import sys as _sys  # noqa: E402  (tiles get their math and allocation from this module, see tensor.install)

from trnlab.nki.tensor import install as _install_tile_operations  # noqa: E402

_install_tile_operations(language=_sys.modules[__name__], allocate=_allocate)


# NKI 0.7's compiled loops, beta 1's dynamic_range and the compiled conditional (device_loops.py)
from trnlab.nki.device_loops import dynamic_range, fori_loop, if_else, while_loop  # noqa: E402,F401

# NKI 0.7's names the NKI Library needs: more activations, NKIObject, nl.bool / nl.range (language_07.py)
from trnlab.nki.language_07 import *  # noqa: E402,F401,F403
# nl.rand: uniform values from the Vector engine's generators (isa_random.py)
from trnlab.nki.isa_random import rand  # noqa: E402,F401

# NKI 0.7's further math, bitwise / logical operators, reductions, predicates, nl.no_reorder (language_more.py)
from trnlab.nki.language_more import (abs_max, abs_min, all, arctan, ceil, expand_dims, gather_flattened,  # noqa: E402,F401,A004
                                      invert, is_hbm, is_on_chip, is_psum, is_sbuf, left_shift, logical_not,
                                      logical_xor, no_reorder, prelu, right_shift, rms_norm, tan, trunc, var)

# AWS's latest tile-grid API: nl.tiles / nl.blocks views, their allocations, stream pools; nl.empty_like of a
# grid keeps its geometry (a tensor goes to language_tiles.empty_like as before) (tile_grids.py)
from trnlab.nki.tile_grids import (NkiBlockGrid, NkiGrid, NkiStreamBuffers, NkiTileGrid, alloc_blocks,  # noqa: E402,F401
                                   alloc_stream_buffers, alloc_tiles, blocks, empty_like, tiles)
