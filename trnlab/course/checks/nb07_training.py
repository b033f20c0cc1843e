"""Checks for notebook 07, training on the simulated Trainium (cases / run beside the student / judge
elsewhere): the FLOPs of one training step, the memory a training step holds for the weights, their
gradients and AdamW's two moments, and where AdamW's updates go in the step (predicted, then measured).
Answers come back as plain data; the judge recomputes the first two from the case's model shape and
replays the third's placement on the simulated chip (`trnlab.training.overlap`)."""

from __future__ import annotations

import math

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
        elif _close(got, 2 * want / 3):
            hint = (": the backward is counted as much as the forward; it does twice the forward's matmul work "
                    "(one matmul for the input's gradient and one for the weight's: 4 FLOPs per weight and token)")
        elif (per := _per_parameter(got - want, case)) is not None:
            hint = (f": that is {per[0]:g} FLOPs per {per[1]} more than 6·N·tokens plus attention — the AdamW update "
                    f"is element-wise work on the Vector engine, not matmul FLOPs; the count is the forward's and "
                    f"backward's matmuls only")
        elif _close(got, want / B):
            hint = ": that is one sequence; the step runs batch × seq_len tokens"
        elif _close(got, 6 * (12 * C * C + V * C) * B * T + attention / L):
            hint = ": that is one block; count n_layer blocks"
        else:
            hint = (f" — it is made of 6·N·tokens = {dense:.6g} (N = 12·C²·n_layer + V·C = {n:,} matmul weights, "
                    f"{B * T} tokens) plus the attention matmuls {attention:.6g}; yours is {got - want:+.6g} off")
        raise CheckFailed(f"expected {want:.6g} FLOPs for {_what(case)}, got {got:.6g}{hint}")


def _per_parameter(extra: float, case: dict):
    """(k, what) if `extra` is k (1 to 24) FLOPs per parameter or per matmul weight: an optimizer counted in."""
    C = case["n_embd"]
    for count, what in ((_params(case), "parameter"), (case["n_layer"] * 12 * C * C + case["vocab_size"] * C,
                                                       "matmul weight")):
        k = extra / count
        if 0.5 <= k <= 24.5 and _close(extra, round(k) * count):
            return round(k), what
    return None


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


# -- 3. the optimizer inside the backward: predict, then measure --------------------------------------
# The answer, `place_updates(backward, default)`, gets the backward as plain data — [(region,
# [parameters whose gradient the call writes]), ...] in program order — and the default step's phase
# times ({"forward_us", "backward_us", "optimizer_us"}: every update after the backward), and returns
# where each AdamW update goes and the step time the student predicts. The judge compiles the step
# itself (notebook 07's one-block GPT, and the same with two blocks), replays the placement on the
# simulated chip (`overlap.simulate_placement`) and holds it to the targets below.
OVERLAP_CASES = [("trn2", 1), ("trn2", 2)]         # (target, n_layer)
REFERENCE_DELAYS = range(1, 7)  # the reference: each update j backward calls after its gradient, the best j
OVERHEAD_TARGET = 1.2          # what the optimizer adds to the step: at most 120 % of the reference's
PREDICTION_TOLERANCE = 0.05    # the predicted step within 5 % of the measured one

_STEPS: dict = {}


def overlap_step(target: str, n_layer: int = 1):
    """Notebook 07's training step (batch 4 × 24 tokens, `n_layer` blocks) for `target`, compiled once
    per process."""
    key = (target, n_layer)
    if key not in _STEPS:
        from trnlab.training import AdamWConfig, compile_train_step
        from trnlab.training.run import tiny_model, train_batches
        batch = train_batches(steps=1, batch_size=4, seed=0)[0]
        _STEPS[key] = compile_train_step(tiny_model(seed=0, n_layer=n_layer), batch, target=target,
                                         optimizer=AdamWConfig(lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1))
    return _STEPS[key]


_MEASURED: dict = {}


def measure_placement(target: str, n_layer: int, placement: dict):
    """The replayed step's profile for `placement` (memoised: the judge measures a placement once)."""
    from trnlab.training import overlap
    key = (target, n_layer, tuple(sorted(placement.items())))
    if key not in _MEASURED:
        _MEASURED[key] = overlap.simulate_placement(overlap_step(target, n_layer), placement)
    return _MEASURED[key]


def delayed_placement(target: str, n_layer: int, calls_later: int) -> dict:
    """Each update `calls_later` backward calls after the call that finishes its gradient (or last, if
    none is left)."""
    from trnlab.training import overlap
    step = overlap_step(target, n_layer)
    regions = [region for region, _ in overlap.backward_calls(step)]
    return {n: regions[min(regions.index(r) + calls_later, len(regions) - 1)]
            for n, r in overlap.ready_after(step).items()}


def reference_placement(target: str, n_layer: int) -> dict:
    """The fastest of the delayed placements, each update 1 to 6 backward calls after its gradient,
    measured here."""
    return min((delayed_placement(target, n_layer, j) for j in REFERENCE_DELAYS),
               key=lambda placement: measure_placement(target, n_layer, placement).total_us)


def default_phases_us(target: str, n_layer: int) -> dict:
    """The default step's phase times (every update after the backward), in µs."""
    from trnlab.training import overlap
    default = measure_placement(target, n_layer, overlap.default_placement(overlap_step(target, n_layer)))
    return {f"{phase}_us": round(default.phase_ns[phase] / 1e3, 3) for phase in ("forward", "backward", "optimizer")}


def forward_backward_us(target: str, n_layer: int) -> float:
    """The default step without its updates' tail — the forward, the backward and the runtime's start-up
    and tear-down: the floor of any placement."""
    from trnlab.training import overlap
    default = measure_placement(target, n_layer, overlap.default_placement(overlap_step(target, n_layer)))
    return (default.total_ns - default.phase_ns["optimizer"]) / 1e3


