"""Data parallelism on the simulated chips: a gradient all-reduce overlapping the next layer's backward.

`weight_gradients_kernel` is an NKI kernel of the weight-gradient half of a backward pass through
`layers` linear layers, last layer first, as data-parallel training runs it on every rank:

    for layer l = L-1 … 0:
        grad[l] = x[l].T @ g[l]             Tensor engine; K = tokens in tiles of 128, in PSUM
        store grad[l] to HBM                 DMA
        all_reduce(grad[l]) -> grad_sum[l]   the core's CC engine (nki.collectives.all_reduce)

The all-reduce of layer l needs only grad[l], so the Tensor engine goes straight on to layer l-1
while the CC engine sums layer l across the ranks: on the timeline, ``pe`` and ``cc0`` are busy at
the same time (`overlap_ns`). The last layer's all-reduce is what stays exposed — the reason real
frameworks bucket gradients and start with the last layer.

`run_overlap_demo` traces the kernel once, runs it on `ranks` chips of a topology with a
`Cluster`, and checks the summed gradients against NumPy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import trnlab.nki as nki
import trnlab.nki.collectives as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.distributed import topology as topo
from trnlab.distributed.cluster import Cluster
from trnlab.hardware.timeline import Timeline


def weight_gradients_kernel(x, g, ranks: int = 2):
    """x [L, T, IN], g [L, T, OUT] (T a multiple of 128, IN <= 128, OUT <= 512) ->
    grad_sum [L, IN, OUT]: sum over the ranks of x[l].T @ g[l]. `ranks`: the replica group's size."""
    L, T, n_in = x.shape
    n_out = g.shape[2]
    group = ncc.ReplicaGroup([list(range(ranks))])
    grad = nl.ndarray((L, n_in, n_out), dtype=nl.float32, buffer=nl.hbm, name="grad")
    grad_sum = nl.ndarray((L, n_in, n_out), dtype=nl.float32, buffer=nl.shared_hbm, name="grad_sum")
    for layer in range(L - 1, -1, -1):                              # backward: the last layer first
        acc = nl.zeros((n_in, n_out), dtype=nl.float32, buffer=nl.psum)  # [IN partitions, OUT]
        for t0 in range(0, T, 128):
            xt = nl.load(x[layer, t0:t0 + 128, :])                  # [128 tokens, IN]: stationary
            gt = nl.load(g[layer, t0:t0 + 128, :])                  # [128 tokens, OUT]: moving
            acc += nisa.nc_matmul(xt, gt)                           # x.T @ g, contraction over tokens
        nl.store(grad[layer], nl.copy(acc, dtype=nl.float32))
        ncc.all_reduce(srcs=[grad[layer]], dsts=[grad_sum[layer]], replica_group=group, op=nl.add)
    return grad_sum


@dataclass
class OverlapDemo:
    cluster: Cluster
    timeline: Timeline          # all ranks, tracks "rankN pe", "rankN dma", "rankN cc0", ...
    grad_sum: np.ndarray        # rank 0's result [L, IN, OUT]
    expected: np.ndarray        # NumPy: sum over ranks of x.T @ g
    step_ns: float              # the whole kernel, last all-reduce included
    compute_ns: float           # rank 0's Tensor engine busy
    collective_ns: float        # rank 0's CC engine busy
    overlap_ns: float           # rank 0: time when pe and cc0 are both busy

    @property
    def max_error(self) -> float:
        return float(np.max(np.abs(self.grad_sum - self.expected)) / max(1e-30, np.max(np.abs(self.expected))))


def busy_intervals(timeline: Timeline, engine: str) -> list[tuple[float, float]]:
    """The merged [start, end) intervals in which `engine` is busy."""
    eid = timeline.engines.index(engine)
    spans = sorted((r[2], r[3]) for r in timeline.records if r[0] == eid and r[3] > r[2])
    merged: list[list[float]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def both_busy_ns(timeline: Timeline, a: str, b: str) -> float:
    """How long engines `a` and `b` are busy at the same time."""
    ia, ib = busy_intervals(timeline, a), busy_intervals(timeline, b)
    total, j = 0.0, 0
    for s, e in ia:
        for s2, e2 in ib:
            lo, hi = max(s, s2), min(e, e2)
            if hi > lo:
                total += hi - lo
    return total


def run_overlap_demo(topology: topo.Topology = topo.TRN2_48XLARGE, ranks: int = 2, layers: int = 4,
                     tokens: int = 512, n_in: int = 128, n_out: int = 512, seed: int = 0,
                     mode: str = "full") -> OverlapDemo:
    """Trace `weight_gradients_kernel`, run it on `ranks` ranks of `topology`, check the numbers."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((layers, tokens, n_in)).astype(np.float32) for _ in range(ranks)]
    gs = [rng.standard_normal((layers, tokens, n_out)).astype(np.float32) for _ in range(ranks)]
    kernel = nki.jit(weight_gradients_kernel)
    program = nki.trace(kernel, xs[0], gs[0], ranks=ranks, target=topology.chip.core)
    cluster = Cluster(topology, ranks=ranks, mode=mode)
    runs = cluster.run(program, [(x, g) for x, g in zip(xs, gs)])
    expected = sum(np.einsum("lti,lto->lio", x.astype(np.float64), g.astype(np.float64)) for x, g in zip(xs, gs))
    timeline = cluster.timeline()
    t0 = cluster.core(0).timeline
    busy = t0.busy_ns()
    grad_sum = runs[0].outputs if mode == "full" else np.zeros_like(expected)
    return OverlapDemo(cluster, timeline, np.asarray(grad_sum, dtype=np.float64), expected,
                       step_ns=max(r.latency_ns for r in runs), compute_ns=busy.get("pe", 0.0),
                       collective_ns=busy.get("cc0", 0.0), overlap_ns=both_busy_ns(t0, "pe", "cc0"))
