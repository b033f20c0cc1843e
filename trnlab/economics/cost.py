"""Time, dollars and energy to train a model, from its FLOPs, an assumed MFU and a system's figures.

    FLOPs to train   ≈ 6 · N · D      (N parameters, D training tokens: 2 for the forward multiply-add,
                                        4 for the backward; Kaplan et al. 2020, "Scaling Laws for
                                        Neural Language Models", C ≈ 6ND)
    time             = FLOPs / (instances · peak FLOP/s of one system · MFU)
    dollars          = time · instances · price per hour
    energy           = time · instances · chips · watts per chip · overhead

MFU (model FLOPs utilisation) is the share of the peak that the model's own FLOPs reach: the whole
answer hangs on it, so it is an explicit argument. Published large runs reach about 40 %: PaLM
reported 46.2 % on TPU v4 (Chowdhery et al. 2022), Llama 3 reported 38–43 % bf16 MFU on H100
(Meta, "The Llama 3 Herd of Models", 2024). That is `TYPICAL_MFU`, an assumption to edit.

Scaling across instances is taken as perfect (no communication cost; notebook 08 measures it), so the
dollars do not depend on how many instances run: more of them only shorten the time. Energy takes
each chip at its quoted power the whole time (an upper bound: a chip at low utilisation draws less);
`overhead` multiplies it for hosts, network and cooling (1.0 = the chips alone; ASSUMED default —
multiply in your own host share and your data centre's PUE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trnlab.economics.figures import System

TYPICAL_MFU = 0.40          # ASSUMED typical large-run MFU (PaLM 46.2 %, Llama 3 38–43 %; see above)
SECONDS_PER_HOUR = 3600.0


def training_flops(params: float, tokens: float) -> float:
    """6 · N · D: the FLOPs to train N parameters on D tokens (forward 2ND + backward 4ND)."""
    if params < 0 or tokens < 0:
        raise ValueError(f"params and tokens must be >= 0, got {params} and {tokens}")
    return 6.0 * params * tokens


def _check_mfu(mfu: float) -> None:
    if not 0 < mfu <= 1:
        raise ValueError(f"MFU must be in (0, 1]: it is a share of the peak; got {mfu}")


@dataclass(frozen=True)
class Estimate:
    """The time, cost and energy of `flops` on `instances` copies of `system` at `mfu`."""

    system: str
    flops: float
    mfu: float
    dtype: str
    instances: int
    chips: int              # in total
    seconds: float
    usd: float
    kwh: float

    @property
    def hours(self) -> float:
        return self.seconds / SECONDS_PER_HOUR

    @property
    def days(self) -> float:
        return self.hours / 24

    def row(self) -> dict:
        return {"system": self.system, "chips": self.chips, "MFU": self.mfu, "hours": self.hours,
                "USD": self.usd, "kWh": self.kwh}


def estimate(flops: float, system: System, mfu: float = TYPICAL_MFU, dtype: str = "bf16",
             instances: int = 1, overhead: float = 1.0) -> Estimate:
    """Train `flops` on `instances` × `system` at `mfu` of its `dtype` peak."""
    _check_mfu(mfu)
    if instances < 1 or flops < 0 or overhead <= 0:
        raise ValueError(f"need instances >= 1, flops >= 0, overhead > 0; got {instances}, {flops}, {overhead}")
    seconds = flops / (instances * system.peak(dtype) * mfu)
    hours = seconds / SECONDS_PER_HOUR
    return Estimate(system=system.name, flops=flops, mfu=mfu, dtype=dtype, instances=instances,
                    chips=instances * system.chips, seconds=seconds,
                    usd=hours * instances * system.price.value,
                    kwh=hours * instances * system.watts * overhead / 1000.0)


def instances_for_deadline(flops: float, system: System, days: float, mfu: float = TYPICAL_MFU,
                           dtype: str = "bf16") -> int:
    """The fewest instances of `system` that finish `flops` within `days` (perfect scaling)."""
    _check_mfu(mfu)
    one = flops / (system.peak(dtype) * mfu)
    return max(1, math.ceil(one / (days * 24 * SECONDS_PER_HOUR) - 1e-12))


def usd_per_exaflop(system: System, mfu: float = TYPICAL_MFU, dtype: str = "bf16") -> float:
    """Dollars per 10^18 useful FLOPs: the one number that ranks systems for a compute-bound job."""
    return estimate(1e18, system, mfu, dtype).usd


def compare(flops: float, systems: dict[str, System] | list[System], mfu: float | dict[str, float] = TYPICAL_MFU,
            dtype: str = "bf16", overhead: float = 1.0) -> list[Estimate]:
    """One estimate per system (one instance each), cheapest first; `mfu` may differ per system name."""
    systems = list(systems.values()) if isinstance(systems, dict) else list(systems)
    out = []
    for s in systems:
        if dtype not in s.accelerator.peak_flops:
            continue  # e.g. no fp8 on A100
        m = mfu.get(s.name, TYPICAL_MFU) if isinstance(mfu, dict) else mfu
        out.append(estimate(flops, s, m, dtype, overhead=overhead))
    return sorted(out, key=lambda e: e.usd)
