"""Many Trainium chips: which ranks there are and how they are wired.

A `Topology` is the set of ranks a collective runs over (the cores of one chip, or the chips of a
server / UltraServer) and the links between them, each link with a bandwidth per rank and a latency
per hop. The cost model in `collectives` reads nothing else, so a student can build a machine that
does not exist (``topology.derive(...)``) and see what changes.

One rank is one chip (all its cores acting together), except in `chip_cores` where a rank is one
NeuronCore. Servers and chip counts come from `trnlab.hardware.presets`; the link numbers that
presets does not hold live here, each with its public source:

- [HW-trn1] AWS Neuron docs, "AWS Trn1/Trn1n Architecture" (general/arch/neuron-hardware/trn1-arch):
  trn1.32xlarge, 16 chips on NeuronLink-v2 "which utilizes a 4D-HyperCube topology"; EFA 800 Gbps per
  instance. NeuronLink-v2 384 GB/s per chip: presets.TRN1.link_bandwidth ("Trainium Architecture").
- [HW-trn2] "Amazon EC2 Trn2 architecture" (general/arch/neuron-hardware/trn2-arch): trn2.48xlarge,
  16 chips in a 4×4 2-D torus, 1,024 GB/s per chip of NeuronLink-v3 inside the instance; the
  UltraServer joins 4 instances, "devices with the same coordinates in each instance are connected in
  a ring", 256 GB/s per chip between instances; EFA 3,200 Gbps per instance.
- [HW-trn3] "Amazon EC2 Trn3 Architecture" (about-neuron/arch/neuron-hardware/trn3-arch): Gen1
  UltraServer = 4 servers × 16 chips, Gen2 = 36 servers × 4 chips, both all-to-all through
  NeuronSwitch-v1; NeuronLink-v4 2,048 GiB/s per chip (⚠ "Trainium3 Architecture" says 2.56 TB/s per
  chip); EFA 12,800 / 28,800 Gbps.
- [HW-trn3-fabric] the same page, section "Trn3 UltraServer Connectivity and Networking" (Neuron SDK
  2.29, Apr 2026; github aws-neuron/aws-neuron-sdk commit 539a73c): "a PCIe switch-based interconnect
  architecture for all chip-to-chip communication". Its bandwidth summary, per chip:
  "Intra-server (within sled)" 256 GB/s, "4 × PCIe Gen6 x8 via intra-server switch" (a sled holds
  4 chips); "Inter-server (within rack)" 320 GB/s, "5 × PCIe Gen6 x8 via inter-server switch";
  "Inter-rack" 128 GB/s, "2 × PCIe Gen6 x8 direct links" ("chips in corresponding positions across
  racks are connected via dedicated direct PCIe links"). The text calls each figure "bidirectional";
  PCIe 6.0 runs 64 GT/s per lane (PCI-SIG), about 64 GB/s each way on an x8 link, so 4 × x8 is
  256 GB/s *each way*: we take the figures per direction (a ring step sends and receives at once).
  If they are the sum of both directions every level is half as fast (``derive`` the links).
  aws-neuron/aws-neuron-sdk issue #1396 (Sep 2026) asks AWS exactly this; it is open, unanswered.
  No Trn3 collective measurement is published (validation.py): every Trn3 figure here is unvalidated.
  These three levels replace, for Trn3, the single NeuronLink-v4 figure (704 GB/s together, not
  2.56 TB/s: the page gives no reconciliation).
- [CC-intra] "Intra-node Collective Communications with AWS Neuron"
  (neuron-runtime/explore/intranode-collective-comm): "the per-hop latency of Ring/KangaRing is about
  1-2 us (HBM load dependent)"; algorithms Ring, Mesh, KangaRing, RDH; the 2-D torus "can also be seen
  as a 4D hyper-cube".
- [CC-inter] "Inter-node Collective Communications with AWS Neuron"
  (neuron-runtime/explore/internode-collective-comm): over EFA "the per-hop or point-to-point latency
  is ~15us"; Ring, Mesh, RDH between nodes; hierarchical = intra-node stage + inter-node stage
  ("Global AllReduce = intra-node ReduceScatter + inter-node AllReduce + intra-node AllGather").
  AWS describes two tiers; for Trn3's three (sled, rack, racks) we apply the same split recursively
  (our extrapolation: no page describes the runtime's three-level schedule).
- [DMA] NKI "Introduction to DMA" (nki/about/nki-dma-overview): 16 DMA engines per core,
  27.2 GB/s each (v2/v3), 38.4 GB/s (v4) — the on-chip core-to-core path.

Numbers no page gives are marked ASSUMED with the reason.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from trnlab.hardware import presets

NS_PER_US = 1e3

# Per-hop latencies [CC-intra], [CC-inter]
NEURONLINK_HOP_NS = 1.5 * NS_PER_US   # "about 1-2 us" per hop inside a node: the middle
EFA_HOP_NS = 15.0 * NS_PER_US         # "~15us" per hop between nodes
# ASSUMED: no page gives the latency of the links between the instances of a Trn2 UltraServer, or of
# a hop through NeuronSwitch; they are NeuronLink too, so we use the in-node figure.
ULTRASERVER_HOP_NS = NEURONLINK_HOP_NS
SWITCH_HOP_NS = NEURONLINK_HOP_NS
# ASSUMED: [HW-trn3-fabric] gives no latency for a hop through Trn3's PCIe switches or its direct
# inter-rack links ("avoids additional switch hops"); we use the in-node NeuronLink figure for all three.
PCIE_HOP_NS = NEURONLINK_HOP_NS

GBPS = 1e9 / 8  # one gigabit per second, in bytes per second

# ---------------------------------------------------------------------------------------------
# Calibration against measured collectives (nccom-test): FITTED constants, not published ones
# ---------------------------------------------------------------------------------------------
# The documented figures above leave out what AWS's own measurements show (validation.py, docs/
# distributed.md): (1) a fixed cost per collective (trigger, CC-core synchronisation, completion);
# (2) a ring step slower than "1-2 us"; (3) a per-rank bandwidth far below the links' — a CC stream
# moves its data through a few DMA engines, not through all 16 of a core. The three numbers below are
# FITTED to nccom-test's published trn1 runs by `validation.fit_nccom()` (and checked there against
# the runs not used in the fit); they are assumptions for Trn2/Trn3, where no such runs are published.
NCCOM_LAUNCH_NS = 52.0 * NS_PER_US    # FITTED: 2-core all-reduce at 1 KiB (58 us) and 32-core all-gather at 1 KiB (151 us)
NCCOM_HOP_NS = 3.2 * NS_PER_US        # FITTED: the same two rows (ring steps 2 and 31)
CC_DMA_ENGINES = 2                    # FITTED: 2-core all-reduce of 1 GiB runs at 52.8 GiB/s busbw = 2.1 DMA engines


@dataclass(frozen=True)
class Calibration:
    """Corrections to the documented link figures: a fixed cost per collective, the latency of one
    step inside a server (None: keep the link's), and the DMA engines per core a collective can
    drive (None: no cap), which caps a rank's bandwidth at cores × engines × engine rate."""
    name: str
    launch_ns: float = 0.0
    hop_ns: float | None = None
    cc_dma_engines: int | None = None


DOCUMENTED = Calibration("documented link figures")
NCCOM_TRN1 = Calibration("fitted to nccom-test (trn1)", NCCOM_LAUNCH_NS, NCCOM_HOP_NS, CC_DMA_ENGINES)
# The guide re-ran the same 32-rank all-gather command with SDK 2.24 (Jun 2025): 6.16 us at 1 KiB where the
# 2023 run took 151 us. The runtime's fixed cost fell ~25x; the documented 1-2 us hop and a mesh step now
# explain the rest. FITTED by `validation.fit_recent()` to that one row (the fastest algorithm, documented
# hop, the trn1 fit's 2 DMA engines); every other post-2024 row is held out (validation.validate_rows()).
NCCOM_RECENT_LAUNCH_NS = 4.65 * NS_PER_US  # FITTED: 32-rank all-gather of 1 KiB, SDK 2.24 (6.16 us) - one mesh step
NCCOM_RECENT = Calibration("fitted to nccom-test (2025 runtime, SDK 2.24)", NCCOM_RECENT_LAUNCH_NS, None,
                           CC_DMA_ENGINES)



@dataclass(frozen=True)
class Link:
    """A class of link: bytes/s one rank can send at once over it, and the latency of one hop."""

    name: str
    bandwidth: float  # bytes/s per rank (all of a rank's wires of this kind together)
    hop_latency_ns: float
    source: str
    links: int = 1  # physical links the bandwidth is spread over (a point-to-point message uses one)

    def transfer_ns(self, nbytes: float, hops: int = 1) -> float:
        """One message of `nbytes` over `hops` hops (store-and-forward is not modelled: the data
        streams, so only the latency is paid per hop)."""
        return hops * self.hop_latency_ns + nbytes / self.bandwidth * 1e9


@dataclass(frozen=True)
class Topology:
    """Ranks in `servers` groups of `ranks_per_server`, in `racks` racks; `intra` joins ranks of one
    server (wired as `shape`), `inter` joins the servers of a rack (None for one server), `rack_link`
    joins racks (None for one rack). `servers` counts the servers of one rack (of the whole topology
    when racks == 1). A level's link figure is per rank: all of a rank's wires of that level together.

    kind of the in-server wiring:
      "ring"     a ring (or what a ring algorithm sees of it)
      "torus"    a 2-D torus of `shape` (rows, cols): a ring uses 2 disjoint Hamiltonian cycles
      "hypercube" log2(ranks) dimensions: recursive doubling/halving uses one dimension per step
      "switch"   all-to-all through a switch: any rank reaches any other in one hop
    """

    name: str
    kind: str
    ranks_per_server: int
    servers: int
    intra: Link
    inter: Link | None = None
    inter_kind: str = "ring"  # how servers are joined: "ring" (Trn2 UltraServer), "switch", "efa"
    shape: tuple[int, ...] = ()
    rank_name: str = "chip"   # what one rank is: "chip" or "core"
    chip: presets.ChipSpec = presets.TRN2
    efa: Link | None = None   # the network beyond this topology (EFA), for many of them
    notes: str = ""
    racks: int = 1
    rack_link: Link | None = None  # joins racks: chip i of a rack to chip i of the others [HW-trn3-fabric]

    def __post_init__(self) -> None:
        if self.ranks_per_server < 1 or self.servers < 1 or self.racks < 1:
            raise ValueError(f"a topology needs at least one rank, one server and one rack, got "
                             f"{self.ranks_per_server} ranks × {self.servers} servers × {self.racks} racks")
        if self.servers > 1 and self.inter is None:
            raise ValueError(f"{self.name}: {self.servers} servers need an inter-server link")
        if self.racks > 1 and self.rack_link is None:
            raise ValueError(f"{self.name}: {self.racks} racks need an inter-rack link")

    @property
    def ranks(self) -> int:
        return self.ranks_per_server * self.servers * self.racks

    @property
    def ranks_per_rack(self) -> int:
        return self.ranks_per_server * self.servers

    def levels(self) -> list[tuple[str, int, Link]]:
        """(level, group size, link) from the innermost out, the levels this topology spans (a level of
        size 1 is left out): what the hierarchical collectives run over, one stage per level."""
        out = [("in server", self.ranks_per_server, self.intra), ("between servers", self.servers, self.inter),
               ("between racks", self.racks, self.rack_link)]
        return [(name, size, link) for name, size, link in out if size > 1]

    @property
    def intra_links(self) -> int:
        return self.intra.links

    @property
    def chips(self) -> int:
        return self.ranks if self.rank_name == "chip" else max(1, self.ranks // self.chip.cores)

    def peak_flops(self, dtype: str = "bfloat16") -> float:
        """Tensor-engine peak of one rank (a chip or a core), from the presets."""
        return self.chip.peak_flops(dtype) if self.rank_name == "chip" else self.chip.core.peak_flops(dtype)

    @property
    def hbm_bytes_per_rank(self) -> int:
        return self.chip.hbm_bytes if self.rank_name == "chip" else self.chip.core.hbm_bytes

    def supports(self, algorithm: str) -> bool:
        """Mesh needs direct (routed or switched) paths; RDH needs a power-of-two group."""
        if algorithm == "mesh":
            return self.kind in ("switch", "torus", "hypercube")
        return True

    def group(self, size: int) -> "Topology":
        """The sub-topology a group of `size` ranks sees (the first ranks, filling servers, then racks)."""
        if not 1 <= size <= self.ranks:
            raise ValueError(f"group of {size} ranks does not fit {self.name}: it has {self.ranks} ranks")
        name = f"{self.name}[{size}]"
        if size <= self.ranks_per_server:
            return dataclasses.replace(self, name=name, ranks_per_server=size, servers=1, inter=None,
                                       racks=1, rack_link=None)
        if size % self.ranks_per_server:
            raise ValueError(f"a group of {size} ranks across servers must fill whole servers of "
                             f"{self.ranks_per_server} ranks on {self.name}")
        if size <= self.ranks_per_rack:
            return dataclasses.replace(self, name=name, servers=size // self.ranks_per_server, racks=1,
                                       rack_link=None)
        if size % self.ranks_per_rack:
            raise ValueError(f"a group of {size} ranks across racks must fill whole racks of "
                             f"{self.ranks_per_rack} ranks on {self.name}")
        return dataclasses.replace(self, name=name, racks=size // self.ranks_per_rack)

    def derive(self, name: str | None = None, **changes) -> "Topology":
        """A copy with some fields changed, e.g. ``derive(servers=8, inter=EFA_TRN2)``."""
        return dataclasses.replace(self, name=name or self.name + " (custom)", **changes)

    def summary(self) -> dict:
        return {
            "topology": self.name, "ranks": self.ranks, "rank": self.rank_name, "wiring": self.kind,
            "servers": self.servers, f"{self.intra.name} (GB/s per rank)": self.intra.bandwidth / 1e9,
            "hop (µs)": self.intra.hop_latency_ns / 1e3,
            "between servers (GB/s per rank)": (self.inter.bandwidth / 1e9) if self.inter else None,
            "racks": self.racks,
            "between racks (GB/s per rank)": (self.rack_link.bandwidth / 1e9) if self.rack_link else None,
        }


# ---------------------------------------------------------------------------------------------
# Links
# ---------------------------------------------------------------------------------------------
def on_chip_link(core: presets.CoreSpec) -> Link:
    """Core to core on one chip: through HBM by DMA, at most the core's 16 engines [DMA]."""
    return Link("on-chip DMA", core.dma_engines * core.dma_engine_bandwidth, NEURONLINK_HOP_NS,
                "[DMA] 16 engines × per-engine rate; hop latency [CC-intra]")


# A 4-D hypercube has one link per dimension: 4 per chip (deduced from [HW-trn1]'s topology).
NEURONLINK_V2 = Link("NeuronLink-v2", presets.TRN1.link_bandwidth, NEURONLINK_HOP_NS,
                     "384 GB/s per chip [HW-trn1] (presets.TRN1); 1-2 µs per hop [CC-intra]", links=4)
# "4 NeuronLink-v3 for device-to-device collective communication" (NKI "Trainium2 Architecture")
NEURONLINK_V3 = Link("NeuronLink-v3", presets.TRN2_48XLARGE.link_bandwidth, NEURONLINK_HOP_NS,
                     "1,024 GB/s per chip inside trn2.48xlarge [HW-trn2]; 1-2 µs per hop [CC-intra]", links=4)
NEURONLINK_V3_ULTRA = Link("NeuronLink-v3 (between instances)", presets.TRN2_ULTRASERVER.inter_server_bandwidth,
                           ULTRASERVER_HOP_NS, "256 GB/s per chip between instances [HW-trn2]; latency ASSUMED")
NEURONLINK_V4 = Link("NeuronLink-v4 via NeuronSwitch", presets.TRN3.link_bandwidth, SWITCH_HOP_NS,
                     "2.56 TB/s per chip (⚠ 2,048 GiB/s in [HW-trn3]); latency ASSUMED")
# Trn3's switched PCIe Gen6 fabric, one Link per level [HW-trn3-fabric]; bytes/s per chip, per direction
PCIE_GEN6_X8 = 64e9  # 64 GT/s × 8 lanes ÷ 8 bits, one direction (PCI-SIG PCIe 6.0); FLIT overhead ignored
TRN3_IN_SERVER = Link("Trn3 PCIe switch in server", 4 * PCIE_GEN6_X8, PCIE_HOP_NS,
                      "256 GB/s per chip, 4 × PCIe Gen6 x8 via intra-server switch [HW-trn3-fabric]; "
                      "latency ASSUMED", links=4)
TRN3_BETWEEN_SERVERS = Link("Trn3 PCIe switch between servers", 5 * PCIE_GEN6_X8, PCIE_HOP_NS,
                            "320 GB/s per chip, 5 × PCIe Gen6 x8 via inter-server switch [HW-trn3-fabric]; "
                            "latency ASSUMED", links=5)
TRN3_BETWEEN_RACKS = Link("Trn3 direct PCIe between racks", 2 * PCIE_GEN6_X8, PCIE_HOP_NS,
                          "128 GB/s per chip, 2 × PCIe Gen6 x8 direct links [HW-trn3-fabric]; latency ASSUMED",
                          links=2)
# EFA: the instance's network bandwidth shared by its 16 chips
EFA_TRN1 = Link("EFA (trn1)", 800 * GBPS / 16, EFA_HOP_NS, "800 Gbps per trn1.32xlarge [HW-trn1] ÷ 16 chips; ~15 µs [CC-inter]")
EFA_TRN2 = Link("EFA (trn2)", 3200 * GBPS / 16, EFA_HOP_NS, "3,200 Gbps per trn2.48xlarge [HW-trn2] ÷ 16 chips; ~15 µs [CC-inter]")
EFA_TRN3 = Link("EFA (trn3)", 28800 * GBPS / 144, EFA_HOP_NS, "28,800 Gbps per Gen2 UltraServer [HW-trn3] ÷ 144 chips; ~15 µs [CC-inter]")


# ---------------------------------------------------------------------------------------------
# The presets
# ---------------------------------------------------------------------------------------------
def chip_cores(chip: presets.ChipSpec = presets.TRN2) -> Topology:
    """The NeuronCores of one chip; a rank is a core, data moves core to core through HBM by DMA."""
    return Topology(f"{chip.name}: {chip.cores} cores", "ring", chip.cores, 1, on_chip_link(chip.core),
                    rank_name="core", chip=chip,
                    notes="ASSUMED: cores exchange data through HBM at their DMA rate")


TRN1_32XLARGE = Topology(
    "trn1.32xlarge", "hypercube", 16, 1, NEURONLINK_V2, shape=(2, 2, 2, 2), chip=presets.TRN1, efa=EFA_TRN1,
    notes="16 chips, NeuronLink-v2 as a 4-D hypercube [HW-trn1]")
TRN2_48XLARGE = Topology(
    "trn2.48xlarge", "torus", 16, 1, NEURONLINK_V3, shape=(4, 4), chip=presets.TRN2, efa=EFA_TRN2,
    notes="16 chips in a 4×4 2-D torus [HW-trn2]")
TRN2_ULTRASERVER = Topology(
    "Trn2 UltraServer", "torus", 16, 4, NEURONLINK_V3, inter=NEURONLINK_V3_ULTRA, inter_kind="ring",
    shape=(4, 4), chip=presets.TRN2, efa=EFA_TRN2,
    notes="4 × trn2.48xlarge; chips with the same coordinates form rings of 4 [HW-trn2]")
# Trn3: sleds of 4 chips [HW-trn3-fabric] on the intra-server switch, the sleds of a rack on the
# inter-server switch, racks joined chip-to-chip by direct links. ASSUMED: how many sleds a rack holds —
# AWS gives 144 = 36 servers × 4 chips (Gen2) and 64 = 4 servers × 16 chips (Gen1) but no rack count;
# the headline of SemiAnalysis's "AWS Trainium3 Deep Dive" (Dec 2025, third-party) names the scale-up
# racks "NL72x2/NL32x2", which we read as two racks of 72 (Gen2) and of 32 (Gen1) chips. Gen1's "server of 16 chips" is taken as 4 sleds of 4,
# the only sled the connectivity section describes.
TRN3_ULTRASERVER_GEN1 = Topology(
    "Trn3 UltraServer (Gen1)", "switch", 4, 8, TRN3_IN_SERVER, inter=TRN3_BETWEEN_SERVERS, inter_kind="switch",
    chip=presets.TRN3, efa=EFA_TRN3, racks=2, rack_link=TRN3_BETWEEN_RACKS,
    notes="64 chips, all-to-all over NeuronSwitch-v1 [HW-trn3]: sleds of 4 on a PCIe switch, 8 sleds a rack "
          "on another, 2 racks by direct links [HW-trn3-fabric]; sleds per rack ASSUMED")
TRN3_ULTRASERVER_GEN2 = Topology(
    "Trn3 UltraServer (Gen2)", "switch", 4, 18, TRN3_IN_SERVER, inter=TRN3_BETWEEN_SERVERS, inter_kind="switch",
    chip=presets.TRN3, efa=EFA_TRN3, racks=2, rack_link=TRN3_BETWEEN_RACKS,
    notes="36 servers × 4 chips [HW-trn3]: sleds of 4 on a PCIe switch, 18 sleds a rack on another, "
          "2 racks by direct links [HW-trn3-fabric]; sleds per rack ASSUMED")

TOPOLOGIES: dict[str, Topology] = {t.name: t for t in (
    chip_cores(presets.TRN1), chip_cores(presets.TRN2), chip_cores(presets.TRN3),
    TRN1_32XLARGE, TRN2_48XLARGE, TRN2_ULTRASERVER, TRN3_ULTRASERVER_GEN1, TRN3_ULTRASERVER_GEN2)}
SYSTEMS = ("trn1.32xlarge", "trn2.48xlarge", "Trn2 UltraServer", "Trn3 UltraServer (Gen1)", "Trn3 UltraServer (Gen2)")


def get(name: str) -> Topology:
    if name not in TOPOLOGIES:
        raise KeyError(f"unknown topology {name!r}; known: {', '.join(TOPOLOGIES)}")
    return TOPOLOGIES[name]


def cluster(base: Topology, instances: int) -> Topology:
    """`instances` copies of a server joined by EFA (e.g. 8 × trn2.48xlarge = 128 chips)."""
    if base.efa is None:
        raise ValueError(f"{base.name} has no EFA link to build a cluster from")
    if base.servers != 1 or base.racks != 1:
        raise ValueError(f"build clusters from one server, not from {base.name} ({base.servers} servers, "
                         f"{base.racks} racks)")
    return dataclasses.replace(base, name=f"{instances} × {base.name} (EFA)", servers=instances, inter=base.efa,
                               inter_kind="efa")


def is_power_of_two(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def log2_ceil(n: int) -> int:
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0


def devices(topology: Topology, mode: str = "timing", count: int | None = None) -> list:
    """The simulated chips of `topology` (or its first `count` ranks) as program-layer Devices: one
    `trnlab.hardware.device.Device` per chip, named "chip0", "chip1", …; for a `chip_cores` topology,
    one Device whose cores are the ranks. A program runs on them with ``device.run(program, ...)``."""
    from trnlab.hardware.device import Device
    if topology.rank_name == "core":
        return [Device(topology.chip, mode=mode, cores=count or topology.ranks, name="chip0")]
    n = topology.ranks if count is None else count
    if not 1 <= n <= topology.ranks:
        raise ValueError(f"{topology.name} has {topology.ranks} chips; asked for {n}")
    return [Device(topology.chip, mode=mode, name=f"chip{i}") for i in range(n)]


def cc_bandwidth_cap(t: Topology, calibration: Calibration) -> float:
    """Bytes/s one rank's collectives can move through the DMA engines their CC streams drive."""
    if calibration.cc_dma_engines is None:
        return math.inf
    cores = 1 if t.rank_name == "core" else t.chip.cores
    return cores * calibration.cc_dma_engines * t.chip.core.dma_engine_bandwidth_theoretical  # 27.2 GB/s [DMA]


def calibrated(t: Topology, calibration: Calibration = NCCOM_TRN1) -> Topology:
    """`t` with its links corrected by `calibration` (the fixed cost is passed to `collectives.cost`
    as ``launch_ns=calibration.launch_ns``; `collectives.cost(..., calibration=...)` does both)."""
    cap = cc_bandwidth_cap(t, calibration)

    def fix(link: Link | None, hop: bool) -> Link | None:
        if link is None:
            return None
        return dataclasses.replace(
            link, name=f"{link.name} (calibrated)", bandwidth=min(link.bandwidth, cap),
            hop_latency_ns=calibration.hop_ns if hop and calibration.hop_ns is not None else link.hop_latency_ns,
            source=f"{link.source}; {calibration.name}")
    # only NeuronLink/PCIe/on-chip steps take the fitted step latency; EFA keeps its documented ~15 us
    inter_is_neuronlink = t.inter is not None and t.inter_kind != "efa"
    return dataclasses.replace(t, name=f"{t.name} ({calibration.name})", intra=fix(t.intra, True),
                               inter=fix(t.inter, inter_is_neuronlink), efa=fix(t.efa, False),
                               rack_link=fix(t.rack_link, True))
