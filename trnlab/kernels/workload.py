"""The arguments each kernel sees in one training step of a tiny GPT, as shapes (for timing-only runs).

`gpt_arguments(...)` gives, per kernel name of `trnlab.kernels.KERNELS`, positional arguments built from
`nki.ShapeDtype` (no values) at the sizes trnlab.model.gpt uses: tokens = batch * seq rows, d_model
features, 4 * d_model MLP width, n_head heads, a small vocabulary. `simulate(...)` runs every kernel in
timing-only mode on a preset and returns its simulated latency and profile.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import trnlab.nki as nki


def gpt_arguments(batch: int = 4, seq: int = 128, d_model: int = 128, n_head: int = 4, vocab: int = 64,
                  dtype: str = "bfloat16") -> dict[str, tuple]:
    """name -> positional arguments (nki.ShapeDtype and plain values) of each kernel at tiny-GPT sizes."""
    tokens, hidden, head = batch * seq, 4 * d_model, d_model // n_head

    def t(*shape, dt=dtype):
        return nki.ShapeDtype(shape, dt)

    x, w, row = t(tokens, d_model), t(d_model, hidden), t(d_model)
    heads = t(batch, n_head, seq, head)
    lse = t(batch, n_head, seq, dt="float32")
    ids = t(tokens, dt="int32")
    return {
        "matmul": (x, w),
        "matmul_lhsT": (t(d_model, tokens), w),
        "linear": (x, w, t(hidden), "gelu"),
        "matmul_backward": (x, w, t(tokens, hidden)),
        "linear_backward": (x, w, t(tokens, hidden)),
        "softmax": (t(batch * n_head * seq, seq),),
        "softmax_backward": (t(batch * n_head * seq, seq), t(batch * n_head * seq, seq)),
        "layer_norm": (x, row, row),
        "layer_norm_backward": (x, row, x),
        "rms_norm": (x, row),
        "rms_norm_backward": (x, row, x),
        "gelu": (t(tokens, hidden),),
        "gelu_backward": (t(tokens, hidden), t(tokens, hidden)),
        "embedding": (ids, t(vocab, d_model)),
        "embedding_backward": (ids, x, vocab),
        "causal_attention": (heads, heads, heads),
        "causal_attention_backward": (heads, heads, heads, heads, heads, lse),
        "causal_attention_qkv": (t(batch, seq, 3 * d_model), n_head),
        "causal_attention_qkv_backward": (t(batch, seq, 3 * d_model), t(batch, seq, d_model),
                                          t(batch, seq, d_model), lse, n_head),
        "add": (x, x),
        "cross_entropy": (t(tokens, vocab, dt="float32"), ids),
        "cross_entropy_backward": (t(tokens, vocab, dt="float32"), ids),
    }


@dataclass
class KernelTime:
    name: str
    latency_us: float        # simulated
    wall_s: float            # host time to simulate it
    instructions: int
    bottleneck: str
    profile: object


def simulate(target: str = "trn2", **sizes) -> list[KernelTime]:
    """Run every kernel of the library in timing-only mode at gpt_arguments(**sizes)."""
    from trnlab.kernels import KERNELS
    arguments = gpt_arguments(**sizes)
    times = []
    for name, (kernel, _) in KERNELS.items():
        start = time.perf_counter()
        run = nki.run(kernel, *arguments[name], target=target, timing_only=True)
        wall = time.perf_counter() - start
        profile = run.profile()
        times.append(KernelTime(name, run.latency_us, wall, len(run.timeline), profile.bottleneck, profile))
    return times
