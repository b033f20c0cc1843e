"""Recomputation elimination (`trnlab/hardware/recompute.py`, the `recompute` switch, candidate (l)): an
instruction computing again what an earlier one computed from unchanged inputs is dropped and its readers
read the earlier result, where the program still fits SBUF; the values never change."""
from __future__ import annotations

import numpy as np

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.kernels import mamba

RNG = np.random.default_rng(5)


def product_in_a_loop(x, y, w):
    """out[s] = (x * y) * w[s]: x * y does not depend on s, but is computed in every iteration."""
    S = w.shape[0]
    out = nl.ndarray((S, 128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    x_t = nl.load(x)
    y_t = nl.load(y)
    for s in nl.affine_range(S):
        xy = nisa.tensor_tensor(x_t, y_t, op=nl.multiply)                  # the same in every s
        w_t = nl.load(w[s])
        nl.store(out[s], value=nisa.tensor_tensor(xy, w_t, op=nl.multiply))
    return out


def input_changes_between(x, y):
    """x * y computed twice, x changed in between: both products stay."""
    out = nl.ndarray((2, 128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    x_t = nl.load(x)
    y_t = nl.load(y)
    nl.store(out[0], value=nisa.tensor_tensor(x_t, y_t, op=nl.multiply))
    nisa.tensor_scalar(dst=x_t, data=x_t, op0=nl.add, operand0=1.0)      # x_t written in place
    nl.store(out[1], value=nisa.tensor_tensor(x_t, y_t, op=nl.multiply))
    return out


def exp_twice_around_a_big_tile(x, z):
    """exp(x) [128, 16384] fp32 (64 KiB a partition) computed twice around a tile of z: kept live across a
    96 KiB tile, exp(x), x and that tile need 224 KiB of Trn1's 192; across a 32 KiB tile they fit."""
    n = z.shape[1]
    out = nl.ndarray((2, 128, 16384), dtype=x.dtype, buffer=nl.shared_hbm)
    side = nl.ndarray((128, n), dtype=x.dtype, buffer=nl.shared_hbm)
    x_t = nl.load(x)
    nl.store(out[0], value=nisa.activation(op=nl.exp, data=x_t))
    big = nl.load(z)
    nl.store(side, value=big)
    nl.store(out[1], value=nisa.activation(op=nl.exp, data=x_t))
    return out, side


X = RNG.standard_normal((128, 512)).astype(np.float32)
Y = RNG.standard_normal((128, 512)).astype(np.float32)
W = RNG.standard_normal((4, 128, 512)).astype(np.float32)


def _traced(kernel, *args, on: bool, target="trn2"):
    with config.override(recompute=on):
        return nki.trace(nki.jit(kernel), *args, target=target)


def test_a_loop_invariant_product_is_computed_once_and_read_by_every_iteration():
    kept, lean = _traced(product_in_a_loop, X, Y, W, on=False), _traced(product_in_a_loop, X, Y, W, on=True)
    products = lambda p: [i for i in p.instructions if i.opcode == "tensor_tensor"]
    assert len(products(kept)) == 8 and len(products(lean)) == 5     # 4 x (x * y, * w) -> 1 + 4
    first = products(lean)[0].operands["dst"].buffer
    assert all(i.operands["data1"].buffer == first for i in products(lean)[1:])
    with config.override(recompute=True):
        np.testing.assert_allclose(nki.jit(product_in_a_loop)(X, Y, W), (X * Y)[None] * W, rtol=1e-6)


def test_the_dropped_work_is_the_time_saved():
    with config.override(recompute=False):
        kept = nki.run(nki.jit(product_in_a_loop), X, Y, W, target="trn2", timing_only=True)
    with config.override(recompute=True):
        lean = nki.run(nki.jit(product_in_a_loop), X, Y, W, target="trn2", timing_only=True)
    assert lean.latency_us < kept.latency_us
    assert lean.profile().active["dve"] * lean.latency_us < kept.profile().active["dve"] * kept.latency_us


def test_a_product_whose_input_changed_in_between_is_computed_again():
    lean = _traced(input_changes_between, X, Y, on=True)
    assert sum(i.opcode == "tensor_tensor" for i in lean.instructions) == 2
    with config.override(recompute=True):
        out = nki.jit(input_changes_between)(X, Y)
    np.testing.assert_allclose(out, np.stack([X * Y, (X + 1) * Y]), rtol=1e-6)


def test_where_keeping_the_result_would_not_fit_the_kernel_keeps_its_recomputation():
    x = RNG.standard_normal((128, 16384)).astype(np.float32)
    exps = lambda p: sum(i.opcode == "activation" for i in p.instructions)
    fits = _traced(exp_twice_around_a_big_tile, x, RNG.standard_normal((128, 8192)).astype(np.float32), on=True,
                   target="trn1")
    assert exps(fits) == 1                                               # 64 + 64 + 32 KiB: kept, computed once
    tight = _traced(exp_twice_around_a_big_tile, x, RNG.standard_normal((128, 24576)).astype(np.float32), on=True,
                    target="trn1")
    assert exps(tight) == 2                                              # 64 + 64 + 96 KiB: computed again


def test_mamba_v2_without_its_repeated_product_is_the_hoisted_kernel():
    # AWS's fused-Mamba v2 computes delta * u in every state; the rule gives what hoisting it by hand gives
    args = [nki.ShapeDtype(s, np.float32) for s in ((1, 256, 512), (1, 256, 512), (256, 16), (1, 16, 512), (1, 16, 512))]
    with config.override(recompute=True):
        lean = nki.run(mamba.mamba_v2, *args, target="trn1", timing_only=True)
    hoisted = nki.run(mamba.mamba_v2, *args, target="trn1", timing_only=True, HOIST_DELTA_U=True)
    assert len(lean.program) == len(hoisted.program)
    assert abs(lean.latency_us - hoisted.latency_us) < 1e-6


def test_the_switch_is_part_of_the_trace_cache_key_and_off_by_default():
    assert config.get("recompute") is False
    args = (X, Y, W)
    kernel = nki.jit(product_in_a_loop)
    with config.override(recompute=True):
        lean = nki.trace(kernel, *args, target="trn2")
    kept = nki.trace(kernel, *args, target="trn2")
    assert len(lean) < len(kept)


def chain_in_a_loop(x, y):
    """(x * y) + 1 computed in every iteration: both instructions repeat, the second once the first is gone."""
    out = nl.ndarray((4, 128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    x_t = nl.load(x)
    y_t = nl.load(y)
    for s in nl.affine_range(4):
        xy = nisa.tensor_tensor(x_t, y_t, op=nl.multiply)
        nl.store(out[s], value=nisa.tensor_scalar(xy, op0=nl.add, operand0=1.0))
    return out


def test_a_chain_of_repeated_computations_is_computed_once():
    lean = _traced(chain_in_a_loop, X, Y, on=True)
    assert [i.opcode for i in lean.instructions].count("tensor_tensor") == 1
    assert [i.opcode for i in lean.instructions].count("tensor_scalar") == 1
    with config.override(recompute=True):
        np.testing.assert_allclose(nki.jit(chain_in_a_loop)(X, Y), np.broadcast_to(X * Y + 1, (4, 128, 512)), rtol=1e-6)
