"""Checks for notebook 10, generations, cost and energy (cases / run beside the student / judge elsewhere).

Every expected value comes from `trnlab.economics` itself, in the judging process: the calculator's
estimate for a system built from the exercise's numbers, the HBM traffic `forward_ops` counts for a
real model's linear layers, and the MFU `mfu_for_saving` solves for. While the student's function
runs, the economics modules it would reproduce are switched off. The fourth exercise is judged
against the simulator: library kernels run timing-only on one simulated Trn2 and Trn3 core.
"""

from __future__ import annotations

import math

from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise
from trnlab.economics import claims, cost
from trnlab.economics.figures import ASSUMED, Accelerator, Sourced, System
from trnlab.economics.fit import forward_ops, linear_sizes
from trnlab.hardware import presets
from trnlab.model.gpt import GPTConfig, layer_costs

NOTEBOOK = "10_generations_cost_and_energy"
# What the exercises ask for: the calculator, the claim checker and the traffic counter must not
# answer for the student (the functions named first, so that a hint names the one called).
CALCULATOR = ("trnlab.economics.cost.training_flops", "trnlab.economics.cost.estimate",
              "trnlab.economics.claims.cost_ratio", "trnlab.economics.claims.mfu_for_saving",
              "trnlab.economics.cost", "trnlab.economics.claims")
TRAFFIC = ("trnlab.economics.fit.forward_ops", "trnlab.economics.fit.decode_ops",
           "trnlab.economics.fit.OpTraffic.intensity", "trnlab.economics.fit")


def _system(peak_tflops_per_chip: float, chips: int, usd_per_hour: float, name: str = "system") -> System:
    acc = Accelerator(name=name, peak_flops={"bf16": peak_tflops_per_chip * 1e12}, hbm_bytes=1.0, hbm_bandwidth=1.0,
                      power=Sourced(1.0, "W", "exercise", ASSUMED), source="exercise")
    return System(name, acc, chips, Sourced(usd_per_hour, "USD/h", "exercise", ASSUMED))


def _usd(value: float) -> str:
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.4g}"


# -- 1. the cost to train a model from its FLOPs ---------------------------------------------------
@exercise("nb10_training_cost", notebook=NOTEBOOK, points=2, answer="training_cost",
          title="The cost to train a model from its FLOPs", asks_for=CALCULATOR)
class TrainingCost:
    def cases(rng):
        # [params, tokens, peak TFLOPS per chip, chips, MFU, USD per hour]
        fixed = [[124e6, 2.5e9, 667.0, 16, 0.40, 35.76], [6.7e9, 300e9, 190.0, 16, 0.35, 21.50],
                 [1.0e9, 20e9, 312.0, 8, 0.50, 32.77], [175e9, 300e9, 671.0, 144, 0.30, 321.84],
                 [2e5, 8.2e6, 667.0, 16, 0.05, 35.76], [7e10, 1.4e12, 989.0, 8, 0.45, 55.04]]
        drawn = [[float(f"{10 ** rng.uniform(5, 11.5):.3g}"), float(f"{10 ** rng.uniform(6, 13):.3g}"),
                  float(rng.choice([190.0, 312.0, 667.0, 671.0, 989.0, 1300.0])), int(rng.choice([1, 8, 16, 64, 144])),
                  round(float(rng.uniform(0.05, 0.6)), 3), round(float(rng.uniform(1, 400)), 2)] for _ in range(4)]
        return fixed + drawn

    def run(training_cost, case):
        return plain.number(training_cost(*case), "the cost in USD")

    def judge(case, got):
        params, tokens, peak, chips, mfu, price = case
        expected = cost.estimate(cost.training_flops(params, tokens), _system(peak, chips, price), mfu).usd
        if not math.isclose(got, expected, rel_tol=1e-6):
            raise CheckFailed(
                f"expected {_usd(expected)}, got {_usd(got)} for (params, tokens, peak_tflops_per_chip, chips, mfu, "
                f"usd_per_hour) = {tuple(case)} (FLOPs = 6·N·D; seconds = FLOPs / (chips · peak · 10^12 · MFU); "
                f"dollars = hours × price)")


