"""The Trainium backend: prefill and decode as kernel sequences on the simulated NeuronCore.

Both forwards are the call sequence the compiler lowers the model to (tests/test_kernels_gpt.py shows
it for training): embedding gathers, layer norm, fused linear layers, attention, residual adds, the
tied lm_head. Prefill uses the flash-style `causal_attention_qkv` over the padded prompt; decode uses
`decode_attention` (one query per sequence against its KV cache and its own key).

Each kernel is launched with `nki.run` on the chosen preset ("trn1", "trn2", "trn3"), which traces
it into a program once per input shape (the program cache, like one compiled NEFF per bucket) and
replays that program on a fresh core: after the first request of a bucket no kernel is traced again.
The step's simulated time is the sum of the kernels' simulated latencies. That assumes kernels run
one after another on one NeuronCore with no launch gap and no overlap between kernels (one program
for the whole step would let a kernel's loads overlap the previous kernel's tail). Host work between
kernels — slicing the new keys and values out of qkv, reshapes — is free, as views are.

`_run` is the one place where kernels meet the device: tracing the whole step into one program per
bucket and replaying it with `Device.run` would change only this file.
"""

from __future__ import annotations

import numpy as np

import trnlab.nki as nki
from trnlab.kernels import activations, attention, elementwise, embedding, matmul, norms  # noqa: F401
from trnlab.kernels.decode_attention import decode_attention
from trnlab.model.gpt import GPT
from trnlab.serve.backend import DEFAULT_MAX_BATCH, Backend

TARGETS = ("trn1", "trn2", "trn3")


class TrainiumBackend(Backend):
    name = "trainium"

    def __init__(self, model: GPT, target: str = "trn2", max_batch: int = DEFAULT_MAX_BATCH, keep_runs: bool = False):
        super().__init__(model, max_batch)
        if target not in TARGETS:
            raise ValueError(f"unknown Trainium target {target!r}: choose one of {', '.join(TARGETS)}")
        self.target = target
        self.device = target
        self.keep_runs = keep_runs          # keep each kernel's KernelRun of the last step (timelines, profiles)
        self.last_runs: list[tuple[str, nki.KernelRun]] = []
        self.params = {name: p.detach().numpy().astype(np.float32) for name, p in model.named_parameters()}
        self._kernels: list[tuple[str, float]] = []

    def _run(self, name: str, kernel, *args, **kwargs):
        """Launch one kernel on the simulated core; record its simulated latency under `name`."""
        run = nki.run(kernel, *args, target=self.target, **kwargs)
        self._kernels.append((name, run.latency_ns))
        if self.keep_runs:
            self.last_runs.append((name, run))
        return run.outputs

    def _start(self) -> None:
        self._kernels = []
        self.last_runs = []

    def _finish(self):
        return float(sum(ns for _, ns in self._kernels)), list(self._kernels)

    def _body(self, x: np.ndarray, attend) -> tuple[np.ndarray, list, list]:
        """The layers after the embeddings: x (R, C) → logits (R, V); attend(layer, qkv) → y (R, C).
        Returns logits and each layer's qkv (for the new keys and values)."""
        p, C = self.params, self.config.n_embd
        qkvs = []
        for i in range(self.config.n_layer):
            w = lambda name: p[f"blocks.{i}.{name}"]                                           # noqa: E731
            h1 = self._run(f"blocks.{i}.ln_1", norms.layer_norm, x, w("ln_1.weight"), w("ln_1.bias"))
            qkv = self._run(f"blocks.{i}.attn.qkv", matmul.linear, h1, w("attn.qkv.weight"), w("attn.qkv.bias"),
                            None, "out_in")                                                    # (R, 3C)
            qkvs.append(qkv)
            y = attend(i, qkv)                                                                  # (R, C)
            proj = self._run(f"blocks.{i}.attn.proj", matmul.linear, y, w("attn.proj.weight"), w("attn.proj.bias"),
                             None, "out_in")
            x = self._run(f"blocks.{i}.residual_1", elementwise.add, x, proj)
            h2 = self._run(f"blocks.{i}.ln_2", norms.layer_norm, x, w("ln_2.weight"), w("ln_2.bias"))
            act = self._run(f"blocks.{i}.mlp.fc", matmul.linear, h2, w("mlp.fc.weight"), w("mlp.fc.bias"),
                            "gelu", "out_in")                                                  # (R, 4C), GELU fused
            out = self._run(f"blocks.{i}.mlp.proj", matmul.linear, act, w("mlp.proj.weight"), w("mlp.proj.bias"),
                            None, "out_in")
            x = self._run(f"blocks.{i}.residual_2", elementwise.add, x, out)
        hf = self._run("ln_f", norms.layer_norm, x, p["ln_f.weight"], p["ln_f.bias"])
        logits = self._run("lm_head", matmul.linear, hf, p["wte.weight"], None, None, "out_in")  # tied to wte
        return logits, qkvs

    def _embed(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        p = self.params
        tokens = self._run("wte", embedding.embedding, ids.astype(np.int32), p["wte.weight"])      # (R, C)
        places = self._run("wpe", embedding.embedding, positions.astype(np.int32), p["wpe.weight"])
        return self._run("embed_add", elementwise.add, tokens, places)

    def _prefill_forward(self, ids: np.ndarray):
        self._start()
        T, C, H = len(ids), self.config.n_embd, self.config.n_head
        x = self._embed(ids, np.arange(T))                                                      # (T, C)
        attend = lambda i, qkv: self._run(f"blocks.{i}.attn.attention", attention.causal_attention_qkv,  # noqa: E731
                                          qkv.reshape(1, T, 3 * C), H).reshape(T, C)
        logits, qkvs = self._body(x, attend)
        qkv = np.stack(qkvs)                                                                    # (n_layer, T, 3C)
        return (logits, qkv[:, :, C:2 * C], qkv[:, :, 2 * C:], *self._finish())

    def _decode_forward(self, ids, positions, keys, values, bias):
        self._start()
        C, H = self.config.n_embd, self.config.n_head
        x = self._embed(ids, positions)                                                         # (B, C)
        attend = lambda i, qkv: self._run(f"blocks.{i}.attn.attention", decode_attention, qkv,  # noqa: E731
                                          np.ascontiguousarray(keys[:, i]), np.ascontiguousarray(values[:, i]),
                                          bias, H)
        logits, qkvs = self._body(x, attend)
        qkv = np.stack(qkvs, axis=1)                                                            # (B, n_layer, 3C)
        return (logits, qkv[:, :, C:2 * C], qkv[:, :, 2 * C:], *self._finish())
