"""The profile of one run of a compiled model, per op, and the advice it gives.

Everything comes from the run's timeline (the kernels' instructions) and its regions (one per op of
the graph, with the user's source line):

- total time, per-engine active %, MFU, MBU, bytes per memory level (trnlab.hardware.Profile);
- per op (a region of the one program): the time it adds to the run (how far it moves the run's end
  past the ops before it: these sum to the total even though kernels overlap across op boundaries),
  its own span, share of the total, model FLOPs (nc_transpose's identity matmuls excluded), HBM bytes, arithmetic intensity, MFU, bound
  (`hardware.profile.roofline_bound`: "latency" if the op took over 10x what its FLOPs and HBM bytes
  need at the core's roofs, else "compute" if its FLOP per HBM byte is above the ridge point, else "memory");
- advice, in the spirit of AWS's profiler (Neuron Explorer) [PERF], each naming the op it comes from:
  low MFU, transposes taking over 10 % of the Tensor engine's time, DMAs smaller than the efficient
  size, and HBM round trips between kernels of tensors that could stay in SBUF (spill traffic).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trnlab.hardware.profile import roofline_bound

LOW_MFU = 0.20                 # assumed threshold for "low MFU": [PERF] targets >= 90 % engine active
TRANSPOSE_SHARE = 0.10         # the brief's threshold: transposes over 10 % of Tensor-engine time
SMALL_DMA_BYTES = 4 * 1024     # [nki-dma-bandwidth-guide]: >= 4 KiB contiguous per partition for bandwidth;
                               # a transfer of fewer bytes in total is below that on every partition


@dataclass
class OpProfile:
    region: str
    op: str
    kernel: str
    source: str
    ns: float
    share: float
    flops: float
    hbm_bytes: float
    pe_ns: float
    transpose_ns: float
    small_dmas: int
    dmas: int
    mfu: float                 # model FLOPs over the op's own span (start_ns .. end_ns)
    bound: str
    start_ns: float = 0.0      # the op's span on the timeline; spans of neighbouring ops may overlap
    end_ns: float = 0.0

    @property
    def span_ns(self) -> float:
        return self.end_ns - self.start_ns

    @property
    def intensity(self) -> float:
        return self.flops / self.hbm_bytes if self.hbm_bytes else float("inf")


@dataclass
class Advice:
    kind: str                  # "low_mfu" | "transposes" | "small_dma" | "spill"
    region: str
    source: str
    message: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.region}: {self.message}" + (f"  ({self.source})" if self.source else "")


@dataclass
class RunProfile:
    target: str
    total_ns: float
    profile: object                        # trnlab.hardware.Profile of the whole run
    ops: list = field(default_factory=list)
    advice: list = field(default_factory=list)
    timeline: object = None
    wall_s: float = 0.0
    launch_ns: float = 0.0                 # the runtime's start-up and tear-down of its launches (one per
                                           # device partition): no op adds it; with the ops', the total

    @property
    def total_us(self) -> float:
        return self.total_ns / 1e3

    @property
    def mfu(self) -> float:
        return self.profile.mfu

    @property
    def mbu(self) -> float:
        return self.profile.mbu

    @property
    def active(self) -> dict:
        return self.profile.active

    @property
    def bytes_by_level(self) -> dict:
        return self.profile.bytes_by_level

    def by_op(self) -> dict:
        """op kind -> total ns (e.g. all linear ops together)."""
        out: dict[str, float] = {}
        for o in self.ops:
            out[o.op] = out.get(o.op, 0.0) + o.ns
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def to_chrome_trace(self, path=None) -> dict:
        """The timeline as Chrome trace JSON, with one extra track naming each op's region."""
        trace = self.timeline.to_chrome_trace()
        events = trace["traceEvents"]
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": 999, "args": {"name": "ops (regions)"}})
        for o in self.ops:                 # each op's own span: neighbours may overlap
            events.append({"name": o.region, "ph": "X", "pid": 0, "tid": 999, "ts": o.start_ns / 1e3,
                           "dur": o.span_ns / 1e3, "args": {"op": o.op, "kernel": o.kernel, "source": o.source,
                                                          "adds_us": o.ns / 1e3}})
        if path is not None:
            import json
            with open(path, "w") as f:
                json.dump(trace, f)
        return trace

    def table(self, top: int | None = None) -> str:
        lines = [f"{'region':22s} {'kernel':20s} {'time us':>9s} {'share':>6s} {'MFU':>6s} {'FLOP/B':>7s} "
                 f"{'bound':7s} source"]
        ops = sorted(self.ops, key=lambda o: -o.ns)[:top] if top else self.ops
        for o in ops:
            lines.append(f"{o.region:22s} {o.kernel:20s} {o.ns / 1e3:9.2f} {o.share:6.1%} {o.mfu:6.1%} "
                         + (f"{'-':>7s}" if o.bound == "host" else f"{min(o.intensity, 9999):7.1f}")
                         + f" {o.bound:7s} {o.source[:60]}")
        if self.launch_ns:
            lines.append(f"{'(runtime start-up)':22s} {'':20s} {self.launch_ns / 1e3:9.2f} "
                         f"{self.launch_ns / self.total_ns:6.1%}")
        return "\n".join(lines)

    def summary(self) -> str:
        launch = f" ({self.launch_ns / 1e3:.1f} us of it the runtime's start-up)" if self.launch_ns else ""
        head = [f"target {self.target}: {self.total_us:.2f} us simulated{launch}, MFU {self.mfu:.2%}, MBU {self.mbu:.2%}",
                "engine active: " + ", ".join(f"{e} {a:.0%}" for e, a in sorted(self.active.items(), key=lambda kv: -kv[1])
                                              if not (e.startswith("dma") and e != "dma (any queue)")),
                "bytes: " + ", ".join(f"{k} {v / 1e6:.3f} MB" for k, v in self.bytes_by_level.items())]
        return "\n".join(head)

    def __str__(self) -> str:
        return self.summary()


