"""`nki.isa`: one function per NeuronCore instruction, issued to the simulated core.

Both of AWS's call styles work, through ONE binder and ONE signature table (`SIGNATURES`):

- destination style (NKI "beta 2", 0.3 and later): ``nisa.nc_matmul(dst=psum, stationary=a, moving=b)``,
  ``nisa.tensor_copy(dst=sb, src=psum)``, or positional ``nisa.tensor_copy(sb, psum)``;
- functional style (``neuronxcc.nki``, "beta 1"): ``res = nisa.nc_matmul(a, b)``, ``t = nisa.tensor_copy(x)``,
  which return a new tile (pending until the program shows where it goes, see tensor.py).

Each instruction is written once, as a typed Python function in AWS's destination-style signature
(``dst`` first; parameters that only the functional style has, such as ``dtype``, ``mask`` or
memset's ``shape``, are keyword-only). The `instruction` decorator records its signature together
with the positional order of the functional style, and `Signature.bind` decides the style of a call:

1. ``dst=`` given, or more positional arguments than the functional order has -> destination;
2. a keyword repeats a slot the positional arguments already filled in the functional order
   (``nisa.tensor_copy(out, src=x)``) -> destination;
3. a positional argument does not fit the functional slot it would fill (a tile where the functional
   signature has an operator, a flag or a shape; a number where it has an operator or a tile) ->
   destination; otherwise functional.

Unknown parameters are refused with the list of the instruction's parameters. Argument names and
defaults follow the NKI API reference (nki.isa.*); each function maps onto the `trnlab.hardware.NeuronCore`
method of the same name.

This module is the `nki.isa` namespace; the code is split by engine: `isa_binder.py` (parameter
types, enums, the binder), `isa_matmul.py` (Tensor engine), `isa_dma.py` (data movement),
`isa_vector.py` (Vector, Scalar, GpSimd), `mx.py` (MX on NeuronCore-v4), `isa_select.py`,
`isa_gather.py`, `isa_accumulate.py` (NKI 0.7's selections, gathers and shuffles, running reductions), and NKI 0.7's system
instructions: `isa_random.py` (rng, rand2, the generators' state, set_rng_seed), `isa_registers.py`
(virtual registers), `isa_sync.py` (core_barrier, sendrecv, dma_compute, dma_engine).
"""
from __future__ import annotations

import sys as _sys

from trnlab.nki.isa_binder import (SIGNATURES, Dtype, Mask, Op, Operand, Shape, Signature, Tile,  # noqa: F401
                                   dge_mode, engine, get_nc_version, gpsimd_engine, instruction, nc_version,
                                   oob_mode, op_name, reduce_cmd, scalar_engine, tensor_engine, unknown_engine,
                                   vector_engine)
from trnlab.nki.isa_dma import dma_copy, dma_transpose, tensor_copy  # noqa: F401
from trnlab.nki.isa_matmul import nc_matmul, nc_transpose  # noqa: F401
from trnlab.nki.isa_vector import (activation, activation_reduce, affine_select, bn_aggr, bn_stats,  # noqa: F401
                                   dropout, iota, memset, reciprocal, scalar_tensor_tensor, select_reduce,
                                   tensor_partition_reduce, tensor_reduce, tensor_scalar, tensor_scalar_reduce,
                                   tensor_tensor, tensor_tensor_scan)
from trnlab.nki.isa_select import (max8, nc_find_index8, nc_match_replace8, nonzero_with_count,  # noqa: F401
                                   range_select, sequence_bounds, tensor_copy_predicated, topk)
from trnlab.nki.isa_gather import local_gather, nc_n_gather, nc_stream_shuffle  # noqa: F401
from trnlab.nki.isa_accumulate import activate2, exponential, tensor_scalar_cumulative  # noqa: F401
from trnlab.nki.perf_mode import matmul_perf_mode  # noqa: F401  (nisa.matmul_perf_mode)
from trnlab.nki.tensor import NkiTensor  # noqa: F401  (the tile type, as before the split)
from trnlab.nki.tensor import install as _install_tile_operations

_install_tile_operations(isa=_sys.modules[__name__])    # tiles get their copies and fills from nki.isa

# MX on NeuronCore-v4 (mx.py registers them in SIGNATURES)
from trnlab.nki.mx import nc_matmul_mx, quantize_mx  # noqa: E402,F401

# NKI 0.7's system instructions: random numbers, registers, synchronisation (isa_random.py, isa_registers.py, isa_sync.py)
from trnlab.nki.isa_random import rand2, rand_get_state, rand_set_state, rng, set_rng_seed  # noqa: E402,F401
from trnlab.nki.isa_registers import (VirtualRegister, register_alloc, register_load, register_move,  # noqa: E402,F401
                                      register_store)
from trnlab.nki.isa_scalars import NkiScalar, scalar_load, scalar_store  # noqa: E402,F401
from trnlab.nki.isa_sync import core_barrier, dma_compute, dma_engine, sendrecv  # noqa: E402,F401

# NKI 0.7's instruction handles: what a destination-style call returns (instruction_handles.py)
from trnlab.nki.instruction_handles import NkiInstruction, dependency  # noqa: E402,F401
