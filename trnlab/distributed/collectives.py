"""Collectives — all-reduce, all-gather, reduce-scatter, send/recv — twice over: the numbers and the time.

**Numbers.** Each algorithm is executed step by step on one NumPy array per rank, exactly as the
ranks would: in every step each rank sends one piece to one peer and reduces what it receives. The
result is a list of per-rank arrays, and a `Schedule` of who sent what to whom in which step (what
the ring animation of notebook 08 draws, and what the byte counts below are checked against).

- ring: reduce-scatter in p-1 steps (rank r first sends its chunk r-1 downstream), all-gather in
  p-1 steps; all-reduce = reduce-scatter + all-gather [CC-intra]. Each rank sends 2(p-1)/p of the data.
- tree: a binomial tree reduces to rank 0 in ⌈log2 p⌉ steps, then broadcasts back; whole buffers move.
- rdh: recursive halving reduce-scatter, recursive doubling all-gather, log2 p steps each (p = 2^k) [CC-inter].
- mesh: every rank sends each peer its piece directly, in one step (routed or switched) [CC-intra].

**Time.** `cost(op, nbytes, topology, algorithm)` returns how long a collective takes over the links
of a `Topology`: steps × per-hop latency + bytes on the busiest link / bandwidth, with the
hierarchical algorithm (intra-server, then inter-server, then intra-server) when the group spans
servers [CC-inter], one stage per level when it also spans racks (Trn3: `level_costs`). Functions take sizes and a topology and return durations: a `cluster.Cluster`
uses them to time the collective *instructions* programs issue on each core's CC engines
(`trnlab.hardware.collective`); `issue` draws one on a hand-built `Timeline` track (the large-model
pictures of `scaling.dp_step_timeline`).

`nbytes` is the size of the whole tensor (nccl-tests' and nccom-test's "size"): the buffer of an
all-reduce, the output of an all-gather, the input of a reduce-scatter, the message of a send.
Sources are those of `topology` ([CC-intra], [CC-inter]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from trnlab.distributed.topology import Topology, is_power_of_two, log2_ceil
from trnlab.hardware.records import Record
from trnlab.hardware.timeline import Timeline

OPS = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
ALGORITHMS = ("ring", "tree", "rdh", "mesh")


# =============================================================================================
# Numbers: the algorithms run on one NumPy array per rank
# =============================================================================================
@dataclass
class Schedule:
    """What moved: ``steps[s]`` is a list of (src, dst, what, nbytes) for step s, and ``phases[s]``
    says whether the receiver adds what it got ("reduce") or keeps a copy ("copy"). For the ring,
    ``what`` is the index of the piece; for the others a short description."""
    algorithm: str
    ranks: int
    steps: list[list[tuple[int, int, object, int]]] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)

    def add(self, step: list, phase: str) -> None:
        self.steps.append(step)
        self.phases.append(phase)

    def bytes_sent(self) -> list[int]:
        """Bytes each rank sent over the whole collective."""
        sent = [0] * self.ranks
        for step in self.steps:
            for src, _, _, nbytes in step:
                sent[src] += nbytes
        return sent

    def __len__(self) -> int:
        return len(self.steps)


def _check_inputs(inputs: list[np.ndarray]) -> None:
    if not inputs:
        raise ValueError("a collective needs at least one rank's input")
    shape = inputs[0].shape
    for r, x in enumerate(inputs):
        if x.shape != shape:
            raise ValueError(f"every rank must hold the same shape: rank 0 has {shape}, rank {r} has {x.shape}")


def _chunks(x: np.ndarray, p: int) -> list[np.ndarray]:
    """p contiguous pieces of the flattened array (the first ones one element longer if needed)."""
    return [c.copy() for c in np.array_split(x.reshape(-1), p)]


def ring_reduce_scatter(inputs: list[np.ndarray], schedule: Schedule | None = None) -> list[np.ndarray]:
    """Rank r ends with piece r of the sum (flattened, split into p pieces)."""
    _check_inputs(inputs)
    p = len(inputs)
    acc = [_chunks(x, p) for x in inputs]  # acc[rank][piece]
    for s in range(p - 1):
        # everyone sends at once: read all outgoing pieces before anyone reduces
        sends = [(r, (r + 1) % p, (r - s - 1) % p) for r in range(p)]
        data = [acc[src][c].copy() for src, _, c in sends]
        for (src, dst, c), piece in zip(sends, data):
            acc[dst][c] = acc[dst][c] + piece
        if schedule is not None:
            schedule.add([(src, dst, c, data[i].nbytes) for i, (src, dst, c) in enumerate(sends)], "reduce")
    return [acc[r][r] for r in range(p)]


def ring_all_gather(pieces: list[np.ndarray], schedule: Schedule | None = None) -> list[np.ndarray]:
    """Rank r starts with piece r; every rank ends with all p pieces concatenated."""
    p = len(pieces)
    have = [{r: pieces[r].copy()} for r in range(p)]
    for s in range(p - 1):
        sends = [(r, (r + 1) % p, (r - s) % p) for r in range(p)]
        for src, dst, c in sends:
            have[dst][c] = have[src][c].copy()
        if schedule is not None:
            schedule.add([(src, dst, c, pieces[c].nbytes) for src, dst, c in sends], "copy")
    return [np.concatenate([have[r][c] for c in range(p)]) for r in range(p)]


def ring_all_reduce(inputs: list[np.ndarray], schedule: Schedule | None = None) -> list[np.ndarray]:
    """Reduce-scatter, then all-gather: every rank ends with the full sum, in the input's shape."""
    shape = inputs[0].shape
    return [x.reshape(shape) for x in ring_all_gather(ring_reduce_scatter(inputs, schedule), schedule)]


