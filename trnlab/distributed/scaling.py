"""How a training step scales over many chips, and whether a model fits on one.

A step of a decoder-only transformer on P = dp × tp × pp chips, as the sum of what is not hidden:

- compute: 6 · params · tokens (+ attention's 12 · L · T² · C per sequence) FLOPs, spread over the
  chips at `utilization` of the bf16 peak (ASSUMED 50 %: a well-tuned large-model MFU; edit it);
- data parallel: one all-reduce of the bf16 gradients of a replica's shard (params / (tp·pp))
  over the dp ranks, of which `overlap` is hidden behind the backward pass (ASSUMED: bucketed
  all-reduce overlaps the backward, which is 2/3 of the compute);
- tensor parallel: 4 all-reduces of one (b, T, C) bf16 activation per layer per microbatch (2 forward,
  2 backward), on the critical path;
- pipeline parallel: the 1F1B bubble (pp-1)/(M+pp-1) of the compute, plus activation sends.

Collective times come from `collectives.cost` over the topology; tensor parallelism uses the
innermost (closest) ranks, then pipeline, then data parallelism outermost, as NeuronX Distributed
lays them out. Memory per chip: bf16 weights and gradients (2 + 2 bytes per parameter), AdamW state
in fp32 (master copy, m, v: 12 bytes; divided by dp with ZeRO-1), and activations —
T·C·(34 + 5·n_head·T/C) bytes per layer per sequence in bf16 without recomputation (Korthikanti et
al., "Reducing Activation Recomputation in Large Transformer Models", 2022), divided by tp.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from trnlab.distributed import collectives
from trnlab.distributed.topology import Topology

GiB = 2**30
UTILIZATION = 0.5  # ASSUMED: fraction of bf16 peak a well-tuned training step reaches (MFU)


@dataclass(frozen=True)
class ModelShape:
    """The shape of a decoder-only transformer (GPT-style: MLP of 4C, tied embeddings)."""
    name: str
    n_layer: int
    n_embd: int
    n_head: int
    vocab_size: int
    seq_len: int

    @property
    def params(self) -> int:
        C, L = self.n_embd, self.n_layer
        return L * (12 * C * C + 13 * C) + self.vocab_size * C + self.seq_len * C + 2 * C

    def flops_per_sequence(self) -> float:
        """Training FLOPs (forward + backward) for one sequence: 6·N·T + attention 12·L·T²·C."""
        T = self.seq_len
        return 6 * self.params * T + 12 * self.n_layer * T * T * self.n_embd

    def activation_bytes_per_layer(self, sequences: float) -> float:
        T, C = self.seq_len, self.n_embd
        return sequences * T * C * (34 + 5 * self.n_head * T / C)


MODELS = {m.name: m for m in (
    ModelShape("tiny GPT (trnlab)", 4, 64, 4, 43, 32),
    ModelShape("GPT-2 small (124M)", 12, 768, 12, 50257, 1024),
    ModelShape("GPT-2 XL (1.5B)", 48, 1600, 25, 50257, 1024),
    ModelShape("7B-class", 32, 4096, 32, 32000, 4096),
    ModelShape("70B-class", 80, 8192, 64, 32000, 4096),
)}


@dataclass(frozen=True)
class Memory:
    weights: float
    gradients: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations

    def as_gib(self) -> dict:
        return {k: v / GiB for k, v in dataclasses.asdict(self).items()} | {"total": self.total / GiB}


def memory_per_chip(model: ModelShape, batch_per_replica: float, dp: int = 1, tp: int = 1, pp: int = 1,
                    zero1: bool = False, microbatches: int | None = None) -> Memory:
    """Bytes one chip holds during a step (see the module docstring for the byte counts)."""
    shard = model.params / (tp * pp)
    m = microbatches or max(1, int(batch_per_replica))
    in_flight = batch_per_replica if pp == 1 else min(m, pp) * batch_per_replica / m  # 1F1B keeps <= pp
    acts = model.activation_bytes_per_layer(in_flight) * math.ceil(model.n_layer / pp) / tp
    return Memory(2 * shard, 2 * shard, 12 * shard / (dp if zero1 else 1), acts)


def would_it_fit(model: ModelShape, topology: Topology, batch: int = 1) -> dict:
    """Memory for training `model` on one rank of `topology` against that rank's HBM."""
    mem = memory_per_chip(model, batch)
    hbm = topology.hbm_bytes_per_rank
    return {"model": model.name, "params": model.params, **{f"{k} (GiB)": v for k, v in mem.as_gib().items()},
            "HBM per chip (GiB)": hbm / GiB, "fits": mem.total <= hbm,
            "chips needed at least": math.ceil(mem.total / hbm)}


