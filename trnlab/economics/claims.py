"""The articles' claims about Trainium, examined as claims: what must hold for each to be true.

A claim compares a *subject* with a *baseline* on one metric. The calculator can only check it
against public figures — peaks, prices, power — so each check says two things:

- what the figures give when both sides run at the *same* MFU (the fair default: a claim that
  needs one side to be used better than the other says so);
- what must hold for the claim to be exactly true: the MFU ratio, the price, or the power it needs.

    for claim in CLAIMS:
        print(examine(claim).summary())
    examine(CLAIMS[0], baseline="p4d.24xlarge")     # the same claim against today's GPU price

Metrics (all as ratios subject / baseline):
    "cost to train"      dollars for the same FLOPs; "50 % lower" is 0.5 (lower is better)
    "energy efficiency"  useful FLOPs per joule; "40 % better" is 1.4
    "peak compute"       dense peak FLOP/s of the whole system
    "memory bandwidth"   HBM bytes/s of the whole system
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trnlab.economics.cost import TYPICAL_MFU
from trnlab.economics.figures import System, default_systems

METRICS = ("cost to train", "energy efficiency", "peak compute", "memory bandwidth")


@dataclass(frozen=True)
class Claim:
    id: str
    quote: str            # the claim, as the source words it
    source: str
    date: str
    metric: str
    claimed: float        # the claimed ratio subject / baseline (see the module docstring)
    subject: str          # a system name of default_systems()
    baseline: str
    dtype: str = "bf16"
    reading: str = ""     # how the claim's baseline is read here, where the source leaves it open
    tolerance: float = 0.02   # how far the figures may fall short and still match ("4.4×" from 4.36)

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")


CLAIMS = [
    Claim("trn1_cost", "up to 50 % lower cost to train than comparable GPU-based EC2 instances",
          "AWS Trn1 product page (aws.amazon.com/ec2/instance-types/trn1)", "2022-10",
          "cost to train", 0.5, "trn1.32xlarge", "p4d.24xlarge (2022)", "bf16",
          reading="AWS does not name the GPU instance; p4d.24xlarge (8 × A100) was its GPU training "
                  "instance at Trn1's launch, at its 2022 price"),
    Claim("trn3_preview_efficiency", "Trainium3: 40 % better energy efficiency",
          "AWS re:Invent 2024 preview of Trainium3", "2024-12",
          "energy efficiency", 1.4, "Trn3 UltraServer (Gen1)", "trn2.48xlarge", "fp8",
          reading="a chip-to-chip claim (Trainium3 against Trainium2): FLOPs per joule of one chip do "
                  "not depend on how many chips a system has"),
    Claim("trn3_launch_compute", "Trn3 UltraServers: up to 4.4× more compute performance than Trn2 UltraServers",
          "AWS launch of Trn3 UltraServers (re:Invent 2025)", "2025-12",
          "peak compute", 4.4, "Trn3 UltraServer (Gen2)", "Trn2 UltraServer", "fp8",
          reading="the 144-chip Gen2 UltraServer against the 64-chip Trn2 UltraServer, 8-bit peaks"),
    Claim("trn3_launch_efficiency", "Trn3 UltraServers: 4× greater energy efficiency than Trn2 UltraServers",
          "AWS launch of Trn3 UltraServers (re:Invent 2025)", "2025-12",
          "energy efficiency", 4.0, "Trn3 UltraServer (Gen2)", "Trn2 UltraServer", "fp8",
          reading="a system-to-system claim measured by AWS on its own workloads; here checked on peaks"),
    Claim("trn3_ultraserver_performance", "4× UltraServer performance (Trn3 UltraServer against Trn2 UltraServer)",
          "AWS re:Invent 2024 preview of Trainium3", "2024-12",
          "peak compute", 4.0, "Trn3 UltraServer (Gen2)", "Trn2 UltraServer", "fp8",
          reading="which Trn3 UltraServer the preview meant was not said; Gen2 (144 chips) is taken"),
    Claim("trn3_launch_bandwidth", "Trn3 UltraServers: almost 4× more memory bandwidth than Trn2 UltraServers",
          "AWS launch of Trn3 UltraServers (re:Invent 2025)", "2025-12",
          "memory bandwidth", 4.0, "Trn3 UltraServer (Gen2)", "Trn2 UltraServer", tolerance=0.1),
]
CLAIMS_BY_ID = {c.id: c for c in CLAIMS}


# ---------------------------------------------------------------------------------------------
# the ratios
# ---------------------------------------------------------------------------------------------
def cost_ratio(subject: System, baseline: System, mfu_subject: float = TYPICAL_MFU,
               mfu_baseline: float = TYPICAL_MFU, dtype: str = "bf16") -> float:
    """Cost to train the same FLOPs on `subject` over the cost on `baseline` (< 1: subject cheaper).

    cost = FLOPs / (peak · MFU) · price per hour, so the FLOPs cancel and only
    price / (peak · MFU) of each side remains."""
    return (subject.price.value / (subject.peak(dtype) * mfu_subject)) / \
           (baseline.price.value / (baseline.peak(dtype) * mfu_baseline))


def mfu_for_saving(subject: System, baseline: System, saving: float, mfu_baseline: float = TYPICAL_MFU,
                   dtype: str = "bf16") -> float:
    """The MFU `subject` needs for its cost to train to be `saving` (0.5 = 50 %) below `baseline`'s.

    Solve cost_ratio(subject, baseline, m, mfu_baseline) = 1 - saving for m. Above 1.0 means no
    utilisation can make the claim true at these prices."""
    if not 0 <= saving < 1:
        raise ValueError(f"saving must be in [0, 1), got {saving}")
    return cost_ratio(subject, baseline, 1.0, mfu_baseline, dtype) / (1.0 - saving)


def efficiency_ratio(subject: System, baseline: System, mfu_subject: float = TYPICAL_MFU,
                     mfu_baseline: float = TYPICAL_MFU, dtype: str = "bf16") -> float:
    """Useful FLOPs per joule of `subject` over `baseline`'s (> 1: subject more efficient)."""
    return subject.accelerator.flops_per_joule(dtype, mfu_subject) / \
        baseline.accelerator.flops_per_joule(dtype, mfu_baseline)