def tree_all_reduce(inputs: list[np.ndarray], schedule: Schedule | None = None) -> list[np.ndarray]:
    """Binomial tree: at distance 1, 2, 4, … rank r (r % 2d == 0) adds rank r+d's buffer; rank 0 then
    sends the sum back down the same tree."""
    _check_inputs(inputs)
    p = len(inputs)
    acc = [x.copy() for x in inputs]
    d = 1
    while d < p:
        step = []
        for r in range(0, p, 2 * d):
            if r + d < p:
                acc[r] = acc[r] + acc[r + d]
                step.append((r + d, r, "partial sum", acc[r + d].nbytes))
        if schedule is not None:
            schedule.add(step, "reduce")
        d *= 2
    while d > 1:
        d //= 2
        step = []
        for r in range(0, p, 2 * d):
            if r + d < p:
                acc[r + d] = acc[r].copy()
                step.append((r, r + d, "sum", acc[r].nbytes))
        if schedule is not None:
            schedule.add(step, "copy")
    return acc


def rdh_reduce_scatter(inputs: list[np.ndarray], schedule: Schedule | None = None) -> list[np.ndarray]:
    """Recursive halving: at distance p/2, p/4, …, 1 partners r and r^d swap halves of what they still
    hold; the one with bit d clear keeps the lower half. Rank r ends with piece r."""
    _check_inputs(inputs)
    p = len(inputs)
    if not is_power_of_two(p):
        raise ValueError(f"recursive doubling-halving needs a power-of-two group, got {p} ranks")
    acc = [_chunks(x, p) for x in inputs]
    lo, hi = [0] * p, [p] * p  # the pieces [lo, hi) a rank still reduces
    d = p // 2
    while d >= 1:
        new = [list(a) for a in acc]
        step = []
        for r in range(p):
            partner = r ^ d
            mid = (lo[r] + hi[r]) // 2
            keep = range(lo[r], mid) if not r & d else range(mid, hi[r])
            for c in keep:
                new[r][c] = acc[r][c] + acc[partner][c]
            sent = range(mid, hi[r]) if not r & d else range(lo[r], mid)
            step.append((r, partner, f"pieces {sent.start}-{sent.stop - 1}", sum(acc[r][c].nbytes for c in sent)))
        for r in range(p):
            mid = (lo[r] + hi[r]) // 2
            lo[r], hi[r] = (lo[r], mid) if not r & d else (mid, hi[r])
        acc = new
        if schedule is not None:
            schedule.add(step, "reduce")
        d //= 2
    return [acc[r][r] for r in range(p)]