@dataclass(frozen=True)
class StepEstimate:
    layout: tuple[int, int, int]  # (dp, tp, pp)
    compute_ns: float
    dp_ns: float      # exposed (not hidden) data-parallel all-reduce
    tp_ns: float
    pp_bubble_ns: float
    p2p_ns: float
    memory: Memory
    hbm_bytes: int
    tokens: int
    dp_total_ns: float = 0.0  # the whole data-parallel all-reduce, hidden or not

    @property
    def collective_share(self) -> float:
        """All collective time (including the all-reduce hidden behind the backward) / step time."""
        return (self.dp_total_ns + self.tp_ns + self.p2p_ns) / self.total_ns

    @property
    def chips(self) -> int:
        return self.layout[0] * self.layout[1] * self.layout[2]

    @property
    def total_ns(self) -> float:
        return self.compute_ns + self.dp_ns + self.tp_ns + self.pp_bubble_ns + self.p2p_ns

    @property
    def communication_share(self) -> float:
        return (self.dp_ns + self.tp_ns + self.p2p_ns) / self.total_ns

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / (self.total_ns * 1e-9)

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.hbm_bytes


def _group(topology: Topology, size: int, stride: int) -> Topology:
    """The ranks one parallel group sees: `size` ranks, `stride` apart (inner groups packed first)."""
    if size * stride <= topology.ranks_per_server:
        return topology.group(size)
    per_server = max(1, topology.ranks_per_server // stride)
    servers = max(1, size // per_server)
    name = f"{topology.name}[{size}/{stride}]"
    racks = min(topology.racks, math.ceil(size * stride / topology.ranks_per_rack))
    if racks > 1:  # the group spans racks (Trn3): `size / racks` ranks in each, `per_server` a server
        per_rack = size // racks
        servers = max(1, per_rack // per_server)
        return dataclasses.replace(topology, name=name, ranks_per_server=per_rack // servers, servers=servers,
                                   racks=racks)
    return dataclasses.replace(topology, name=name, ranks_per_server=size // servers, servers=servers,
                               inter=topology.inter or topology.efa, racks=1, rack_link=None)


def estimate(model: ModelShape, topology: Topology, global_batch: int, dp: int = 1, tp: int = 1, pp: int = 1,
             utilization: float = UTILIZATION, overlap: float = 2 / 3, zero1: bool = False,
             algorithm: str = "ring", calibration=None) -> StepEstimate:
    """Step time of `model` on dp × tp × pp ranks of `topology`, `global_batch` sequences per step.
    `calibration` (e.g. `topology.NCCOM_TRN1`): collectives from the model fitted to measurements."""
    chips = dp * tp * pp
    if chips > topology.ranks:
        raise ValueError(f"layout dp={dp} × tp={tp} × pp={pp} needs {chips} ranks; {topology.name} has {topology.ranks}")
    if model.n_head % tp:
        raise ValueError(f"tensor parallelism splits heads: {model.n_head} heads over tp={tp}")
    if pp > model.n_layer:
        raise ValueError(f"pipeline parallelism splits layers: {model.n_layer} layers over pp={pp}")
    if global_batch % dp:
        raise ValueError(f"the global batch must split over the replicas: {global_batch} over dp={dp}")
    per_replica = global_batch // dp
    compute = global_batch * model.flops_per_sequence() / (chips * topology.peak_flops() * utilization) * 1e9
    dp_ns = dp_total = 0.0
    if dp > 1:
        grads = 2 * model.params / (tp * pp)
        dp_total = collectives.cost("all_reduce", grads, _group(topology, dp, tp * pp), algorithm,
                                     calibration=calibration).time_ns
        dp_ns = max(0.0, dp_total - overlap * compute)
    microbatches = per_replica if pp > 1 else 1
    micro = per_replica / microbatches  # sequences per microbatch
    act = 2 * micro * model.seq_len * model.n_embd  # one (b, T, C) bf16 activation
    tp_ns = 0.0
    if tp > 1:
        one = collectives.cost("all_reduce", act, topology.group(tp), algorithm, calibration=calibration).time_ns
        tp_ns = 4 * math.ceil(model.n_layer / pp) * microbatches * one
    bubble = p2p = 0.0
    if pp > 1:
        bubble = compute * (pp - 1) / microbatches
        send = collectives.cost("send_recv", act, _group(topology, 2, tp), calibration=calibration).time_ns
        p2p = 2 * (pp - 1 + microbatches) * send
    memory = memory_per_chip(model, per_replica, dp, tp, pp, zero1, microbatches)
    return StepEstimate((dp, tp, pp), compute, dp_ns, tp_ns, bubble, p2p, memory, topology.hbm_bytes_per_rank,
                        global_batch * model.seq_len, dp_total)


def scaling(model: ModelShape, topology: Topology, global_batch: int, strategy: str = "dp", **kwargs) -> list[StepEstimate]:
    """Estimates for 1, 2, 4, … ranks of `topology`, all of them data-, tensor- or pipeline-parallel."""
    rows = []
    p = 1
    while p <= topology.ranks:
        layout = {"dp": (p, 1, 1), "tp": (1, p, 1), "pp": (1, 1, p)}[strategy]
        try:
            rows.append(estimate(model, topology, global_batch, *layout, **kwargs))
        except ValueError:
            pass  # this size does not divide the model or the batch
        p *= 2
    return rows


def dp_step_timeline(model: ModelShape, topology: Topology, global_batch: int, dp: int, ranks_shown: int = 2,
                     utilization: float = UTILIZATION, algorithm: str = "ring"):
    """One data-parallel step on a Timeline: forward, then backward layer by layer on each rank's
    "pe" track; as soon as a layer's gradients are done their all-reduce (one bucket per layer) runs
    on the "cc" track — the collective-compute engine — overlapping the backward of earlier layers."""
    estimate_ = estimate(model, topology, global_batch, dp=dp, utilization=utilization, algorithm=algorithm)
    forward = estimate_.compute_ns / 3  # backward is about twice the forward
    per_layer_bwd = 2 * forward / model.n_layer
    bucket = 2 * model.params / model.n_layer  # bf16 gradients of one layer (embeddings spread over them)
    group = _group(topology, dp, 1)
    reduce_ns = collectives.cost("all_reduce", bucket, group, algorithm).time_ns if dp > 1 else 0.0
    timeline = collectives.new_timeline(ranks_shown)
    for r in range(ranks_shown):
        collectives.issue(timeline, f"chip{r}.pe", "forward", 0.0, forward)
        cc_free = 0.0
        for i in range(model.n_layer):
            start = forward + i * per_layer_bwd
            collectives.issue(timeline, f"chip{r}.pe", "backward", start, per_layer_bwd,
                              note=f"layer {model.n_layer - 1 - i}")
            begin = max(start + per_layer_bwd, cc_free)
            collectives.issue(timeline, f"chip{r}.cc", "all_reduce", begin, reduce_ns,
                              note=f"gradients of layer {model.n_layer - 1 - i}")
            cc_free = begin + reduce_ns
    return timeline
