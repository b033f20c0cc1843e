import math

big, machine = scaling.MODELS["70B-class"], topology.get("Trn2 UltraServer")
dp, tp, pp = 2, 8, 4   # tp on a server's fast links, pp across servers (a small bubble), dp with what is left
per_replica = 256 // dp                                    # = microbatches of one sequence each
compute_s = 256 * big.flops_per_sequence() / (64 * machine.peak_flops() * scaling.UTILIZATION)
bubble_s = compute_s * (pp - 1) / per_replica
activation_bytes = 2 * big.seq_len * big.n_embd           # one sequence's [T, C] activation in bf16
all_reduce_s = collectives.cost("all_reduce", activation_bytes, machine.group(tp), "ring").time_ns / 1e9
tp_s = 4 * math.ceil(big.n_layer / pp) * per_replica * all_reduce_s


def plan_layout() -> dict:
    return {"layout": (dp, tp, pp), "predicted_step_s": compute_s + bubble_s + tp_s}