def rdh_all_gather(pieces: list[np.ndarray], schedule: Schedule | None = None) -> list[np.ndarray]:
    """Recursive doubling: at distance 1, 2, 4, … partners swap everything they hold so far."""
    p = len(pieces)
    if not is_power_of_two(p):
        raise ValueError(f"recursive doubling-halving needs a power-of-two group, got {p} ranks")
    have = [{r: pieces[r].copy()} for r in range(p)]
    d = 1
    while d < p:
        snapshot = [dict(h) for h in have]
        step = []
        for r in range(p):
            have[r ^ d].update(snapshot[r])
            step.append((r, r ^ d, f"{len(snapshot[r])} piece(s)", sum(v.nbytes for v in snapshot[r].values())))
        if schedule is not None:
            schedule.add(step, "copy")
        d *= 2
    return [np.concatenate([have[r][c] for c in range(p)]) for r in range(p)]


def rdh_all_reduce(inputs: list[np.ndarray], schedule: Schedule | None = None) -> list[np.ndarray]:
    shape = inputs[0].shape
    return [x.reshape(shape) for x in rdh_all_gather(rdh_reduce_scatter(inputs, schedule), schedule)]


def mesh_reduce_scatter(inputs: list[np.ndarray], schedule: Schedule | None = None) -> list[np.ndarray]:
    """One step: every rank sends piece c straight to rank c, which adds the p contributions."""
    _check_inputs(inputs)
    p = len(inputs)
    pieces = [_chunks(x, p) for x in inputs]
    if schedule is not None and p > 1:
        schedule.add([(r, c, f"piece {c}", pieces[r][c].nbytes) for r in range(p) for c in range(p) if c != r], "reduce")
    out = []
    for c in range(p):
        total = pieces[c][c].copy()  # its own piece first, then the others in rank order
        for r in range(p):
            if r != c:
                total = total + pieces[r][c]
        out.append(total)
    return out


def mesh_all_gather(pieces: list[np.ndarray], schedule: Schedule | None = None) -> list[np.ndarray]:
    p = len(pieces)
    if schedule is not None and p > 1:
        schedule.add([(r, d, f"piece {r}", pieces[r].nbytes) for r in range(p) for d in range(p) if d != r], "copy")
    full = np.concatenate(pieces)
    return [full.copy() for _ in range(p)]


def mesh_all_reduce(inputs: list[np.ndarray], schedule: Schedule | None = None) -> list[np.ndarray]:
    shape = inputs[0].shape
    return [x.reshape(shape) for x in mesh_all_gather(mesh_reduce_scatter(inputs, schedule), schedule)]


_ALL_REDUCE = {"ring": ring_all_reduce, "tree": tree_all_reduce, "rdh": rdh_all_reduce, "mesh": mesh_all_reduce}
_REDUCE_SCATTER = {"ring": ring_reduce_scatter, "rdh": rdh_reduce_scatter, "mesh": mesh_reduce_scatter}
_ALL_GATHER = {"ring": ring_all_gather, "rdh": rdh_all_gather, "mesh": mesh_all_gather}


def _algorithm(table: dict, algorithm: str, op: str):
    if algorithm not in table:
        raise ValueError(f"{op} has no {algorithm!r} algorithm here; choose one of {sorted(table)}")
    return table[algorithm]


def all_reduce(inputs: list[np.ndarray], algorithm: str = "ring", schedule: Schedule | None = None) -> list[np.ndarray]:
    """Every rank ends with the elementwise sum of all ranks' arrays."""
    return _algorithm(_ALL_REDUCE, algorithm, "all_reduce")(inputs, schedule)


def reduce_scatter(inputs: list[np.ndarray], algorithm: str = "ring", schedule: Schedule | None = None) -> list[np.ndarray]:
    """Rank r ends with piece r (of p, flattened) of the sum."""
    return _algorithm(_REDUCE_SCATTER, algorithm, "reduce_scatter")(inputs, schedule)


