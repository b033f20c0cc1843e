import torch

import trnlab.compiler as tc
from trnlab.compiler import zoo
from trnlab.hardware import presets

WIDTH, STRIPE = 1024, 128
spec = presets.core_spec("trn2")
peak, bandwidth = spec.peak_flops("float32"), spec.hbm_bandwidth
torch.manual_seed(0)
served = zoo.MLP(WIDTH, WIDTH, WIDTH, "gelu").eval()     # the notebook's served MLP
measured: dict[int, float] = {}


def call_us(batch: int) -> float:
    """Measure: compile for `batch` rows and replay one call on the simulated Trn2."""
    if batch not in measured:
        x = torch.zeros(batch, WIDTH)
        measured[batch] = tc.compile(served, (x,), target="trn2").run(x, timing_only=True).profile.total_us
    return measured[batch]


def floor_us(batch: int) -> float:
    """The roofline floor of one call: its FLOPs at the fp32 peak or its HBM bytes, whichever is slower."""
    flops = 2 * batch * 2 * WIDTH * WIDTH                               # two [batch, 1024] x [1024, 1024]
    hbm_bytes = 4 * (2 * WIDTH * WIDTH + 2 * WIDTH) + 4 * batch * 4 * WIDTH   # weights + x, hidden (out, in), y
    return max(flops / peak, hbm_bytes / bandwidth) * 1e6


fixed_us = call_us(1) - floor_us(1)        # what one row pays beyond its bytes: the fixed costs of a call


def predict_us(batch: int) -> float:
    return floor_us(batch) + fixed_us


def plan_batch(budget_us: float) -> dict:
    # predict: whole stripes of 128 rows only (a partial stripe costs a full one), the most that fit
    batch = max((b for b in range(STRIPE, 1025, STRIPE) if predict_us(b) <= budget_us), default=STRIPE)
    # then measure where the model could be wrong (it fits the budget by less than 20 %): step down a
    # stripe while the measured call breaks the budget
    while batch > STRIPE and 1.2 * predict_us(batch) > budget_us and call_us(batch) > budget_us:
        batch -= STRIPE
    return {"batch": batch, "predicted_us": predict_us(batch)}
