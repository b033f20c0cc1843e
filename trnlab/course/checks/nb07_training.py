"""Checks for notebook 07, training on the simulated Trainium (cases / run beside the student / judge
elsewhere): the FLOPs of one training step, and the memory a training step holds for the weights,
their gradients and AdamW's two moments. Answers come back as plain numbers; the judge recomputes them
from the case's model shape."""

from __future__ import annotations

from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise

NOTEBOOK = "07_training_on_trainium"
FIXED_SHAPES = [  # (n_layer, n_embd, vocab_size, block_size, batch, seq_len): the tiny GPTs of the course
    (1, 32, 43, 24, 4, 24),
    (4, 64, 43, 32, 64, 24),
    (12, 768, 50257, 1024, 8, 1024),      # GPT-2 small's shape
]


def _case(n_layer, n_embd, vocab, block, batch, seq_len) -> dict:
    return {"n_layer": n_layer, "n_embd": n_embd, "vocab_size": vocab, "block_size": block, "batch": batch,
            "seq_len": seq_len}


def _drawn(rng, count: int) -> list:
    out = []
    for _ in range(count):
        heads = int(rng.choice([2, 4, 8]))
        n_embd = heads * int(rng.choice([8, 16, 32]))
        block = int(rng.choice([32, 64, 128]))
        out.append(_case(int(rng.integers(1, 9)), n_embd, int(rng.integers(40, 5000)), block,
                         int(rng.integers(1, 65)), int(rng.integers(1, block + 1))))
    return out


def _what(c: dict) -> str:
    return (f"n_layer={c['n_layer']}, n_embd={c['n_embd']}, vocab_size={c['vocab_size']}, "
            f"block_size={c['block_size']}, batch={c['batch']}, seq_len={c['seq_len']}")


def _close(got: float, want: float) -> bool:
    return abs(got - want) <= 1e-9 * max(abs(want), 1.0)


# -- 1. the FLOPs of a training step -------------------------------------------------------------------
@exercise("nb07_step_flops", notebook=NOTEBOOK, points=3, answer="train_step_flops",
          title="The FLOPs of one training step: 6·N·tokens plus attention",
          asks_for=("trnlab.training.report.textbook_flops", "trnlab.training.report.matmul_params",
                    "trnlab.economics.simulated.training_model_flops"))
class StepFlops:
    def cases(rng):
        return [_case(*shape) for shape in FIXED_SHAPES] + _drawn(rng, 3)

    def run(train_step_flops, case):
        got = train_step_flops(case["n_layer"], case["n_embd"], case["vocab_size"], case["batch"], case["seq_len"])
        return plain.number(got, "the FLOPs of a training step")

    def judge(case, got):
        L, C, V, B, T = case["n_layer"], case["n_embd"], case["vocab_size"], case["batch"], case["seq_len"]
        n = L * 12 * C * C + V * C
        dense = 6 * n * B * T
        attention = 3 * 4 * L * B * T * T * C
        want = dense + attention
        if _close(got, want):
            return
        hint = ""
        if _close(got, dense):
            hint = ": the attention matmuls (q·kᵀ and attention·v) are missing"
        elif _close(got, want / 3) or _close(got, dense / 3 + attention / 3):
            hint = ": that is the forward only; the backward does twice the forward's matmul work"
        elif _close(got, 6 * (n - V * C) * B * T + attention):
            hint = ": the lm_head's matmul (vocab_size × n_embd, tied to the token table) is missing"
        elif _close(got, dense + attention / 2):
            hint = ": only one of the two attention matmuls is counted (q·kᵀ and attention·v, each 2·T·C per token)"
        elif _close(got, 6 * _params(case) * B * T + attention) or _close(got, 6 * _params(case) * B * T):
            hint = (": 6·N counts the matmul weights only (12·C² per block and the lm_head's V·C), not biases, "
                    "norms or the position table")
        elif _close(got, want / B):
            hint = ": that is one sequence; the step runs batch × seq_len tokens"
        elif _close(got, 6 * (12 * C * C + V * C) * B * T + attention / L):
            hint = ": that is one block; count n_layer blocks"
        else:
            hint = (f" — it is made of 6·N·tokens = {dense:.6g} (N = 12·C²·n_layer + V·C = {n:,} matmul weights, "
                    f"{B * T} tokens) plus the attention matmuls {attention:.6g}; yours is {got - want:+.6g} off")
        raise CheckFailed(f"expected {want:.6g} FLOPs for {_what(case)}, got {got:.6g}{hint}")


# -- 2. the memory a step holds -------------------------------------------------------------------------
def _params(c: dict) -> int:
    C = c["n_embd"]
    return c["vocab_size"] * C + c["block_size"] * C + c["n_layer"] * (12 * C * C + 13 * C) + 2 * C


@exercise("nb07_step_memory", notebook=NOTEBOOK, points=3, answer="train_state_bytes",
          title="The bytes of weights, gradients and AdamW state of a GPT",
          asks_for=("trnlab.model.gpt.GPT.num_params",))
class StepMemory:
    def cases(rng):
        return [_case(*shape) for shape in FIXED_SHAPES] + _drawn(rng, 3)

    def run(train_state_bytes, case):
        got = train_state_bytes(case["n_layer"], case["n_embd"], case["vocab_size"], case["block_size"])
        if not isinstance(got, dict):
            raise CheckFailed(f"expected a dict with 'weights', 'grads' and 'optimizer', got {type(got).__name__}")
        return {plain.text(k, "a key"): plain.number(v, f"the bytes of {k}") for k, v in got.items()}

    def judge(case, got):
        p = _params(case)
        want = {"weights": 4 * p, "grads": 4 * p, "optimizer": 8 * p}
        if set(got) != set(want):
            raise CheckFailed(f"expected the keys {sorted(want)}, got {sorted(got)}")
        for key, value in want.items():
            if _close(got[key], value):
                continue
            hint = ""
            if key != "optimizer" and _close(got[key], 4 * (p + case["vocab_size"] * case["n_embd"])):
                hint = ": the lm_head shares the token table — one tensor, counted once"
            elif key == "optimizer" and _close(got[key], 4 * p):
                hint = ": AdamW keeps two moments (exp_avg and exp_avg_sq) per parameter"
            elif _close(got[key], value / 2):
                hint = ": the course trains in fp32 (4 bytes per number)"
            raise CheckFailed(f"expected {value:.6g} bytes of {key} for {_what(case)} ({p} parameters), "
                              f"got {got[key]:.6g}{hint}")