def build(execution, program, graph, target: str, dtype: str) -> RunProfile:
    """The RunProfile of one execution (see module docstring): all from the run's one timeline."""
    from trnlab.hardware import Profile, presets
    spec = presets.core_spec(target)
    tl = execution.timeline
    whole = Profile.from_timeline(tl, spec, dtype)
    total = max(whole.total_ns, sum(r.ns for r in execution.regions)) or 1.0
    ridge = spec.peak_flops(dtype) / spec.hbm_bandwidth
    cols = tl.columns()
    engines = tl.engines
    pe = engines.index("pe") if "pe" in engines else -1
    is_dma = np.array([e.startswith("dma") for e in engines])
    peak = spec.peak_flops(dtype)
    ops = []
    for r in execution.regions:
        if r.kind != "kernel":
            ops.append(OpProfile(r.name, r.op, "host (CPU)", r.source, r.ns, r.ns / total, 0.0, 0.0, 0.0, 0.0, 0, 0,
                                 0.0, "host", r.start_ns, r.end_ns))      # ns: transfers + host compute
            continue
        sl = np.asarray(r.records, dtype=np.int64)
        eng = cols["engine"][sl]
        dur = cols["end"][sl] - cols["start"][sl]
        opcodes = [cols["opcode"][i] for i in sl]
        transposing = np.array([o == "nc_transpose" for o in opcodes], dtype=bool)
        flops = float(cols["flops"][sl][~transposing].sum()) if len(opcodes) else 0.0   # model FLOPs only
        hbm = float(cols["hbm"][sl].sum())
        pe_ns = float(dur[eng == pe].sum()) if pe >= 0 else 0.0
        tr = float(dur[(eng == pe) & transposing].sum()) if pe >= 0 and len(opcodes) else 0.0
        dma_rows = is_dma[eng] if len(eng) else np.zeros(0, bool)
        dma_bytes = np.maximum(cols["hbm"][sl], cols["sbuf"][sl])[dma_rows]
        span = r.span_ns
        mfu = flops / (span * 1e-9) / peak if span and peak else 0.0        # over the op's own span
        bound = roofline_bound(flops, hbm, span * 1e-9, peak, spec.hbm_bandwidth)
        ops.append(OpProfile(r.name, r.op, r.kernel, r.source, r.ns, r.ns / total, flops, hbm, pe_ns, tr,
                             int((dma_bytes < SMALL_DMA_BYTES).sum()), int(dma_rows.sum()), mfu, bound,
                             r.start_ns, r.end_ns))
    launch_ns = len(execution.launches) * spec.launch_ns
    result = RunProfile(target, total, whole, ops, [], tl, execution.wall_s, launch_ns)
    result.advice = advise(result, graph)
    return result


