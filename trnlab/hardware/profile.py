"""The profile of a run, computed from its timeline only (nothing is measured twice).

- total time: when the last result is ready;
- per-engine active %: the engine's busy time (sum of end - start) over the total; for DMA also
  "dma (any queue)": the share of time at least one queue had a transfer in flight, from its trigger
  (the fixed `dma_latency_ns` included) to its end; and `dma_transferring`, AWS's profiler's
  definition (`dma_active_time_percent`: "Percentage of time when at least one DMA packet is
  transferring", Neuron Explorer profile schema, Summary table), the same without the fixed latency
  (the ≈1.3 µs "semaphore-to-start" before a transfer's engines begin [DMA-BW]);
- MFU: tensor-engine FLOPs / (total time × peak FLOP/s of the dtype) [PERF];
- MBU: HBM bytes / (total time × the core's HBM bandwidth) [PERF];
- achieved TFLOPS, arithmetic intensity (FLOPs per HBM byte), bytes per memory level,
  instruction counts per opcode and per engine;
- spilled bytes: the HBM bytes of the DMAs the allocator added where SBUF tiles did not fit
  (`spill.py`, ASSUMED; their kernel line says ``spill: ...``), with a warning per spilled tensor.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .presets import CoreSpec
from .records import HBM, NOTE
from .timeline import Timeline

SPILL_NOTE = "spill: "          # the kernel line of a spill DMA (spill.NOTE)
LATENCY_FACTOR = 10.0       # over 10x the time its FLOPs and bytes need at the roofs: latency-bound


def roofline_bound(flops: float, hbm_bytes: float, seconds: float, peak_flops: float, bandwidth: float) -> str:
    """Which limit a piece of work (`flops`, `hbm_bytes`, taking `seconds`) sits against on the roofline:
    "latency" if it took over LATENCY_FACTOR times what its FLOPs at the peak and its bytes at the
    bandwidth need (fixed costs — DMA start-up, instruction overheads, waits on a chain of
    dependencies — dominate: it sits far below the roof), else "memory" left of the ridge and
    "compute" right of it (intensity above peak / bandwidth)."""
    needed = max(flops / peak_flops if peak_flops else 0.0, hbm_bytes / bandwidth if bandwidth else 0.0)
    if seconds > LATENCY_FACTOR * needed:
        return "latency"
    return "compute" if hbm_bytes and flops / hbm_bytes > peak_flops / bandwidth else "memory"


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length covered by a set of intervals."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    # a new block starts where an interval begins after everything before it ended
    new_block = np.empty(len(s), dtype=bool)
    new_block[0] = True
    new_block[1:] = s[1:] > run_end[:-1]
    block_id = np.cumsum(new_block) - 1
    block_start = s[new_block]
    block_end = np.zeros(block_id[-1] + 1)
    np.maximum.at(block_end, block_id, e)
    return float(np.sum(block_end - block_start))


@dataclass
class Profile:
    total_ns: float
    busy_ns: dict                    # engine -> ns active
    flops: float
    hbm_bytes: float
    sbuf_bytes: float
    psum_bytes: float
    peak_flops: float
    hbm_bandwidth: float
    dma_any_ns: float
    dma_moving_ns: float = 0.0       # at least one transfer past its fixed latency (`dma_transferring`)
    instructions: dict = field(default_factory=dict)       # opcode -> count
    engine_instructions: dict = field(default_factory=dict)
    spilled_bytes: float = 0.0       # HBM bytes moved by spill DMAs (stores and reloads)
    warnings: list = field(default_factory=list)           # one per spilled tensor

    @classmethod
    def from_timeline(cls, timeline: Timeline, spec: CoreSpec, dtype="bfloat16") -> "Profile":
        c = timeline.columns()
        busy = timeline.busy_ns()
        is_dma = np.array([e.startswith("dma") for e in timeline.engines])
        dma_rows = is_dma[c["engine"]] if c["n"] else np.zeros(0, bool)
        eng_counts = np.bincount(c["engine"], minlength=len(timeline.engines)) if c["n"] else \
            np.zeros(len(timeline.engines), int)
        spilled, per_tile = 0.0, Counter()
        for r in timeline.records:
            note = r[NOTE]
            if note and note.startswith(SPILL_NOTE):
                spilled += r[HBM]
                # "spill: reload 'tile' of <kernel line> ...": the tensor is the line that wrote it
                tensor = note.split(" of ", 1)[1].split(" (again", 1)[0] if " of " in note else note
                per_tile[tensor] += r[HBM]
        return cls(
            total_ns=timeline.total_ns, busy_ns=busy, flops=float(c["flops"].sum()),
            hbm_bytes=float(c["hbm"].sum()), sbuf_bytes=float(c["sbuf"].sum()),
            psum_bytes=float(c["psum"].sum()), peak_flops=spec.peak_flops(dtype),
            hbm_bandwidth=spec.hbm_bandwidth,
            dma_any_ns=_union_length(c["start"][dma_rows], c["end"][dma_rows]),
            dma_moving_ns=_union_length(np.minimum(c["start"][dma_rows] + spec.dma_latency_ns, c["end"][dma_rows]),
                                        c["end"][dma_rows]),
            instructions=dict(Counter(c["opcode"])),
            engine_instructions={e: int(eng_counts[i]) for i, e in enumerate(timeline.engines)
                                 if eng_counts[i]},
            spilled_bytes=spilled,
            warnings=[f"SBUF overflow: the tiles written at {name} spilled to HBM ({moved / 1e6:.3f} MB of "
                      f"spill DMAs; ASSUMED, trnlab.hardware.spill)" for name, moved in per_tile.most_common()],
        )

    # -- derived figures ----------------------------------------------------------------------------
    @property
    def total_us(self) -> float:
        return self.total_ns / 1e3

    @property
    def active(self) -> dict:
        """Fraction of the total time each engine was busy (engines that ran something)."""
        t = self.total_ns or 1.0
        out = {e: b / t for e, b in self.busy_ns.items() if b > 0}
        if self.dma_any_ns:
            out["dma (any queue)"] = self.dma_any_ns / t
        return out

    @property
    def dma_transferring(self) -> float:
        """Fraction of the total time at least one DMA was past its fixed latency (its engines at
        work): AWS's profiler's DMA active (module docstring); "dma (any queue)" counts from the trigger."""
        return self.dma_moving_ns / self.total_ns if self.total_ns else 0.0

    @property
    def achieved_flops(self) -> float:
        return self.flops / (self.total_ns * 1e-9) if self.total_ns else 0.0

    @property
    def achieved_tflops(self) -> float:
        return self.achieved_flops / 1e12

    @property
    def mfu(self) -> float:
        return self.achieved_flops / self.peak_flops if self.peak_flops else 0.0

    @property
    def mbu(self) -> float:
        if not self.total_ns:
            return 0.0
        return self.hbm_bytes / (self.total_ns * 1e-9) / self.hbm_bandwidth

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved to or from HBM."""
        return self.flops / self.hbm_bytes if self.hbm_bytes else float("inf")

    @property
    def bytes_by_level(self) -> dict:
        return {"hbm": self.hbm_bytes, "sbuf": self.sbuf_bytes, "psum": self.psum_bytes}

    @property
    def bottleneck(self) -> str:
        """The compute engine or DMA that was busy the longest."""
        cands = {e: b for e, b in self.busy_ns.items() if not e.startswith("dma")}
        cands["dma (any queue)"] = self.dma_any_ns
        return max(cands, key=cands.get)

    def as_dict(self) -> dict:
        return {"total_us": self.total_us, "mfu": self.mfu, "mbu": self.mbu,
                "achieved_tflops": self.achieved_tflops,
                "arithmetic_intensity": self.arithmetic_intensity,
                "active": self.active, "bytes": self.bytes_by_level,
                "instructions": self.instructions, "spilled_bytes": self.spilled_bytes}

    def summary(self) -> str:
        lines = [f"total time          {self.total_us:12.2f} us",
                 f"achieved            {self.achieved_tflops:12.2f} TFLOPS   (MFU {self.mfu:6.1%})",
                 f"HBM traffic         {self.hbm_bytes / 1e6:12.3f} MB       (MBU {self.mbu:6.1%})",
                 f"arithmetic intensity{self.arithmetic_intensity:12.1f} FLOP/B",
                 "engine active:"]
        for e, a in sorted(self.active.items(), key=lambda kv: -kv[1]):
            if e.startswith("dma") and e != "dma (any queue)":
                continue
            lines.append(f"  {e:18s}{a:8.1%}")
        lines.append("instructions: " + ", ".join(f"{k} {v}" for k, v in
                                                  sorted(self.instructions.items())))
        if self.spilled_bytes:
            lines.append(f"spilled bytes       {self.spilled_bytes / 1e6:12.3f} MB       "
                         f"(SBUF overflow, ASSUMED: see .warnings)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()
