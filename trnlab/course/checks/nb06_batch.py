"""Check for notebook 06's "predict, then measure" exercise: how many rows one compiled call takes.

The compiler compiles for one shape (neuronx-cc's static shapes), so serving an MLP means choosing
the rows per call, `batch`. The answer, `plan_batch(budget_us)`, returns a batch and the time the
student predicts for one call of it. The judge compiles the zoo's MLP (1024 -> 1024 -> GELU -> 1024,
fp32, Trn2) at that batch, replays it on the simulated chip, and holds it to three targets stated up
front: the call within the latency budget, the rows per µs at least 1/1.2 of the reference's (the
best multiple of 128 rows within the budget, measured here too), and the prediction within 25 % of
the measured call. All measurements happen in the judging process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise

NOTEBOOK = "06_the_compiler"
TARGET, WIDTH, MAX_BATCH = "trn2", 1024, 1024   # the served MLP: WIDTH -> WIDTH -> GELU -> WIDTH, fp32
STRIPE = 128                 # the tiling pass's m: the Tensor engine takes a linear's rows 128 at a time
THROUGHPUT_TARGET = 1.2      # the reference's rows per µs may be at most 120 % of the answer's
PREDICTION_TOLERANCE = 0.25  # the prediction within 25 % of the measured call


@dataclass(frozen=True)
class Call:
    """One measured call of the served MLP: its simulated time and its roofline floors."""
    batch: int
    us: float
    compute_us: float        # its FLOPs at the fp32 peak
    memory_us: float         # its HBM bytes at the core's bandwidth
    hbm_bytes: float

    @property
    def floor_us(self) -> float:
        return max(self.compute_us, self.memory_us)

    @property
    def us_per_row(self) -> float:
        return self.us / self.batch


_CALLS: dict[int, Call] = {}


def served_mlp():
    """The MLP the exercise serves (the zoo's, weights from a fixed seed: a timing-only run ignores them)."""
    import torch

    from trnlab.compiler import zoo

    torch.manual_seed(0)
    return zoo.MLP(WIDTH, WIDTH, WIDTH, "gelu").eval()


def measure_call(batch: int) -> Call:
    """Compile the served MLP for `batch` rows and replay one call on the simulated Trn2 (once per process)."""
    if batch not in _CALLS:
        import torch

        import trnlab.compiler as tc
        from trnlab.hardware import presets

        x = torch.zeros(batch, WIDTH)
        profile = tc.compile(served_mlp(), (x,), target=TARGET).run(x, timing_only=True).profile
        spec = presets.core_spec(TARGET)
        flops, nbytes = sum(o.flops for o in profile.ops), sum(o.hbm_bytes for o in profile.ops)
        _CALLS[batch] = Call(batch, profile.total_us, flops / spec.peak_flops("float32") * 1e6,
                             nbytes / spec.hbm_bandwidth * 1e6, nbytes)
    return _CALLS[batch]


def best_call(budget_us: float) -> Call | None:
    """The reference: the multiple of 128 rows with the most rows per µs whose call meets the budget."""
    best = None
    for batch in range(STRIPE, MAX_BATCH + 1, STRIPE):
        call = measure_call(batch)
        if call.us > budget_us:
            break                                    # a call only grows with its rows
        if best is None or call.us_per_row < best.us_per_row:
            best = call
    return best


def _stripes(batch: int) -> str:
    n, last = math.ceil(batch / STRIPE), batch % STRIPE
    if not last:
        return ""
    if n == 1:
        rows, pay = ("1 row fills", "pays") if batch == 1 else (f"{batch} rows fill", "pay")
        return f"; {rows} only {batch}/{STRIPE} of a {STRIPE}-row stripe (the tiling pass's m) and {pay} for a full one"
    return (f"; {batch} rows run as {n} stripes of {STRIPE} (the tiling pass's m), the last only {last}/{STRIPE} "
            f"full and as slow as a full one")


def _anatomy(call: Call) -> str:
    bound = "memory" if call.memory_us >= call.compute_us else "compute"
    return (f"compute floor {call.compute_us:.1f} µs (its FLOPs at the fp32 peak), memory floor "
            f"{call.memory_us:.1f} µs ({call.hbm_bytes / 1e6:.1f} MB of HBM traffic), so {bound}-bound; fixed costs "
            f"{call.us - call.floor_us:.1f} µs on top")


def _per_call(call: Call) -> str:
    """What every call pays however few rows it carries: the weights' bytes and the fixed costs."""
    weight_bytes = 4 * 2 * (WIDTH * WIDTH + WIDTH)
    weight_us = weight_bytes / (call.hbm_bytes / call.memory_us)
    rows = f"{call.batch} row{'s' * (call.batch > 1)}"
    return (f"every call reads all {weight_bytes / 1e6:.1f} MB of weights ({weight_us:.1f} µs at HBM bandwidth) and "
            f"pays {call.us - call.floor_us:.1f} µs of fixed costs, here for {rows}")


# No asks_for: the package has no function that picks a batch; compiling and replaying the model
# (`tc.compile(...).run(x, timing_only=True)`) is the measurement the statement hands the student.
@exercise("nb06_rows_per_call", notebook=NOTEBOOK, points=3, answer="plan_batch",
          title="Predict, then measure: rows per call within 120 % of the best throughput")
class RowsPerCall:
    def cases(rng):
        # latency budgets in µs: one stripe, two stripes, a generous one, then one drawn
        return [60.0, 90.0, 150.0, float(round(rng.uniform(55.0, 150.0), 1))]

    def run(plan_batch, budget_us):
        plan = plan_batch(budget_us)
        if type(plan) is not dict or set(plan) != {"batch", "predicted_us"}:
            raise CheckFailed(f"budget {budget_us:g} µs: expected {{'batch': rows, 'predicted_us': µs}}, "
                              f"got {plan!r:.80}")
        return [plain.integer(plan["batch"], "the rows per call"),
                plain.number(plan["predicted_us"], "the predicted call time in µs")]

    def judge(budget_us, got):
        where = f"latency budget {budget_us:g} µs"
        if type(got) is not list or len(got) != 2 or type(got[0]) is not int or type(got[1]) is not float \
                or not math.isfinite(got[1]):
            raise CheckFailed(f"{where}: expected a batch and a predicted call time, got {got!r:.80}")
        batch, predicted = got
        if not 1 <= batch <= MAX_BATCH:
            raise CheckFailed(f"{where}: expected 1 to {MAX_BATCH} rows per call, got {batch}")
        call = measure_call(batch)
        if call.us > budget_us:
            raise CheckFailed(f"{where} broken — expected a call of at most {budget_us:g} µs; batch {batch} takes "
                              f"{call.us:.1f} µs, {call.us / budget_us - 1:.0%} over: {_anatomy(call)}"
                              f"{_stripes(batch)}")
        best = best_call(budget_us)
        if best is not None and call.us_per_row > THROUGHPUT_TARGET * best.us_per_row:
            raise CheckFailed(f"{where}: throughput target missed — expected at most {THROUGHPUT_TARGET:.0%} of the "
                              f"reference's {best.us_per_row:.3f} µs per row (batch {best.batch}, {best.us:.1f} µs); "
                              f"batch {batch} meets the budget ({call.us:.1f} µs) but takes {call.us_per_row:.3f} µs "
                              f"per row ({call.us_per_row / best.us_per_row:.0%}): {_per_call(call)}, leaving "
                              f"{budget_us - call.us:.1f} µs of the budget unused{_stripes(batch)}")
        if abs(predicted - call.us) > PREDICTION_TOLERANCE * call.us:
            short = ""
            if predicted < call.floor_us:
                short = (f" Your prediction is below the roofline floor: the call cannot beat its "
                         f"{'bytes at HBM bandwidth' if call.memory_us >= call.compute_us else 'FLOPs at the peak'}.")
            elif predicted < call.us:
                short = " Your prediction leaves out the fixed costs a call pays whatever its size."
            raise CheckFailed(f"{where}: batch {batch} meets the targets, but the prediction missed — expected "
                              f"within {PREDICTION_TOLERANCE:.0%} of the measured {call.us:.1f} µs, you predicted "
                              f"{predicted:.1f} µs ({predicted / call.us - 1:+.0%}). The measured call: "
                              f"{_anatomy(call)}.{short}")
