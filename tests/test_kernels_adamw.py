"""The fused AdamW kernel against torch.optim.AdamW, step by step, for drawn shapes and hyper-parameters."""
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlab.kernels.adamw import adamw, hyper_values, squared_norm


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 200), cols=st.integers(1, 300), lr=st.floats(1e-4, 1e-1),
       beta2=st.sampled_from([0.95, 0.999]), weight_decay=st.sampled_from([0.0, 0.1]), seed=st.integers(0, 99))
def test_adamw_kernel_matches_torch_adamw_for_three_steps(rows, cols, lr, beta2, weight_decay, seed):
    rng = np.random.default_rng(seed)
    p = rng.standard_normal((rows, cols)).astype(np.float32)
    param = torch.nn.Parameter(torch.from_numpy(p.copy()))
    opt = torch.optim.AdamW([param], lr=lr, betas=(0.9, beta2), eps=1e-8, weight_decay=weight_decay)
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t in range(1, 4):
        g = rng.standard_normal(p.shape).astype(np.float32)
        param.grad = torch.from_numpy(g.copy())
        opt.step()
        hyper = np.asarray(hyper_values(lr, t, 0.9, beta2), np.float32)
        p, m, v = adamw(p, g, m, v, hyper, beta1=0.9, beta2=beta2, eps=1e-8, weight_decay=weight_decay)
    state = opt.state[param]
    np.testing.assert_allclose(p, param.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m, state["exp_avg"].numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(v, state["exp_avg_sq"].numpy(), rtol=1e-5, atol=1e-7)


def test_adamw_is_one_kernel_on_the_vector_and_scalar_engines():
    import trnlab.nki as nki
    p = np.ones((128, 64), np.float32)
    run = nki.run(adamw, p, p, p, p, np.asarray(hyper_values(1e-3, 1, 0.9, 0.95), np.float32))
    counts = run.launch.profile().engine_instructions
    assert counts["dve"] >= 10 and counts["act"] >= 1          # element-wise work on Vector, sqrt on Scalar
    assert counts.get("pe", 0) == 1                             # only the per-step scalars' spread over partitions
    dmas = sum(n for e, n in counts.items() if e.startswith("dma"))
    assert dmas == 1 + 4 + 3                                    # hyper, 4 loads and 3 stores per tile: fused


def test_squared_norm_is_the_sum_of_squares():
    x = np.random.default_rng(0).standard_normal((300, 70)).astype(np.float32)
    np.testing.assert_allclose(squared_norm(x)[0], float((x.astype(np.float64) ** 2).sum()), rtol=1e-5)
