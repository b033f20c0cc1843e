from trnlab.model import load_checkpoint
from trnlab.model.checkpoint import SIMULATED_CHECKPOINT
from trnlab.serve.latency import measure_step
from trnlab.serve.steps import CompiledBackend, default_cache_dir

served, _ = load_checkpoint(SIMULATED_CHECKPOINT)          # the notebook's model
decode_programs = CompiledBackend(served, "trn2", max_batch=16, cache_dir=default_cache_dir())
step_us = {b: measure_step(decode_programs, "decode", (b, 16))[0] / 1e3 for b in (1, 2, 4, 8, 16)}   # measured once


def decode_batch(tpot_budget_us: float) -> int:
    # only a bucket's full size is worth running: a smaller batch pays the same step for fewer tokens
    meeting = [b for b, us in step_us.items() if us <= tpot_budget_us]
    return max(meeting, key=lambda b: b / step_us[b], default=0)
