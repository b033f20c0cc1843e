"""The numbers behind cost and energy: accelerators, systems, prices and power, each with its source.

The hardware figures of Trainium come from `trnlab.hardware.presets` (read, never changed here).
What the presets do not hold lives here: instance prices, chip power, and the datasheet figures of
the reference GPUs that AWS compares Trainium with. Every value is a `Sourced` number that says
where it comes from, when, and how much to trust it:

    official              published by the vendor (AWS price list, AWS/NVIDIA datasheets)
    third-party estimate  no official figure exists; analysts' or press estimates
    assumed               no public figure found; a placeholder chosen for the reason given

Prices change and power is mostly unpublished, so everything is plain, editable data. Each call of
`default_systems()` builds fresh objects, so edit them freely::

    systems = default_systems()
    systems["trn2.48xlarge"].price.value = 30.0            # your negotiated price, USD per hour
    systems["trn2.48xlarge"].accelerator.power.value = 450 # your own power estimate, W per chip

Reference GPUs are placed on the same roofline from their datasheets only: trnlab simulates
Trainium, not GPUs. A GPU here is a peak and a bandwidth, nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnlab.hardware import presets

OFFICIAL, THIRD_PARTY, ASSUMED = "official", "third-party estimate", "assumed"
STATUSES = (OFFICIAL, THIRD_PARTY, ASSUMED)
DTYPES = ("bf16", "fp8", "fp32")      # the precisions the calculator knows (fp8: the chip's 8-bit format)

# Where the prices come from. AWS's public price list, read through the instances.vantage.sh
# aggregator (which republishes AWS's Price List API) on the dates given; Linux on-demand, USD.
PRICE_LIST = "AWS EC2 on-demand price list (Linux), as republished by instances.vantage.sh"


@dataclass
class Sourced:
    """A number with its unit, its public source, its date and how far to trust it."""

    value: float
    unit: str
    source: str
    status: str = OFFICIAL
    date: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def label(self) -> str:
        """One line for a table: value, unit, status and source."""
        when = f", {self.date}" if self.date else ""
        return f"{self.value:,.4g} {self.unit} ({self.status}{when}: {self.source})"


@dataclass
class Accelerator:
    """One chip as the calculator sees it: peaks by precision, HBM, power. Units: FLOP/s, bytes, bytes/s."""

    name: str
    peak_flops: dict[str, float]     # "bf16" / "fp8" / "fp32" -> dense peak FLOP/s (missing: not supported)
    hbm_bytes: float
    hbm_bandwidth: float
    power: Sourced                   # watts per chip
    source: str                      # where the peaks and memory come from
    simulated: bool = False          # True: trnlab simulates it (a preset); False: datasheet roofline only
    preset: str | None = None        # "trn1" | "trn2" | "trn3" for Trainium

    def peak(self, dtype: str = "bf16") -> float:
        if dtype not in self.peak_flops:
            raise ValueError(f"{self.name} has no {dtype} peak; it lists {sorted(self.peak_flops)}")
        return self.peak_flops[dtype]

    def ridge(self, dtype: str = "bf16") -> float:
        """Roofline ridge point: the FLOPs per HBM byte needed to be compute-bound."""
        return self.peak(dtype) / self.hbm_bandwidth

    def flops_per_joule(self, dtype: str = "bf16", mfu: float = 1.0) -> float:
        """Delivered FLOPs per joule at `mfu`, with the chip drawing `power` the whole time."""
        return self.peak(dtype) * mfu / self.power.value


@dataclass
class System:
    """What you rent: `chips` accelerators for `price` USD per hour (an instance or an UltraServer)."""

    name: str
    accelerator: Accelerator
    chips: int
    price: Sourced                   # USD per hour for the whole system
    server: presets.ServerSpec | None = None   # the preset, for Trainium systems
    note: str = ""

    def peak(self, dtype: str = "bf16") -> float:
        return self.chips * self.accelerator.peak(dtype)

    @property
    def hbm_bytes(self) -> float:
        return self.chips * self.accelerator.hbm_bytes

    @property
    def hbm_bandwidth(self) -> float:
        return self.chips * self.accelerator.hbm_bandwidth

    @property
    def watts(self) -> float:
        """Accelerator power of the whole system (chips only: no host, network or cooling)."""
        return self.chips * self.accelerator.power.value

    @property
    def usd_per_chip_hour(self) -> float:
        return self.price.value / self.chips

    def usd_per_peak_pflop_hour(self, dtype: str = "bf16") -> float:
        """Dollars for one hour of one PFLOP/s of peak: the price of compute before utilisation."""
        return self.price.value / (self.peak(dtype) / 1e15)


# --------------------------------------------------------------------------------------------
# Trainium, from the presets
# --------------------------------------------------------------------------------------------
_PRESET_DTYPES = {"bfloat16": "bf16", "float8_e4m3": "fp8", "mxfp8": "fp8", "float32": "fp32"}


def trainium_peaks(chip: presets.ChipSpec) -> dict[str, float]:
    """The chip's published dense peaks by precision (FLOP/s) from the preset's `quoted_tflops`.

    Trn1 publishes no separate fp8 figure: its NeuronCore-v2 runs fp8 at the bf16 rate
    (`fp8_peak_factor` = 1, [ARCH-v2]), so fp8 = bf16 there."""
    peaks = {_PRESET_DTYPES[k]: v * 1e12 for k, v in chip.quoted_tflops.items() if k in _PRESET_DTYPES}
    peaks.setdefault("fp8", peaks["bf16"] * chip.core.fp8_peak_factor)
    return peaks


def _trainium(key: str, power: Sourced) -> Accelerator:
    chip = presets.CHIPS[key]
    return Accelerator(
        name=chip.name, peak_flops=trainium_peaks(chip), hbm_bytes=chip.hbm_bytes,
        hbm_bandwidth=chip.hbm_bandwidth, power=power, simulated=True, preset=key,
        source="trnlab.hardware.presets (AWS Neuron architecture pages, cited there)")


def default_accelerators() -> dict[str, Accelerator]:
    """Trn1, Trn2, Trn3 (from the presets) and two reference GPUs (from NVIDIA's datasheets), fresh copies."""
    return {
        "trn1": _trainium("trn1", Sourced(
            400.0, "W", "ASSUMED: AWS publishes no Trainium power figure and no estimate was found; "
            "400 W is the A100 SXM's TDP, the GPU Trn1 was positioned against (same era, air cooled)",
            ASSUMED)),
        "trn2": _trainium("trn2", Sourced(
            500.0, "W", "analysts' estimate circulated after the Trn2 launch; AWS publishes no wattage",
            THIRD_PARTY, "2024-12")),
        "trn3": _trainium("trn3", Sourced(
            1000.0, "W", "DatacenterDynamics / Fierce Network, reading AWS VP Prasad Kalyanaraman's remark that "
            "the next Trainium needs liquid cooling ('when a chip goes above 1,000 watts'); not an AWS figure",
            THIRD_PARTY, "2024-07")),
        # NVIDIA A100 Tensor Core GPU datasheet (SXM4 40 GB): 312 TFLOPS bf16 dense (624 with sparsity),
        # 19.5 TFLOPS fp32, 40 GB HBM2 at 1,555 GB/s, 400 W max TDP. No fp8 on A100.
        "a100": Accelerator(
            name="NVIDIA A100 SXM4 40GB", peak_flops={"bf16": 312e12, "fp32": 19.5e12},
            hbm_bytes=40e9, hbm_bandwidth=1555e9,
            power=Sourced(400.0, "W", "NVIDIA A100 datasheet, max TDP (SXM4)", OFFICIAL, "2021"),
            source="NVIDIA A100 Tensor Core GPU datasheet (dense figures)"),
        # NVIDIA H100 Tensor Core GPU datasheet (SXM5 80 GB): 989 TFLOPS bf16 and 1,979 fp8 dense
        # (the datasheet's 1,979 / 3,958 are with sparsity), 67 TFLOPS fp32, 80 GB HBM3 at 3.35 TB/s,
        # up to 700 W TDP.
        "h100": Accelerator(
            name="NVIDIA H100 SXM5 80GB", peak_flops={"bf16": 989e12, "fp8": 1979e12, "fp32": 67e12},
            hbm_bytes=80e9, hbm_bandwidth=3.35e12,
            power=Sourced(700.0, "W", "NVIDIA H100 datasheet, max TDP (SXM5)", OFFICIAL, "2023"),
            source="NVIDIA H100 Tensor Core GPU datasheet (dense figures; sparse figures are 2×)"),
    }


def default_systems(accelerators: dict[str, Accelerator] | None = None) -> dict[str, System]:
    """Instances and UltraServers with their prices (fresh, editable copies), by name."""
    acc = accelerators or default_accelerators()
    trn2_price = 35.76   # trn2.48xlarge, us-east-2, [PRICE_LIST] snapshot 2025-11-30
    per_trn2_chip = trn2_price / presets.TRN2_48XLARGE.chips
    systems = [
        System("trn1.32xlarge", acc["trn1"], 16, Sourced(
            21.50, "USD/h", f"{PRICE_LIST}, us-east-1 (the same as the launch price of 2022)", OFFICIAL,
            "2025-12-21"), presets.TRN1_32XLARGE),
        System("trn2.48xlarge", acc["trn2"], 16, Sourced(
            trn2_price, "USD/h", f"{PRICE_LIST}, us-east-2", OFFICIAL, "2025-11-30"), presets.TRN2_48XLARGE),
        System("Trn2 UltraServer", acc["trn2"], 64, Sourced(
            4 * trn2_price, "USD/h", "ASSUMED: no public on-demand price; 4 × trn2.48xlarge", ASSUMED),
            presets.TRN2_ULTRASERVER),
        System("Trn3 UltraServer (Gen1)", acc["trn3"], 64, Sourced(
            64 * per_trn2_chip, "USD/h", "ASSUMED: no public on-demand price; the trn2.48xlarge price per chip-hour",
            ASSUMED), presets.TRN3_ULTRASERVER_GEN1),
        System("Trn3 UltraServer (Gen2)", acc["trn3"], 144, Sourced(
            144 * per_trn2_chip, "USD/h", "ASSUMED: no public on-demand price; the trn2.48xlarge price per chip-hour",
            ASSUMED), presets.TRN3_ULTRASERVER_GEN2),
        System("p4d.24xlarge (2022)", acc["a100"], 8, Sourced(
            32.77, "USD/h", "AWS EC2 on-demand price, us-east-1, when Trn1 launched and made its cost claim",
            OFFICIAL, "2022-10"), note="8 × A100 40GB at its 2022 price"),
        System("p4d.24xlarge", acc["a100"], 8, Sourced(
            21.96, "USD/h", f"{PRICE_LIST}, us-east-1 (after AWS's June 2025 GPU price cut)", OFFICIAL,
            "2026-08-26"), note="8 × A100 40GB"),
        System("p5.48xlarge", acc["h100"], 8, Sourced(
            55.04, "USD/h", f"{PRICE_LIST}, us-east-1 (98.32 before AWS's June 2025 price cut)", OFFICIAL,
            "2026-08-26"), note="8 × H100 80GB"),
    ]
    return {s.name: s for s in systems}


# The Trainium system of each generation that the notebook compares first (one instance or UltraServer).
GENERATION_SYSTEMS = {"trn1": "trn1.32xlarge", "trn2": "trn2.48xlarge", "trn3": "Trn3 UltraServer (Gen1)"}


def sources_table(systems: dict[str, System] | None = None) -> list[dict]:
    """Every price and power figure in use, with status and source: rows for a table."""
    systems = systems or default_systems()
    rows, seen = [], set()
    for s in systems.values():
        rows.append({"figure": f"{s.name} price", "value": f"{s.price.value:,.2f} {s.price.unit}",
                     "status": s.price.status, "date": s.price.date, "source": s.price.source})
        a = s.accelerator
        if a.name not in seen:
            seen.add(a.name)
            rows.append({"figure": f"{a.name} power", "value": f"{a.power.value:,.0f} {a.power.unit} per chip",
                         "status": a.power.status, "date": a.power.date, "source": a.power.source})
    return rows