def advise(p: RunProfile, graph=None) -> list:
    out = []
    kernels = [o for o in p.ops if o.kernel and o.bound != "host"]
    if p.mfu < LOW_MFU and kernels:
        worst = max(kernels, key=lambda o: o.ns * (1 - o.mfu))
        out.append(Advice("low_mfu", worst.region, worst.source,
                          f"model FLOPs utilisation is {p.mfu:.1%} (below {LOW_MFU:.0%}); the op that loses the most "
                          f"time is {worst.region} ({worst.kernel}, {worst.ns / 1e3:.2f} us at {worst.mfu:.1%} MFU, "
                          f"{worst.bound}-bound): larger batches or fewer, larger kernels raise it"))
    heavy = [o for o in kernels if o.pe_ns and o.transpose_ns > TRANSPOSE_SHARE * o.pe_ns]
    for o in sorted(heavy, key=lambda o: -o.transpose_ns)[:3]:
        others = f" ({len(heavy) - 1} more ops like it)" if o is max(heavy, key=lambda o: o.transpose_ns) and \
            len(heavy) > 1 else ""
        out.append(Advice("transposes", o.region, o.source,
                          f"nc_transpose takes {o.transpose_ns / o.pe_ns:.0%} of its Tensor-engine time (over "
                          f"{TRANSPOSE_SHARE:.0%}){others}: the matmul needs its operand with K on the partitions; "
                          f"store it pre-transposed (the layout pass does this for weights) or have the producer "
                          f"write it in the [K, M] layout"))
    small = [o for o in kernels if o.dmas and o.small_dmas / o.dmas > 0.5]
    for o in sorted(small, key=lambda o: -o.small_dmas)[:3]:
        out.append(Advice("small_dma", o.region, o.source,
                          f"{o.small_dmas} of its {o.dmas} DMAs move less than {SMALL_DMA_BYTES // 1024} KiB "
                          f"(below the >= 4 KiB per partition that reaches DMA bandwidth): batch more rows per "
                          f"transfer"))
    memory = (graph.meta.get("memory") if graph is not None else None) or {}
    spills = [(name, t) for name, t in memory.get("tensors", {}).items()
              if t.get("sbuf_candidate") and t.get("level") == "hbm"]       # not kept on chip by a fused kernel
    if spills:
        by_region = {part: o for o in p.ops for part in o.region.split("+")}
        counts: dict[str, int] = {}
        names = {}
        for n in graph.nodes:
            names[n.name] = f"{n.op}.{counts.get(n.op, 0)}"
            counts[n.op] = counts.get(n.op, 0) + 1
        total = sum(t["bytes"] for _, t in spills)
        name, t = max(spills, key=lambda kv: kv[1]["bytes"])
        region = names.get(name, name)
        src = by_region[region].source if region in by_region else ""
        region = by_region[region].region if region in by_region else region
        out.append(Advice("spill", region, src,
                          f"{len(spills)} activations ({total / 1024:.1f} KiB) go to HBM and straight back into the "
                          f"next kernel although they fit in SBUF; the largest is %{name} ({t['bytes'] / 1024:.1f} KiB) "
                          f"from {region}: keeping them on chip between fused kernels saves 2x their bytes of HBM "
                          f"traffic"))
    return out