def all_gather(pieces: list[np.ndarray], algorithm: str = "ring", schedule: Schedule | None = None) -> list[np.ndarray]:
    """Every rank ends with the concatenation of all ranks' (flattened) pieces."""
    return _algorithm(_ALL_GATHER, algorithm, "all_gather")([np.asarray(x).reshape(-1) for x in pieces], schedule)


def send_recv(buffers: list[np.ndarray], src: int, dst: int, schedule: Schedule | None = None) -> list[np.ndarray]:
    """Rank `dst` receives a copy of rank `src`'s buffer; the others keep theirs."""
    out = [b.copy() for b in buffers]
    out[dst] = buffers[src].copy()
    if schedule is not None:
        schedule.add([(src, dst, "buffer", buffers[src].nbytes)], "copy")
    return out


# =============================================================================================
# Time: the cost model over a topology's links
# =============================================================================================
@dataclass(frozen=True)
class CollectiveCost:
    """The modelled duration of one collective, and the bandwidth figures nccom-test reports."""
    op: str
    algorithm: str
    ranks: int
    nbytes: int
    latency_ns: float    # steps × per-hop latency (+ a fixed launch cost if given)
    transfer_ns: float   # bytes on the busiest link over its bandwidth
    steps: int
    bytes_per_rank: float  # bytes one rank sends in the whole collective

    @property
    def time_ns(self) -> float:
        return self.latency_ns + self.transfer_ns

    @property
    def algbw(self) -> float:
        """Bytes/s as size / time (nccl-tests' and nccom-test's algbw)."""
        return self.nbytes / (self.time_ns * 1e-9) if self.time_ns else math.inf

    @property
    def busbw(self) -> float:
        """algbw × the textbook factor — 2(p-1)/p for all-reduce, (p-1)/p for gather/scatter —
        a figure comparable across group sizes (nccl-tests' definition)."""
        return self.algbw * bus_factor(self.op, self.ranks)


def bus_factor(op: str, p: int) -> float:
    if op == "all_reduce":
        return 2 * (p - 1) / p
    if op in ("all_gather", "reduce_scatter"):
        return (p - 1) / p
    return 1.0


def mean_hops(topology: Topology) -> float:
    """Average hops between two distinct ranks of one server (routing on a torus or hypercube)."""
    p = topology.ranks_per_server
    if p <= 1 or topology.kind in ("switch", "ring"):
        return 1.0
    if topology.kind == "hypercube":
        k = int(round(math.log2(p)))
        return (k * 2 ** (k - 1)) / (p - 1)  # mean Hamming distance from one rank to the others
    rows, cols = topology.shape or (p, 1)
    def ring_distance(n: int) -> int:  # sum of the distances from one rank to the others of a ring of n
        return sum(min(i, n - i) for i in range(n))
    return (ring_distance(rows) * cols + ring_distance(cols) * rows) / (p - 1)