def _placement_cause(target: str, n_layer: int, placement: dict, tail_us: float) -> str:
    """Which choice of the placement kept the updates from hiding."""
    from trnlab.training import overlap
    step = overlap_step(target, n_layer)
    calls = overlap.backward_calls(step)
    regions = [region for region, _ in calls]
    ready = overlap.ready_after(step)
    last = regions[-1]
    at_ready = [n for n in step.names if placement[n] == ready[n] and ready[n] != last]
    at_end = [n for n in step.names if placement[n] == last and ready[n] != last]
    far = [n for n in step.names if regions.index(placement[n]) - regions.index(ready[n]) > 3 and placement[n] != last]
    if len(at_ready) >= len(step.names) // 2:
        return (f"{len(at_ready)} of your {len(step.names)} updates sit directly behind the call that finishes "
                f"their gradient: there its inputs are ready as soon as the backward's next call's, it is older, so "
                f"the engines issue it first, and the backward — the step's critical path — waits behind it")
    if len(at_end) >= len(step.names) // 2:
        return (f"{len(at_end)} of your {len(step.names)} updates still wait for the backward's last call "
                f"({last}) although their gradients are finished earlier: nothing is left to overlap them with")
    if far:
        return (f"{len(far)} of your {len(step.names)} updates are issued more than 3 calls after their gradient "
                f"is finished: the later an update starts, the fewer backward calls are left to overlap it, and "
                f"the last ones bunch up after the backward ({tail_us:.1f} µs of updates after its last call)")
    return "the updates still delay the backward's calls (compare your timeline with the default's)"


# No asks_for: the package has no function that places updates for a target; `simulate_placement` is
# the measurement the statement hands the student (calling it for a prediction is not prevented).
@exercise("nb07_overlap_optimizer", notebook=NOTEBOOK, points=3, answer="place_updates",
          title="Predict, then measure: AdamW inside the backward, within 120 % of the reference's overhead")
class OverlapOptimizer:
    def cases(rng):
        return [{"target": target, "n_layer": n_layer} for target, n_layer in OVERLAP_CASES]

    def run(place_updates, case):
        # the answer's inputs are made here, beside it (compiling the step): drawing the cases stays free
        from trnlab.training import overlap
        step = overlap_step(case["target"], case["n_layer"])
        calls = [(region, list(params)) for region, params in overlap.backward_calls(step)]
        plan = place_updates(calls, dict(default_phases_us(case["target"], case["n_layer"])))
        if type(plan) is not dict or set(plan) != {"placement", "predicted_us"}:
            raise CheckFailed(f"expected {{'placement': {{parameter: region}}, 'predicted_us': µs}}, got {plan!r:.80}")
        placement = plan["placement"]
        if type(placement) is not dict:
            raise CheckFailed(f"expected plan['placement'] = {{parameter: region}}, got {placement!r:.60}")
        return [{plain.text(k, "a parameter name"): plain.text(v, "a region") for k, v in placement.items()},
                plain.number(plan["predicted_us"], "the predicted step time in µs")]

    def judge(case, got):
        from trnlab.training import overlap
        target, n_layer = case["target"], case["n_layer"]
        job = f"the {n_layer}-block step on {target}"
        if type(got) is not list or len(got) != 2 or type(got[0]) is not dict or type(got[1]) is not float \
                or not math.isfinite(got[1]):
            raise CheckFailed(f"{job}: expected a placement and a predicted step time, got {got!r:.80}")
        placement, predicted = got
        try:
            measured = measure_placement(target, n_layer, placement)
        except overlap.PlacementError as error:
            raise CheckFailed(f"{job}: {error}") from None
        floor = forward_backward_us(target, n_layer)
        reference = measure_placement(target, n_layer, reference_placement(target, n_layer)).total_us
        step_us = measured.total_us
        overhead, reference_overhead = step_us - floor, reference - floor
        if overhead > OVERHEAD_TARGET * reference_overhead:
            raise CheckFailed(
                f"{job}: overlap target missed — expected the updates to add at most {OVERHEAD_TARGET:.0%} of the "
                f"reference's {reference_overhead:.1f} µs to the {floor:.1f} µs of the forward, the backward and the "
                f"runtime's start-up (a step of at "
                f"most {floor + OVERHEAD_TARGET * reference_overhead:.1f} µs); your step takes {step_us:.1f} µs, the "
                f"updates add {overhead:.1f} µs ({overhead / reference_overhead:.0%}). "
                f"{_placement_cause(target, n_layer, placement, measured.phase_ns['optimizer'] / 1e3).capitalize()}")
        if abs(predicted - step_us) > PREDICTION_TOLERANCE * step_us:
            why = (": an update inside the backward is not free — it shares the engines with the backward's calls"
                   if predicted < step_us else
                   ": inside the backward an update fills the engines' waits — it hides more than you expected")
            raise CheckFailed(
                f"{job}: the placement meets the target, but the prediction missed — expected within "
                f"{PREDICTION_TOLERANCE:.0%} of the measured {step_us:.1f} µs, you predicted {predicted:.1f} µs "
                f"({predicted / step_us - 1:+.0%}). The measured step: forward {measured.phase_ns['forward'] / 1e3:.1f} "
                f"µs, backward with the updates inside it {measured.phase_ns['backward'] / 1e3:.1f} µs, "
                f"updates after it {measured.phase_ns['optimizer'] / 1e3:.1f} µs, runtime start-up and tear-down "
                f"{measured.launch_ns / 1e3:.1f} µs{why}")