# -- 2. the MFU at which a cost claim holds --------------------------------------------------------
@exercise("nb10_claim_mfu", notebook=NOTEBOOK, points=2, answer="mfu_needed",
          title="The MFU at which a cost claim holds", asks_for=CALCULATOR)
class MfuNeeded:
    def cases(rng):
        # [saving, price_a, peak_a, price_b, peak_b, mfu_b]
        fixed = [[0.5, 21.50, 3040.0, 32.77, 2496.0, 0.40], [0.5, 21.50, 3040.0, 21.96, 2496.0, 0.40],
                 [0.3, 35.76, 10672.0, 55.04, 7912.0, 0.45], [0.0, 10.0, 1000.0, 10.0, 1000.0, 0.3],
                 [0.25, 5.0, 100.0, 8.0, 120.0, 0.5], [0.6, 21.50, 3040.0, 55.04, 7912.0, 0.35]]
        drawn = [[round(float(rng.uniform(0.05, 0.8)), 2), round(float(rng.uniform(1, 120)), 2),
                  float(rng.integers(100, 20000)), round(float(rng.uniform(1, 120)), 2),
                  float(rng.integers(100, 20000)), round(float(rng.uniform(0.2, 0.6)), 2)] for _ in range(4)]
        return fixed + drawn

    def run(mfu_needed, case):
        return plain.number(mfu_needed(*case), "the MFU")

    def judge(case, got):
        saving, price_a, peak_a, price_b, peak_b, mfu_b = case
        a, b = _system(peak_a, 1, price_a, "a"), _system(peak_b, 1, price_b, "b")
        expected = claims.mfu_for_saving(a, b, saving, mfu_b)
        if not math.isclose(got, expected, rel_tol=1e-6):
            raise CheckFailed(
                f"expected an MFU of {expected:.4f}, got {got:.4f} for (saving, price_a, peak_a, price_b, peak_b, "
                f"mfu_b) = {tuple(case)} (cost ∝ price / (peak · MFU): solve cost_a = (1 - saving) · cost_b for MFU_a)")


# -- 3. arithmetic intensity of a linear layer ---------------------------------------------------
def _model_layers(n_embd: int, n_head: int, batch: int, seq: int, dtype_bytes: int) -> list[dict]:
    """One case per linear layer with parameters in the first block of a model: its shape as
    `forward_ops` sees it (rows, d_in, d_out, dtype_bytes), and the model it came from."""
    config = GPTConfig(n_embd=n_embd, n_head=n_head, block_size=max(seq, 32))
    cases = []
    for c in layer_costs(config, seq):
        if c.kind == "matmul" and c.params > 0 and c.name.startswith("blocks.0"):
            d_in, d_out, _ = linear_sizes(c, seq, config)
            cases.append({"model": [n_embd, n_head, batch, seq, dtype_bytes], "layer": c.name,
                          "shape": [batch * seq, d_in, d_out, dtype_bytes]})
    return cases


@exercise("nb10_linear_intensity", notebook=NOTEBOOK, points=2, answer="linear_intensity",
          title="Arithmetic intensity of a linear layer", asks_for=TRAFFIC)
class LinearIntensity:
    def cases(rng):
        # the layers of real models: our tiny GPT, a GPT-2-small-wide block, a longer context in fp32,
        # an odd shape in fp8; then one layer of each of a few random models
        cases = []
        for model in [(64, 4, 1, 32, 2), (768, 12, 8, 32, 2), (256, 4, 4, 128, 4), (96, 4, 3, 7, 1)]:
            cases += _model_layers(*model)
        for _ in range(4):
            n_head = int(rng.integers(1, 17))
            model = (n_head * int(rng.integers(1, 65)), n_head, int(rng.integers(1, 33)), int(rng.integers(1, 257)),
                     int(rng.choice([1, 2, 4])))
            layers = _model_layers(*model)
            cases.append(layers[int(rng.integers(0, len(layers)))])
        return cases

    def run(linear_intensity, case):
        return plain.number(linear_intensity(*case["shape"]), "the intensity in FLOP per byte")

    def judge(case, got):
        n_embd, n_head, batch, seq, dtype_bytes = case["model"]
        config = GPTConfig(n_embd=n_embd, n_head=n_head, block_size=max(seq, 32))
        expected = next(op.intensity for op in forward_ops(config, batch, seq, dtype_bytes) if op.name == case["layer"])
        if not math.isclose(got, expected, rel_tol=1e-9):
            raise CheckFailed(
                f"expected {expected:.4f} FLOP/byte, got {got:.4f} for (rows, d_in, d_out, dtype_bytes) = "
                f"{tuple(case['shape'])} (FLOPs = 2·rows·d_in·d_out; bytes = every element read or written once: "
                "the input x, the weight W, the bias b and the output y, each times dtype_bytes)")


