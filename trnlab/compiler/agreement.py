"""Does a compiled GPT answer like the PyTorch model? Logits and greedy answers, compared exactly.

Greedy answers are compared by *teacher forcing*, which is exact and needs one forward per batch:
PyTorch generates each prompt's greedy answer; the prompt + answer (right-padded to the context, which
the causal mask makes harmless) goes through the compiled model once; the compiled model would
generate the same answer if and only if its argmax at every answer position is the token PyTorch
chose (by induction over the positions). `generate_ids` stops at T + 1 tokens, so the window of the
first T tokens predicts every answer token.

One compiled graph per shape (Neuron's buckets): `compiled_for(batch)` gives the compiled model of
that batch size; the last batch is padded with copies of its first row.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from trnlab.data.tasks import model_prompt, task_of
from trnlab.model.generate import generate_ids


@dataclass
class Agreement:
    prompts: int
    identical: int                 # prompts whose greedy answer is identical
    max_abs_error: float           # logits, over all compared positions
    max_abs_logit: float
    positions: int

    @property
    def fraction(self) -> float:
        return self.identical / self.prompts if self.prompts else 1.0

    @property
    def relative_error(self) -> float:
        """max |compiled - torch| / max |torch| over the logits of every answer position."""
        return self.max_abs_error / self.max_abs_logit if self.max_abs_logit else 0.0


def reference_sequences(model, tokenizer, prompts: list[str]) -> list[tuple[list[int], int]]:
    """(prompt + greedy answer token ids, prompt length) per prompt, from PyTorch (prompts of one length
    generate together; each row is cut after its own <eos>)."""
    encoded = [tokenizer.encode_prompt(model_prompt(task_of(p), p)) for p in prompts]
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(encoded):
        by_length.setdefault(len(ids), []).append(i)
    out: list = [None] * len(prompts)
    for length, rows in by_length.items():
        idx = torch.tensor([encoded[i] for i in rows], dtype=torch.long)        # (n, length)
        gen = generate_ids(model, idx, model.config.block_size, tokenizer.eos_id)
        for r, i in enumerate(rows):
            seq = gen[r].tolist()
            if tokenizer.eos_id in seq[length:]:
                seq = seq[:length + seq[length:].index(tokenizer.eos_id) + 1]
            out[i] = (seq, length)
    return out


def compare(compiled_for, model, tokenizer, prompts: list[str], batch: int) -> Agreement:
    """Compare a compiled model (`compiled_for(batch)` -> a callable on (batch, T) ids) with `model`."""
    T = model.config.block_size
    pad = tokenizer.pad_id if hasattr(tokenizer, "pad_id") else 0
    seqs = reference_sequences(model, tokenizer, prompts)
    # generate_ids stops once a sequence holds T + 1 tokens, so every answer token j <= T is predicted
    # from the window seq[:T] (position j - 1): one window per prompt.
    ok = [True] * len(prompts)
    max_err = max_ref = 0.0
    positions = 0
    compiled = compiled_for(batch)
    for b0 in range(0, len(seqs), batch):
        chunk = list(range(b0, min(b0 + batch, len(seqs))))
        rows = [seqs[i][0][:T] + [pad] * (T - len(seqs[i][0][:T])) for i in chunk]
        rows += [rows[0]] * (batch - len(rows))
        idx = torch.tensor(rows, dtype=torch.long)  # (batch, T)
        with torch.no_grad():
            expected, _ = model(idx)
        got = compiled(idx)
        got = got[0] if isinstance(got, tuple) else got
        for r, i in enumerate(chunk):
            seq, plen = seqs[i]
            for p in range(plen - 1, len(seq) - 1):          # position p predicts token p + 1
                positions += 1
                max_err = max(max_err, float((got[r, p].float() - expected[r, p]).abs().max()))
                max_ref = max(max_ref, float(expected[r, p].abs().max()))
                if int(got[r, p].argmax()) != seq[p + 1]:
                    ok[i] = False
    return Agreement(len(prompts), sum(ok), max_err, max_ref, positions)
