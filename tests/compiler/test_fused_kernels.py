"""The kernels the compiler's fusions lower to: linear with a residual input, and layer norm feeding a
linear with the normalised rows kept in SBUF — both against PyTorch, on shapes with edge tiles."""
import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
from trnlab.kernels.fused import layer_norm_linear
from trnlab.kernels.matmul import linear

shapes = st.tuples(st.integers(1, 260), st.integers(1, 200), st.integers(1, 600))


def _arrays(M, K, N, seed):
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)          # noqa: E731
    return f(M, K), f(K, N) * 0.2, f(N), f(M, N), f(K), f(K)


@settings(max_examples=6, deadline=None)
@given(shapes, st.sampled_from([None, "gelu", "relu"]), st.integers(0, 2**16))
def test_linear_adds_the_residual_after_the_activation(shape, activation, seed):
    M, K, N = shape
    x, w, b, r, _, _ = _arrays(M, K, N, seed)
    got = nki.run(linear, x, w, b, activation=activation, residual=r).outputs
    y = torch.tensor(x) @ torch.tensor(w) + torch.tensor(b)
    y = {None: y, "gelu": F.gelu(y), "relu": F.relu(y)}[activation] + torch.tensor(r)
    np.testing.assert_allclose(got, y.numpy(), rtol=1e-4, atol=1e-4 * max(1.0, float(y.abs().max())))


@settings(max_examples=6, deadline=None)
@given(shapes, st.booleans(), st.integers(0, 2**16))
def test_layer_norm_linear_matches_the_two_ops(shape, with_residual, seed):
    M, K, N = shape
    x, w, b, r, gamma, beta = _arrays(M, K, N, seed)
    got = nki.run(layer_norm_linear, x, gamma, beta, w, b, residual=r if with_residual else None).outputs
    y = F.layer_norm(torch.tensor(x), (K,), torch.tensor(gamma), torch.tensor(beta)) @ torch.tensor(w) + torch.tensor(b)
    if with_residual:
        y = y + torch.tensor(r)
    np.testing.assert_allclose(got, y.numpy(), rtol=1e-4, atol=1e-4 * max(1.0, float(y.abs().max())))


def test_layer_norm_linear_moves_fewer_hbm_bytes_than_the_two_kernels():
    from trnlab.kernels.norms import layer_norm
    M, K, N = 256, 64, 192
    x, w, b, _, gamma, beta = _arrays(M, K, N, 0)
    fused = nki.run(layer_norm_linear, x, gamma, beta, w, b).profile()
    ln = nki.run(layer_norm, x, gamma, beta)
    separate = ln.profile().hbm_bytes + nki.run(linear, ln.outputs, w, b).profile().hbm_bytes
    assert separate - fused.hbm_bytes == 2 * M * K * 4            # the normalised rows: one store, one load