# -- 4. how much faster on Trn3? predict, then measure ------------------------------------------------
# Library kernels of the course model's kinds, at shapes that are plainly compute-bound, memory-bound
# or latency-bound. The student predicts each kernel's speed-up from one Trn2 core to one Trn3 core
# from its FLOPs and HBM bytes (plain data in the case, counted by formula); the judge runs the kernel
# on both simulated cores (timing-only) and holds the prediction to SPEEDUP_TOLERANCE. The two cores
# have the same Tensor-engine peak; a Trn3 core's DMA engines move more bytes per second.
OLD, NEW = "trn2", "trn3"
SPEEDUP_TOLERANCE = 0.10   # a prediction within 10 % of the measured speed-up, either way


def _kernel_case(kernel: str, label: str, shapes: list[list[int]]) -> dict:
    """A kernel call as plain data, with the FLOPs it must do on the Tensor engine and its HBM bytes
    (every input read once, the output written once, bf16)."""
    if kernel == "linear":
        (m, k), (_, n), _ = shapes
        flops, out = 2 * m * k * n, m * n
    else:                                   # elementwise and norms: no Tensor-engine work
        flops, out = 0, math.prod(shapes[0])
    hbm_bytes = 2 * (sum(math.prod(s) for s in shapes) + out)
    return {"kernel": kernel, "label": label, "shapes": shapes, "flops": float(flops), "hbm_bytes": float(hbm_bytes)}


SPEEDUP_CASES = [
    _kernel_case("linear", "linear [2048, 2048] @ [2048, 2048] (a wide model's MLP)",
                 [[2048, 2048], [2048, 2048], [2048]]),
    _kernel_case("add", "residual add [4096, 2048]", [[4096, 2048], [4096, 2048]]),
    _kernel_case("gelu", "GELU [4096, 2048]", [[4096, 2048]]),
    _kernel_case("layer_norm", "layer_norm [32, 64] (the tiny GPT's ln_1)", [[32, 64], [64], [64]]),
    _kernel_case("add", "residual add [8, 64] (a decode step of the tiny GPT)", [[8, 64], [8, 64]]),
]

_LATENCY_US: dict[tuple, float] = {}


def kernel_latency_us(case: dict, target: str) -> float:
    """Simulated µs of the case's kernel on one core of `target`, timing-only (once per process)."""
    key = (case["kernel"], str(case["shapes"]), target)
    if key not in _LATENCY_US:
        import trnlab.nki as nki
        from trnlab.kernels import KERNELS

        args = [nki.ShapeDtype(tuple(shape), "bfloat16") for shape in case["shapes"]]
        _LATENCY_US[key] = nki.run(KERNELS[case["kernel"]][0], *args, target=target, timing_only=True).latency_us
    return _LATENCY_US[key]


def dma_bandwidth(core: presets.CoreSpec) -> float:
    """Bytes/s one core's transfers reach: its DMA engines' rate, at most its share of the chip's HBM."""
    return min(core.hbm_bandwidth, core.dma_engines * core.dma_engine_bandwidth)