def peak_ratio(subject: System, baseline: System, dtype: str = "bf16") -> float:
    return subject.peak(dtype) / baseline.peak(dtype)


# ---------------------------------------------------------------------------------------------
# examining one claim
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClaimCheck:
    claim: Claim
    subject: str
    baseline: str
    at_equal_mfu: float          # the ratio the figures give, both sides at the same MFU
    supported_at_equal_mfu: bool
    required_mfu_ratio: float    # MFU subject / MFU baseline that makes the claim exactly true (nan: n/a)
    conditions: list[str] = field(default_factory=list)   # what must hold, with numbers

    def summary(self) -> str:
        c = self.claim
        verdict = "the figures support it" if self.supported_at_equal_mfu else "the figures alone do not support it"
        basis = "as published" if c.metric in ("peak compute", "memory bandwidth") else "at equal MFU"
        what = c.metric if c.metric == "memory bandwidth" else f"{c.metric} ({c.dtype})"
        lines = [f"“{c.quote}” — {c.source}, {c.date}",
                 f"  {self.subject} against {self.baseline}, {what}: "
                 f"{self.at_equal_mfu:.3g}× {basis}, claimed {c.claimed:g}× → {verdict}"]
        lines += [f"  - {text}" for text in self.conditions]
        return "\n".join(lines)


def examine(claim: Claim, systems: dict[str, System] | None = None, mfu_baseline: float = TYPICAL_MFU,
            subject: str | None = None, baseline: str | None = None) -> ClaimCheck:
    """Check `claim` against the figures of `systems` (default: `default_systems()`); `subject` and
    `baseline` replace the claim's own systems, e.g. to try today's GPU price."""
    systems = systems or default_systems()
    s, b = systems[subject or claim.subject], systems[baseline or claim.baseline]
    dtype = claim.dtype
    if claim.metric == "cost to train":
        return _cost_claim(claim, s, b, mfu_baseline, dtype)
    if claim.metric == "energy efficiency":
        return _efficiency_claim(claim, s, b, mfu_baseline, dtype)
    return _peak_claim(claim, s, b, dtype)


