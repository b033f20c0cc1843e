"""The kernel library covers a whole tiny GPT: trnlab.model.gpt's forward (logits and loss) and its
parameter gradients, recomputed kernel by kernel on the simulated NeuronCore, match PyTorch.

This is the sequence of kernel calls a compiler lowers the model to (reshapes between calls are
free views on the host). fp32; tolerances rtol/atol 1e-4 (logits, loss) and 2e-4 (gradients): only
summation order and the online softmax differ from torch.
"""
import torch

from trnlab.kernels import activations, attention, cross_entropy, elementwise, embedding, matmul, norms
from trnlab.model.gpt import GPT, GPTConfig

CONFIG = GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, n_embd=32)
B, T = 2, 16


def _model_and_batch():
    torch.manual_seed(0)
    model = GPT(CONFIG)
    for p in model.parameters():           # non-trivial biases and gains, so that every gradient is tested
        torch.nn.init.normal_(p, std=0.2)
    idx = torch.randint(0, CONFIG.vocab_size, (B, T))
    targets = torch.randint(0, CONFIG.vocab_size, (B, T))
    targets[0, :3] = -100
    return model, idx, targets


def _forward(model, idx, targets):
    """Logits and loss of `model` from kernels only; returns what the backward needs, too."""
    C, H = CONFIG.n_embd, CONFIG.n_head
    p = {name: t.detach() for name, t in model.named_parameters()}
    positions = torch.arange(T).repeat(B).int()
    x = elementwise.add(embedding.embedding(idx.reshape(-1).int(), p["wte.weight"]),
                        embedding.embedding(positions, p["wpe.weight"]))                  # (B*T, C)
    saved = []
    for i in range(CONFIG.n_layer):
        w = lambda name: p[f"blocks.{i}.{name}"]                                          # noqa: E731
        h1 = norms.layer_norm(x, w("ln_1.weight"), w("ln_1.bias"))
        qkv = matmul.linear(h1, w("attn.qkv.weight"), w("attn.qkv.bias"), None, "out_in")
        y, lse = attention.causal_attention_qkv(qkv.reshape(B, T, 3 * C), H, return_lse=True)
        x_mid = elementwise.add(x, matmul.linear(y.reshape(B * T, C), w("attn.proj.weight"), w("attn.proj.bias"),
                                                 None, "out_in"))
        h2 = norms.layer_norm(x_mid, w("ln_2.weight"), w("ln_2.bias"))
        pre = matmul.linear(h2, w("mlp.fc.weight"), w("mlp.fc.bias"), None, "out_in")
        act = activations.gelu(pre)
        x_out = elementwise.add(x_mid, matmul.linear(act, w("mlp.proj.weight"), w("mlp.proj.bias"), None, "out_in"))
        saved.append((x, h1, qkv, y, lse, x_mid, h2, pre, act))
        x = x_out
    hf = norms.layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    logits = matmul.linear(hf, p["wte.weight"], None, None, "out_in")                    # tied lm_head
    loss = cross_entropy.cross_entropy(logits, targets.reshape(-1).int())
    return logits.reshape(B, T, -1), loss[0], (p, positions, saved, x, hf, logits)


def test_gpt_forward_from_kernels_matches_the_model():
    model, idx, targets = _model_and_batch()
    with torch.no_grad():
        expected_logits, expected_loss = model(idx, targets)
    logits, loss, _ = _forward(model, idx, targets)
    torch.testing.assert_close(logits, expected_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-4, atol=1e-4)


def test_gpt_backward_from_kernels_matches_autograd():
    model, idx, targets = _model_and_batch()
    _, loss = model(idx, targets)
    loss.backward()
    C, H = CONFIG.n_embd, CONFIG.n_head
    _, _, (p, positions, saved, x_last, hf, logits) = _forward(model, idx, targets)
    grads = {}
    dlogits = cross_entropy.cross_entropy_backward(logits, targets.reshape(-1).int())
    dhf, grads["wte.weight"], _ = matmul.linear_backward(hf, p["wte.weight"], dlogits, "out_in")
    dx, grads["ln_f.weight"], grads["ln_f.bias"] = norms.layer_norm_backward(x_last, p["ln_f.weight"], dhf)
    for i in reversed(range(CONFIG.n_layer)):
        x, h1, qkv, y, lse, x_mid, h2, pre, act = saved[i]
        w = lambda name: p[f"blocks.{i}.{name}"]                                          # noqa: E731
        g = lambda name, value: grads.__setitem__(f"blocks.{i}.{name}", value)           # noqa: E731
        dact, dw, db = matmul.linear_backward(act, w("mlp.proj.weight"), dx, "out_in")
        g("mlp.proj.weight", dw), g("mlp.proj.bias", db)
        dpre = activations.gelu_backward(pre, dact)
        dh2, dw, db = matmul.linear_backward(h2, w("mlp.fc.weight"), dpre, "out_in")
        g("mlp.fc.weight", dw), g("mlp.fc.bias", db)
        dx_ln, dgamma, dbeta = norms.layer_norm_backward(x_mid, w("ln_2.weight"), dh2)
        g("ln_2.weight", dgamma), g("ln_2.bias", dbeta)
        dx_mid = elementwise.add(dx, dx_ln)                                               # the residual stream
        dy, dw, db = matmul.linear_backward(y.reshape(B * T, C), w("attn.proj.weight"), dx_mid, "out_in")
        g("attn.proj.weight", dw), g("attn.proj.bias", db)
        dqkv = attention.causal_attention_qkv_backward(qkv.reshape(B, T, 3 * C), y, dy.reshape(B, T, C), lse, H)
        dh1, dw, db = matmul.linear_backward(h1, w("attn.qkv.weight"), dqkv.reshape(B * T, 3 * C), "out_in")
        g("attn.qkv.weight", dw), g("attn.qkv.bias", db)
        dx_ln, dgamma, dbeta = norms.layer_norm_backward(x, w("ln_1.weight"), dh1)
        g("ln_1.weight", dgamma), g("ln_1.bias", dbeta)
        dx = elementwise.add(dx_mid, dx_ln)
    dtable = embedding.embedding_backward(idx.reshape(-1).int(), dx, CONFIG.vocab_size)
    grads["wte.weight"] = elementwise.add(grads["wte.weight"], dtable)                    # tied: two uses
    grads["wpe.weight"] = embedding.embedding_backward(positions, dx, CONFIG.block_size)
    for name, param in model.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, rtol=2e-4, atol=2e-4, msg=name)