def _why(case: dict, old_us: float) -> str:
    """Which limit sets the kernel's time on the old core, and what the new core changes about it."""
    old, new = presets.CORES[OLD], presets.CORES[NEW]
    compute_us = case["flops"] / old.peak_flops("bfloat16") * 1e6
    memory_us = case["hbm_bytes"] / dma_bandwidth(old) * 1e6
    peak_old, peak_new = old.peak_flops("bfloat16"), new.peak_flops("bfloat16")
    peaks = f"the peak {peak_old / 1e12:.1f} → {peak_new / 1e12:.1f} TFLOPS per core, {peak_new / peak_old:.2f}×"
    rate = (f"{dma_bandwidth(old) / 1e9:.0f} → {dma_bandwidth(new) / 1e9:.0f} GB/s, "
            f"{dma_bandwidth(new) / dma_bandwidth(old):.2f}×")
    if max(compute_us, memory_us) < 0.5 * old_us:
        launch = {core: core.launch_ns / 1e3 for core in (old, new)}
        return (f"it is latency-bound: the roofline accounts for {max(compute_us, memory_us):.2f} µs of its "
                f"{old_us:.2f} µs on {OLD}; the rest is fixed costs (the runtime's start-up and tear-down of the "
                f"launch, {launch[old]:.1f} µs on {OLD} and {launch[new]:.1f} µs on {NEW}; a DMA takes "
                f"{old.dma_latency_ns / 1e3:.1f} µs to start on {OLD} and {new.dma_latency_ns / 1e3:.1f} µs on {NEW}; "
                f"every instruction has its overhead), which neither {peaks}, nor the bytes per second ({rate}) "
                f"shorten")
    if compute_us >= memory_us:
        return (f"it is compute-bound ({case['flops'] / case['hbm_bytes']:.0f} FLOP/byte, right of both cores' "
                f"ridges): its time follows {peaks}, not the bytes per second ({rate})")
    engines = {core: core.dma_engines * core.dma_engine_bandwidth / 1e9 for core in (old, new)}
    return (f"it is memory-bound ({case['flops'] / case['hbm_bytes']:.1f} FLOP/byte): its time follows the bytes "
            f"per second one core's transfers reach — the lesser of its share of the chip's HBM bandwidth and "
            f"what its {old.dma_engines} DMA engines move: {OLD} {old.hbm_bandwidth / 1e9:.0f} and {engines[old]:.0f} "
            f"GB/s, {NEW} {new.hbm_bandwidth / 1e9:.0f} and {engines[new]:.0f} GB/s, so {rate}; not {peaks}, and "
            f"not the HBM share alone ({new.hbm_bandwidth / old.hbm_bandwidth:.2f}×)")


# No asks_for: the package has no function that predicts a speed-up; the simulator (`nki.run`) is the
# measurement the statement hands the student, and the presets are the figures to predict from.
@exercise("nb10_generation_speedup", notebook=NOTEBOOK, points=3, answer="predict_speedup",
          title="Predict, then measure: how much faster is a kernel on Trn3?")
class GenerationSpeedup:
    def cases(rng):
        # rows of at least 4 KiB (shorter ones are DMA-descriptor-bound: notebook 04), and a tiny norm
        rows, cols = [int(n) for n in rng.choice([[2048, 2048], [4096, 2048], [2048, 4096], [8192, 2048]])]
        tiny_rows, tiny_cols = int(rng.integers(8, 65)), int(rng.choice([32, 64]))
        drawn = [_kernel_case("add", f"residual add [{rows}, {cols}]", [[rows, cols], [rows, cols]]),
                 _kernel_case("layer_norm", f"layer_norm [{tiny_rows}, {tiny_cols}]",
                              [[tiny_rows, tiny_cols], [tiny_cols], [tiny_cols]])]
        return SPEEDUP_CASES + drawn

    def run(predict_speedup, case):
        return plain.number(predict_speedup(case["flops"], case["hbm_bytes"]), "the predicted speed-up")

    def judge(case, got):
        job = f"{case['label']}, {OLD} → {NEW}"
        if not math.isfinite(got) or got <= 0:
            raise CheckFailed(f"{job}: expected a positive speed-up (old time / new time), got {got!r}")
        old_us, new_us = kernel_latency_us(case, OLD), kernel_latency_us(case, NEW)
        measured = old_us / new_us
        if abs(got - measured) > SPEEDUP_TOLERANCE * measured:
            raise CheckFailed(f"{job}: prediction missed — expected within {SPEEDUP_TOLERANCE:.0%} of the "
                              f"measured speed-up {measured:.2f}× ({old_us:.2f} → {new_us:.2f} µs on one core), "
                              f"you predicted {got:.2f}× ({got / measured - 1:+.0%}); {_why(case, old_us)}")