def _cost_claim(claim: Claim, s: System, b: System, mfu_b: float, dtype: str) -> ClaimCheck:
    saving = 1.0 - claim.claimed
    ratio = cost_ratio(s, b, mfu_b, mfu_b, dtype)
    need = mfu_for_saving(s, b, saving, mfu_b, dtype)
    price_b_needed = b.price.value * ratio / claim.claimed   # baseline price that makes it true at equal MFU
    conditions = [
        f"price per peak PFLOP-hour ({dtype}): {s.name} ${s.usd_per_peak_pflop_hour(dtype):.2f}, "
        f"{b.name} ${b.usd_per_peak_pflop_hour(dtype):.2f}",
        f"at equal MFU the cost to train is {_percent_change(ratio)} (claimed: {100 * saving:.0f} % lower)",
        f"for {100 * saving:.0f} % lower: {s.name} needs MFU ≥ {need / mfu_b:.2f}× the baseline's "
        f"({100 * need:.0f} % if the baseline runs at {100 * mfu_b:.0f} %)",
        f"or, at equal MFU, the baseline must cost ≥ ${price_b_needed:.2f}/h (it costs ${b.price.value:.2f}/h, "
        f"{b.price.date or 'undated'})",
    ]
    return ClaimCheck(claim, s.name, b.name, ratio, ratio <= claim.claimed * (1 + claim.tolerance),
                      need / mfu_b, conditions)


def _percent_change(ratio: float) -> str:
    return f"{100 * (1 - ratio):.0f} % lower" if ratio <= 1 else f"{100 * (ratio - 1):.0f} % higher"


def _efficiency_claim(claim: Claim, s: System, b: System, mfu_b: float, dtype: str) -> ClaimCheck:
    ratio = efficiency_ratio(s, b, mfu_b, mfu_b, dtype)
    need = claim.claimed / ratio
    watts_needed = s.accelerator.power.value * ratio / claim.claimed
    sa, ba = s.accelerator, b.accelerator
    conditions = [
        f"peak per watt ({dtype}): {sa.name} {sa.peak(dtype) / sa.power.value / 1e12:.2f} TFLOPS/W "
        f"at {sa.power.value:.0f} W ({sa.power.status}), {ba.name} {ba.peak(dtype) / ba.power.value / 1e12:.2f} "
        f"TFLOPS/W at {ba.power.value:.0f} W ({ba.power.status})",
        f"at equal MFU the energy efficiency is {ratio:.2f}× (claimed {claim.claimed:g}×)",
        f"for {claim.claimed:g}×: {sa.name} must reach {need:.2f}× the baseline's MFU on the same work",
        f"or, at equal MFU, draw ≤ {watts_needed:.0f} W per chip (the estimate in use is {sa.power.value:.0f} W)",
    ]
    if s.chips != b.chips:
        conditions.append(f"more chips ({s.chips} against {b.chips}) add compute, not FLOPs per joule: "
                          "a system's efficiency is its chips' efficiency")
    return ClaimCheck(claim, s.name, b.name, ratio, ratio >= claim.claimed * (1 - claim.tolerance), need, conditions)


def _peak_claim(claim: Claim, s: System, b: System, dtype: str) -> ClaimCheck:
    if claim.metric == "memory bandwidth":
        ratio = s.hbm_bandwidth / b.hbm_bandwidth
        per_chip = s.accelerator.hbm_bandwidth / b.accelerator.hbm_bandwidth
        what = "HBM bandwidth"
    else:
        ratio = peak_ratio(s, b, dtype)
        per_chip = s.accelerator.peak(dtype) / b.accelerator.peak(dtype)
        what = f"{dtype} peak"
    conditions = [f"{what}: {ratio:.2f}× = {per_chip:.2f}× per chip × {s.chips / b.chips:.2f}× the chips "
                  f"({s.chips} against {b.chips})"]
    if claim.metric == "peak compute" and dtype != "bf16":
        conditions.append(f"in bf16 the same systems give {peak_ratio(s, b, 'bf16'):.2f}× "
                          f"({s.accelerator.peak('bf16') / b.accelerator.peak('bf16'):.2f}× per chip)")
    conditions.append("a peak ratio is a speed-up only for work that scales to every chip at the same MFU")
    return ClaimCheck(claim, s.name, b.name, ratio, ratio >= claim.claimed * (1 - claim.tolerance),
                      float("nan"), conditions)


def examine_all(systems: dict[str, System] | None = None, mfu_baseline: float = TYPICAL_MFU) -> list[ClaimCheck]:
    return [examine(c, systems, mfu_baseline) for c in CLAIMS]


def with_claimed(claim: Claim, claimed: float) -> Claim:
    """The same claim with another claimed ratio (e.g. to ask what a 30 % saving would need)."""
    return replace(claim, claimed=claimed)
