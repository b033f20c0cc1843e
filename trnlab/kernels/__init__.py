"""trnlab.kernels — the kernel library a tiny GPT is compiled to, written in trnlab.nki (NKI's public style).

Modules by topic (`trnlab.kernels.norms.layer_norm`, ...); `KERNELS` maps each kernel's name to the
kernel and a one-line description. Each kernel is an `@nki.jit` function: call it with NumPy arrays
or torch tensors (HBM inputs, in PyTorch's layout unless its docstring says otherwise) and it returns
HBM outputs of the same kind;
`nki.run(kernel, *args, timing_only=True)` (with `nki.ShapeDtype` arguments) gives its simulated time
without computing values. Shapes: any; leading axes are flattened by the caller ((B, T, C) ->
(B*T, C)); integer ids are int32. `python -m trnlab.kernels` prints the simulated time of each kernel
at tiny-GPT sizes. The matmul optimization ladder of notebook 05 lives in `matmul_ladder.py`; the
kernels of the calibration table (docs/calibration.md) in `vector_add.py` (CS149) and `mamba.py` (AWS).

Forward                                     Backward
matmul        a @ b, any M, K, N             matmul_backward        (g @ b.T, a.T @ g)
matmul_lhsT   lhsT.T @ rhs (no transposes)   linear_backward        (g @ w.T, x.T @ g, sum of g over rows)
linear        act(x @ w + b), fused          (activation: gelu_backward first); w [in, out] or [out, in]
softmax       stable softmax over rows       softmax_backward       y * (dy - sum(dy * y))
layer_norm    nn.LayerNorm over rows         layer_norm_backward    (dx, dgamma, dbeta)
rms_norm      RMS norm over rows             rms_norm_backward      (dx, dweight)
gelu          erf (nn.GELU) or tanh form     gelu_backward          dy * gelu'(x)
embedding     table[ids] (indirect DMA)      embedding_backward     scatter-add into the table
causal_attention  flash-style, multi-head    causal_attention_backward  (dq, dk, dv), scores recomputed
causal_attention_qkv  same, model's layout   causal_attention_qkv_backward  d(qkv [B, T, 3C])
cross_entropy mean over non-ignored targets  cross_entropy_backward (softmax - one_hot) / count
add           a + b (residuals)              (its gradient reaches both inputs unchanged)
"""
from trnlab.kernels import activations, attention, cross_entropy, elementwise, embedding, matmul, norms, softmax

KERNELS = {  # name -> (kernel, one-line description)
    "matmul": (matmul.matmul, "a [M, K] @ b [K, N] for any shape; row-major a transposed on the Tensor engine"),
    "matmul_lhsT": (matmul.matmul_lhsT, "lhsT [K, M].T @ rhs [K, N]: the Tensor engine's layout, no transposes"),
    "linear": (matmul.linear, "activation(x [M, K] @ w [K, N] + bias [N]), bias and activation fused on PSUM exit"),
    "matmul_backward": (matmul.matmul_backward, "(g @ b.T, a.T @ g): the two matmuls of a matmul's gradient"),
    "linear_backward": (matmul.linear_backward, "(g @ w.T, x.T @ g, column sums of g) for a linear layer"),
    "softmax": (softmax.softmax, "numerically stable softmax over the last axis of [R, C]"),
    "softmax_backward": (softmax.softmax_backward, "y * (dy - sum(dy * y)) from the forward output y"),
    "layer_norm": (norms.layer_norm, "layer norm over the last axis of [R, C] with gamma, beta [C]"),
    "layer_norm_backward": (norms.layer_norm_backward, "(dx, dgamma, dbeta) of layer norm, statistics recomputed"),
    "rms_norm": (norms.rms_norm, "RMS norm over the last axis of [R, C] with weight [C]"),
    "rms_norm_backward": (norms.rms_norm_backward, "(dx, dweight) of RMS norm"),
    "gelu": (activations.gelu, "GELU, erf form (nn.GELU default) or tanh form (GPT-2)"),
    "gelu_backward": (activations.gelu_backward, "dy * gelu'(x), either form"),
    "embedding": (embedding.embedding, "table [V, C] rows for int32 ids [T], gathered by an indirect DMA"),
    "embedding_backward": (embedding.embedding_backward, "scatter-add of dout [T, C] into a [V, C] table gradient"),
    "causal_attention": (
        attention.causal_attention, "causal multi-head attention, tiled, online softmax, optional lse"),
    "causal_attention_backward": (
        attention.causal_attention_backward, "(dq, dk, dv) of causal attention, FlashAttention-2 order"),
    "causal_attention_qkv": (
        attention.causal_attention_qkv, "causal attention from the qkv projection [B, T, 3C] to y [B, T, C]"),
    "causal_attention_qkv_backward": (
        attention.causal_attention_qkv_backward, "gradient of causal_attention_qkv, laid out like qkv"),
    "add": (elementwise.add, "a + b for [R, C]: residual connections and gradients that meet"),
    "cross_entropy": (
        cross_entropy.cross_entropy, "mean cross-entropy of logits [R, V] vs int32 targets, ignore_index=-100"),
    "cross_entropy_backward": (
        cross_entropy.cross_entropy_backward, "(softmax - one_hot) * dloss / count of counted targets"),
}

__all__ = ["KERNELS", "activations", "attention", "cross_entropy", "elementwise", "embedding", "matmul", "norms",
           "softmax"]
