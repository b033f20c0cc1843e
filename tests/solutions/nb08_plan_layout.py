import math

from trnlab.distributed import collectives, scaling, topology

# chosen by reasoning, then measured: tp on one server's fast links (8 of its 16 chips for the 70B,
# 2 for the 7B), pp across what is left (a small bubble with one sequence per microbatch), dp with the
# rest — each one the most data-parallel layout whose training state still fits a chip
LAYOUTS = {"70B-class": (2, 8, 4), "7B-class": (4, 2, 2)}


def plan_layout(model_name: str, system: str, global_batch: int) -> dict:
    model, machine = scaling.MODELS[model_name], topology.get(system)
    dp, tp, pp = LAYOUTS[model_name]
    per_replica = global_batch // dp                           # = microbatches of one sequence each
    compute_s = global_batch * model.flops_per_sequence() / (dp * tp * pp * machine.peak_flops() * scaling.UTILIZATION)
    bubble_s = compute_s * (pp - 1) / per_replica if pp > 1 else 0.0
    activation_bytes = 2 * model.seq_len * model.n_embd        # one sequence's [T, C] activation in bf16
    all_reduce_s = collectives.cost("all_reduce", activation_bytes, machine.group(tp), "ring").time_ns / 1e9
    tp_s = 4 * math.ceil(model.n_layer / pp) * per_replica * all_reduce_s if tp > 1 else 0.0
    return {"layout": (dp, tp, pp), "predicted_step_s": compute_s + bubble_s + tp_s}