def _flat_cost(op: str, nbytes: float, p: int, bandwidth: float, hop_ns: float, algorithm: str,
               topology: Topology, switched: bool = False) -> tuple[float, float, int, float]:
    """(latency, transfer, steps, bytes per rank) of one collective over p ranks of one level;
    `switched`: a level above the server joined by a switch (mesh in one hop)."""
    if p == 1:
        return 0.0, 0.0, 0, 0.0
    if op == "all_reduce" and algorithm != "tree":
        rs = _flat_cost("reduce_scatter", nbytes, p, bandwidth, hop_ns, algorithm, topology, switched)
        ag = _flat_cost("all_gather", nbytes, p, bandwidth, hop_ns, algorithm, topology, switched)
        return rs[0] + ag[0], rs[1] + ag[1], rs[2] + ag[2], rs[3] + ag[3]
    share = (p - 1) / p * nbytes  # what one rank sends in a reduce-scatter or an all-gather
    if algorithm == "ring":
        return (p - 1) * hop_ns, share / bandwidth * 1e9, p - 1, share
    if algorithm == "rdh":
        if not is_power_of_two(p):
            raise ValueError(f"recursive doubling-halving needs a power-of-two group, got {p} ranks")
        steps = int(math.log2(p))
        return steps * hop_ns, share / bandwidth * 1e9, steps, share
    if algorithm == "mesh" and switched:
        return hop_ns, share / bandwidth * 1e9, 1, share
    if algorithm == "mesh":
        if not topology.supports("mesh"):
            raise ValueError(f"mesh needs routed or switched paths; {topology.name} is a {topology.kind}")
        # one step; routed traffic crosses `mean_hops` links on average, so it competes for them
        return hop_ns, share / bandwidth * 1e9 * mean_hops(topology), 1, share
    if algorithm == "tree":
        if op != "all_reduce":
            raise ValueError(f"tree is an all-reduce algorithm; {op} uses ring, rdh or mesh")
        depth = log2_ceil(p)
        # a whole buffer per level, up and down, over one link of the rank's links
        link_bw = bandwidth / topology.intra_links
        return 2 * depth * hop_ns, 2 * depth * nbytes / link_bw * 1e9, 2 * depth, 2 * depth * nbytes
    raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {ALGORITHMS}")


@dataclass(frozen=True)
class LevelCost:
    """One stage of a hierarchical collective: the level it runs on, how many ranks each of its
    groups has, the link, the share of the tensor it works on, and its time."""
    level: str
    group: int
    link: str
    bandwidth: float   # bytes/s per rank on this level's link
    nbytes: float      # the share of the tensor this stage works on (the whole tensor / lower groups)
    latency_ns: float
    transfer_ns: float
    steps: int
    bytes_per_rank: float
    algorithm: str

    @property
    def time_ns(self) -> float:
        return self.latency_ns + self.transfer_ns


def level_costs(op: str, nbytes: float, topology: Topology, algorithm: str = "ring", ranks: int | None = None,
                inter_algorithm: str | None = None) -> list[LevelCost]:
    """The stages of the hierarchical collective over `ranks` ranks, innermost level first [CC-inter].
    Level l works on nbytes / (the group sizes of the levels below it): all-reduce = reduce-scatter up
    the levels, all-reduce on the top one, all-gather back down, so each level pays, for its share, an
    all-reduce over its own link; all-gather and reduce-scatter pay one pass per level. `algorithm`
    runs in the server; above it `inter_algorithm` (default the same, or ring where that is not
    possible: tree is an in-server algorithm here, mesh needs a switch between the servers — Trn3's
    "inter_kind" — and rdh a power of two)."""
    return _stages(op, nbytes, topology.group(ranks or topology.ranks), algorithm, inter_algorithm)


def _stages(op: str, nbytes: float, group: Topology, algorithm: str, inter_algorithm: str | None) -> list[LevelCost]:
    stages, share = [], float(nbytes)
    for level, size, link in group.levels():
        alg, switched = algorithm, level == "between servers" and group.inter_kind == "switch"
        if level != "in server":
            alg = inter_algorithm or algorithm
            if alg == "rdh" and not is_power_of_two(size) or alg == "tree" or alg == "mesh" and not switched:
                alg = "ring"
        lat, tr, steps, sent = _flat_cost(op, share, size, link.bandwidth, link.hop_latency_ns, alg, group, switched)
        stages.append(LevelCost(level, size, link.name, link.bandwidth, share, lat, tr, steps, sent, alg))
        share /= size  # the level above carries 1/size of it: this group's ranks work in parallel
    return stages


