"""What the Trainium generations buy you: time, dollars and energy to train, and the claims examined.

Why its own package: everything here is economics on top of the hardware — prices, power, MFU
assumptions, public claims — not part of the simulator. It reads `trnlab.hardware.presets` (never
changes them) and the kernel library, and adds only numbers with their sources.

    figures    accelerators (Trainium from the presets, reference GPUs from their datasheets), systems
               with instance prices, chip power; each number `Sourced` (official / third-party / assumed)
    cost       6·N·D training FLOPs, time / USD / kWh at an assumed MFU, comparisons
    claims     "up to 50 % lower cost to train", "40 % better energy efficiency", "4.4× compute",
               "4× energy efficiency": what each needs to be true
    fit        "is my workload a fit?": op intensities against each ridge, memory against HBM, cost
    simulated  a GPT's training step and decode step on Trn1/Trn2/Trn3 from simulated timelines

GPUs appear only as datasheet rooflines (peak and bandwidth): trnlab does not simulate them.
"""

from trnlab.economics.claims import CLAIMS, CLAIMS_BY_ID, Claim, ClaimCheck, cost_ratio, efficiency_ratio, examine, \
    examine_all, mfu_for_saving, peak_ratio
from trnlab.economics.cost import TYPICAL_MFU, Estimate, compare, estimate, instances_for_deadline, training_flops, \
    usd_per_exaflop
from trnlab.economics.figures import ASSUMED, GENERATION_SYSTEMS, OFFICIAL, THIRD_PARTY, Accelerator, Sourced, System, \
    default_accelerators, default_systems, sources_table
from trnlab.economics.fit import MODELS, MemoryNeed, OpTraffic, decode_ops, fit_report, forward_ops, \
    inference_memory, num_params, training_memory

__all__ = [
    "ASSUMED", "CLAIMS", "CLAIMS_BY_ID", "GENERATION_SYSTEMS", "MODELS", "OFFICIAL", "THIRD_PARTY", "TYPICAL_MFU",
    "Accelerator", "Claim", "ClaimCheck", "Estimate", "MemoryNeed", "OpTraffic", "Sourced", "System", "compare",
    "cost_ratio", "decode_ops", "default_accelerators", "default_systems", "efficiency_ratio", "estimate",
    "examine", "examine_all", "fit_report", "forward_ops", "inference_memory", "instances_for_deadline",
    "mfu_for_saving", "num_params", "peak_ratio", "sources_table", "training_flops", "training_memory",
    "usd_per_exaflop",
]
