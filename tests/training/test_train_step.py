"""The compiled training step (forward + backward + AdamW as one program) against PyTorch eager.

Same initial weights, same batches, same AdamW configuration: fp32 losses agree step by step over 50
steps, gradients and optimizer state agree tensor by tensor, bf16 matmuls stay on the same curve,
and a run resumed from a checkpoint repeats the uninterrupted one.
"""
import copy

import numpy as np
import pytest

from trnlab.hardware import presets
import torch

from trnlab.training import AdamWConfig, compile_train_step, load_train_state, save_train_state
from trnlab.training.run import run_compiled, run_pytorch, tiny_model, train_batches

CONFIG = AdamWConfig(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
C = 32                                       # tiny_config().n_embd


def _comparable(name: str, array: np.ndarray) -> np.ndarray:
    """The elements whose update follows from a real gradient. The key bias (qkv.bias[C:2C]) adds q·b_k
    to every score of a row, which softmax ignores: its gradient is zero in exact arithmetic and
    rounding noise (1e-10) on any machine, and AdamW divides the noise by its own size, so both runs
    move it by ±lr in directions set by rounding. It is checked apart (its gradient is ~0)."""
    if name.endswith("attn.qkv.bias"):
        return np.concatenate([array[:C], array[2 * C:]])
    return array


@pytest.fixture(scope="module")
def batches():
    return train_batches(50, batch_size=4, seed=0)


@pytest.fixture(scope="module")
def fp32_runs(batches):
    model = tiny_model(seed=0)
    reference = run_pytorch(model, batches, CONFIG)
    step = compile_train_step(model, batches[0], autocast="none", optimizer=CONFIG)
    return reference, run_compiled(step, batches), step


def test_fp32_loss_of_every_step_within_1e3_of_pytorch_over_50_steps(fp32_runs):
    reference, compiled, _ = fp32_runs
    ref, got = np.array(reference.losses), np.array(compiled.losses)
    assert len(got) == 50
    relative = np.abs(got - ref) / np.abs(ref)
    assert relative.max() < 1e-3, f"worst step {relative.argmax()}: {got[relative.argmax()]} vs {ref[relative.argmax()]}"
    assert ref[-10:].mean() < ref[:10].mean() - 0.3        # it learns: the comparison is not of two flat lines


def test_trained_weights_after_50_steps_match_pytorch(fp32_runs):
    reference, _, step = fp32_runs
    for name, p in reference.model.named_parameters():
        np.testing.assert_allclose(_comparable(name, step.params[name]), _comparable(name, p.detach().numpy()),
                                   rtol=1e-3, atol=2e-5, err_msg=name)


def test_gradients_and_adamw_state_match_pytorch_tensor_by_tensor(batches):
    model = tiny_model(seed=1)
    reference = copy.deepcopy(model)
    optimizer = CONFIG.torch_optimizer(reference)
    step = compile_train_step(model, batches[0], optimizer=CONFIG)
    for x, y in batches[:3]:
        result = step(x, y)
        _, loss = reference(x, y)
        optimizer.zero_grad()
        loss.backward()
        grads = {n: p.grad.detach().numpy().copy() for n, p in reference.named_parameters()}
        optimizer.step()
        assert result.loss == pytest.approx(loss.item(), rel=1e-5)
        assert set(result.grads) == set(grads)              # the tied lm_head / wte is one parameter
        for name, p in reference.named_parameters():
            scale = np.abs(grads[name]).max()
            assert np.abs(result.grads[name] - grads[name]).max() <= 1e-4 * scale + 1e-9, f"grad {name}"
            state = optimizer.state[p]
            np.testing.assert_allclose(_comparable(name, step.exp_avg[name]),
                                       _comparable(name, state["exp_avg"].numpy()), rtol=1e-4, atol=1e-9,
                                       err_msg=f"exp_avg {name}")
            np.testing.assert_allclose(_comparable(name, step.exp_avg_sq[name]),
                                       _comparable(name, state["exp_avg_sq"].numpy()), rtol=1e-3, atol=1e-12,
                                       err_msg=f"exp_avg_sq {name}")
            np.testing.assert_allclose(_comparable(name, step.params[name]), _comparable(name, p.detach().numpy()),
                                       rtol=1e-5, atol=1e-7, err_msg=f"param {name}")
        key_bias = slice(C, 2 * C)                           # softmax's shift invariance: no real gradient
        q_bias_scale = np.abs(grads["blocks.0.attn.qkv.bias"][:C]).max()
        assert np.abs(result.grads["blocks.0.attn.qkv.bias"][key_bias]).max() < 1e-4 * q_bias_scale
        assert np.abs(grads["blocks.0.attn.qkv.bias"][key_bias]).max() < 1e-4 * q_bias_scale
        assert step.step_count == int(optimizer.state[next(reference.parameters())]["step"])


def test_bf16_matmuls_follow_the_pytorch_curve_final_loss_within_2_percent(batches):
    model = tiny_model(seed=0)
    reference = run_pytorch(model, batches, CONFIG, autocast="matmult")
    step = compile_train_step(model, batches[0], autocast="matmult", optimizer=CONFIG)
    compiled = run_compiled(step, batches)
    ref, got = np.array(reference.losses), np.array(compiled.losses)
    assert abs(got[-1] - ref[-1]) / ref[-1] < 0.02
    # the curves overlap: smoothed over 5 steps, never more than 3 % apart
    kernel = np.ones(5) / 5
    smooth_ref, smooth_got = np.convolve(ref, kernel, "valid"), np.convolve(got, kernel, "valid")
    assert (np.abs(smooth_got - smooth_ref) / smooth_ref).max() < 0.03
    assert any(c.kernel == "cast.cast" for c in step.calls)           # bf16 operands really were made


def test_resumed_run_gives_the_same_losses_as_an_uninterrupted_one(tmp_path, fp32_runs, batches):
    _, uninterrupted, _ = fp32_runs
    model = tiny_model(seed=0)
    first = compile_train_step(model, batches[0], optimizer=CONFIG)
    losses = run_compiled(first, batches[:4]).losses
    save_train_state(first, tmp_path / "ckpt", losses)
    assert (tmp_path / "ckpt" / "train_state.safetensors").exists()
    resumed = compile_train_step(tiny_model(seed=5), batches[0], optimizer=CONFIG)   # other weights: replaced
    before = load_train_state(resumed, tmp_path / "ckpt")
    assert before == losses and resumed.step_count == 4
    after = run_compiled(resumed, batches[4:8]).losses
    assert before + after == uninterrupted.losses[:8]


def test_the_step_is_one_program_replayed_with_forward_backward_optimizer_regions(fp32_runs):
    _, compiled, step = fp32_runs
    profile = compiled.profiles[-1]
    assert step.program is not None and profile.total_ns > 0
    assert all(profile.phase_ns[p] > 0 for p in ("forward", "backward", "optimizer"))
    assert profile.phase_ns["backward"] > profile.phase_ns["forward"]      # the backward does twice the matmuls
    # each phase counts the time it adds, so the three and the runtime's start-up and tear-down add up
    # to the step (no overlap counted twice)
    spec = presets.core_spec(step.target)
    assert profile.launch_ns == spec.launch_ns > 0
    assert sum(profile.phase_ns.values()) + profile.launch_ns == pytest.approx(profile.total_ns, rel=1e-9)
    assert sum(profile.shares.values()) == pytest.approx(1.0)
    assert sum(1 for r in profile.regions if r.startswith("optimizer/adamw.")) == len(step.names)
    # the same program every step: same simulated time
    assert compiled.profiles[1].total_ns == pytest.approx(profile.total_ns)


def test_weight_gradients_need_no_materialised_transpose(fp32_runs):
    _, _, step = fp32_runs
    kernels = [c.kernel for c in step.calls if c.kind == "kernel"]
    assert "shape_ops.transpose_2d" not in kernels                  # read transposed by the Tensor engine
    assert kernels.count("shape_ops.matmul_t") >= 3 * 4             # 4 linear layers x (fwd, dx, dW) + lm_head


def test_a_batch_of_another_shape_is_refused_by_name(fp32_runs):
    _, _, step = fp32_runs
    x = torch.zeros(2, 24, dtype=torch.long)
    with pytest.raises(ValueError, match="batch shape"):
        step(x, x)