def cost(op: str, nbytes: float, topology: Topology, algorithm: str = "ring", ranks: int | None = None,
         inter_algorithm: str | None = None, launch_ns: float = 0.0, calibration=None) -> CollectiveCost:
    """Modelled time of one collective of `nbytes` over `ranks` ranks (default: all) of `topology`.

    A group inside one server runs the algorithm over the server's link. A group across servers (and
    racks) runs the hierarchical algorithm [CC-inter], one stage per level (`level_costs`): all-reduce
    = intra reduce-scatter + inter all-reduce of 1/ranks_per_server of the data + intra all-gather, and
    on three levels the middle all-reduce splits the same way again; all-gather = outer levels first;
    reduce-scatter = inner levels first. The time is the sum of the stages, so no collective is faster
    than its slowest stage. `inter_algorithm` (default: the same, or ring where that is not possible)
    is used above the server. `launch_ns` is a fixed cost per collective (software; 0 unless given).
    `calibration` (a `topology.Calibration`, e.g. `topology.NCCOM_TRN1`) corrects the links and adds
    its fixed cost: the model fitted to AWS's measurements instead of the documented link figures.
    """
    if calibration is not None:
        from trnlab.distributed.topology import calibrated
        return cost(op, nbytes, calibrated(topology, calibration), algorithm, ranks, inter_algorithm,
                    launch_ns + calibration.launch_ns)
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; choose one of {OPS}")
    if nbytes < 0:
        raise ValueError(f"a collective moves a non-negative number of bytes, got {nbytes}")
    group = topology.group(ranks or topology.ranks)
    if op == "send_recv":
        # to the farthest rank of the group, over the outermost level it spans (one of the server's links)
        link, bw = group.intra, group.intra.bandwidth / group.intra_links
        if group.racks > 1:
            link, bw = group.rack_link, group.rack_link.bandwidth
        elif group.servers > 1:
            link, bw = group.inter, group.inter.bandwidth
        return CollectiveCost(op, "p2p", group.ranks, int(nbytes), launch_ns + link.hop_latency_ns,
                              nbytes / bw * 1e9, 1, nbytes)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {ALGORITHMS}")
    stages = _stages(op, nbytes, group, algorithm, inter_algorithm)
    if group.servers > 1 or group.racks > 1:
        inner = stages[0].algorithm if group.ranks_per_server > 1 else algorithm
        algorithm = f"hierarchical {inner} + " + " + ".join(s.algorithm for s in stages if s.level != "in server")
    return CollectiveCost(op, algorithm, group.ranks, int(nbytes), launch_ns + sum(s.latency_ns for s in stages),
                          sum(s.transfer_ns for s in stages), sum(s.steps for s in stages),
                          sum(s.bytes_per_rank for s in stages))


def best_algorithm(op: str, nbytes: float, topology: Topology, ranks: int | None = None,
                   calibration=None) -> CollectiveCost:
    """The fastest algorithm the model offers for this size (what the Neuron runtime picks by size)."""
    candidates = []
    group = topology.group(ranks or topology.ranks)
    for algorithm in ALGORITHMS:
        if algorithm == "tree" and op != "all_reduce":
            continue
        if algorithm == "rdh" and not is_power_of_two(group.ranks_per_server):
            continue
        if algorithm == "mesh" and not group.supports("mesh"):
            continue
        candidates.append(cost(op, nbytes, topology, algorithm, ranks, calibration=calibration))
    return min(candidates, key=lambda c: c.time_ns)


# =============================================================================================
# On the timeline: a collective is one instruction on a rank's "cc" engine
# =============================================================================================
def new_timeline(ranks: int, engines: tuple[str, ...] = ("pe", "cc"), prefix: str = "chip") -> Timeline:
    """A Timeline with one track per rank and engine, named e.g. "chip0.pe", "chip0.cc"."""
    return Timeline([f"{prefix}{r}.{e}" for r in range(ranks) for e in engines])


def issue(timeline: Timeline, track: str, opcode: str, start_ns: float, duration_ns: float, flops: float = 0.0,
          nbytes: int = 0, waited_for: int = -1, note: str = "") -> int:
    """Record one instruction on `track` from `start_ns` for `duration_ns`; returns its index."""
    if duration_ns < 0:
        raise ValueError(f"an instruction cannot take negative time: {duration_ns} ns for {opcode}")
    eid = timeline.engines.index(track)
    end = start_ns + duration_ns
    timeline.records.append(Record(eid, opcode, float(start_ns), float(end), float(end), float(flops), int(nbytes),
                                   0, 0, int(waited_for), note))
    return len(timeline.records) - 1
