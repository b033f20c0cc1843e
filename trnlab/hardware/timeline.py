"""The timeline: one record per instruction — engine, opcode, start, end, bytes, FLOPs, and what it
waited for. Everything the profile reports is computed from it.

Records are `records.Record`s — tuples of named fields; the hot loops append plain tuples of the
same fields (cheaper: the timing-only mode issues hundreds of thousands). ``timeline[i]`` builds an
`Instruction` on demand and ``timeline.columns()`` gives NumPy arrays. Times are nanoseconds from
the start of the run.

- ``start_ns``: the instruction starts on its engine;
- ``end_ns``: the engine is free again (the engine is *active* in [start, end));
- ``ready_ns``: its results are visible to other instructions (a matmul's PSUM result arrives after
  the systolic array's fill/drain, so ready >= end; for the other engines ready == end);
- ``waited_for``: index of the instruction whose completion decided the start (-1: the start was
  decided by the engine's own queue).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .records import END, ENGINE, FLOPS, HBM, NOTE, OPCODE, PSUM, READY, SBUF, START, WAITED  # noqa: F401

# Short names as in Neuron's profiler, long names for display.
ENGINE_LONG_NAMES = {"pe": "Tensor (PE)", "act": "Scalar (ACT)", "dve": "Vector (DVE)",
                     "pool": "GpSimd (POOL)", "host": "Host CPU", "host_link": "Host link (PCIe)"}
COMPUTE_ENGINES = ("pe", "act", "dve", "pool")


def engine_long_name(engine: str) -> str:
    if engine.startswith("dma"):
        return f"DMA queue {engine[3:]}"
    return ENGINE_LONG_NAMES.get(engine, engine)


@dataclass(frozen=True)
class Instruction:
    """One executed instruction."""
    index: int
    engine: str
    opcode: str
    start_ns: float
    end_ns: float
    ready_ns: float
    flops: float
    hbm_bytes: int
    sbuf_bytes: int
    psum_bytes: int
    waited_for: int
    note: str

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns

    @property
    def bytes(self) -> dict:
        return {"hbm": self.hbm_bytes, "sbuf": self.sbuf_bytes, "psum": self.psum_bytes}


class Timeline:
    """All instructions of one core's run, in issue order."""

    def __init__(self, engines: list[str], name: str = "core0"):
        self.engines = list(engines)            # engine id -> short name
        self.name = name                        # the core (a process in the Chrome trace)
        self.records: list[tuple] = []
        self.regions: list[tuple] = []          # (name, first record, end record): a launch, an op
        self.end_ns = 0.0                       # the last launch's tear-down end (CoreSpec.launch_end_ns)
        self._columns = None

    def region_records(self, name: str) -> list[int]:
        """Indices of the records of every region called `name` (or nested in it: 'name/...')."""
        out = []
        for region, first, end in self.regions:
            if region == name or region.startswith(name + "/"):
                out.extend(range(first, end))
        return sorted(set(out))

    def sub(self, indices) -> "Timeline":
        """A timeline of some records only (times unchanged), e.g. one region's."""
        t = Timeline(self.engines, self.name)
        t.records = [self.records[i] for i in indices]
        return t

    def shifted(self, base: int, origin: float) -> "Timeline":
        """The records from `base` on as a timeline of their own: times relative to `origin`,
        `waited` indices relative to `base` (-1 for an instruction before it)."""
        out = Timeline(list(self.engines), self.name)
        out.records = [(e, op, s - origin, end - origin, ready - origin, f, h, sb, ps,
                        (w - base if w >= base else -1) if w >= 0 else w, note)      # records.Record's fields
                       for e, op, s, end, ready, f, h, sb, ps, w, note in self.records[base:]]
        out.end_ns = max(self.end_ns - origin, 0.0)     # the last launch's tear-down, if it is among them
        return out

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> Instruction:
        r = self.records[i]
        return Instruction(i if i >= 0 else len(self.records) + i, self.engines[r[ENGINE]], *r[1:])

    def __iter__(self):
        for i in range(len(self.records)):
            yield self[i]

    def last(self, n: int = 10) -> list[Instruction]:
        return [self[i] for i in range(max(0, len(self) - n), len(self))]

    def columns(self) -> dict:
        """The timeline as NumPy arrays (engine ids, start, end, ready, flops, bytes per level)."""
        if self._columns is not None and self._columns["n"] == len(self.records):
            return self._columns
        n = len(self.records)
        if n:
            nums = np.array([(r[ENGINE], r[START], r[END], r[READY], r[FLOPS], r[HBM], r[SBUF],
                              r[PSUM], r[WAITED]) for r in self.records], dtype=np.float64)
        else:
            nums = np.zeros((0, 9))
        self._columns = {
            "n": n, "engine": nums[:, 0].astype(np.int64), "start": nums[:, 1], "end": nums[:, 2],
            "ready": nums[:, 3], "flops": nums[:, 4], "hbm": nums[:, 5], "sbuf": nums[:, 6],
            "psum": nums[:, 7], "waited_for": nums[:, 8].astype(np.int64),
            "opcode": [r[OPCODE] for r in self.records],
        }
        return self._columns

    @property
    def total_ns(self) -> float:
        """End of the run: when the last result is ready (or the last launch's tear-down ended)."""
        return max(max((r[READY] for r in self.records), default=0.0), self.end_ns)

    def busy_ns(self) -> dict:
        """Active time per engine (sum of end - start of its instructions)."""
        c = self.columns()
        busy = np.bincount(c["engine"], weights=c["end"] - c["start"], minlength=len(self.engines))
        return {e: float(busy[i]) for i, e in enumerate(self.engines)}

    def for_engine(self, engine: str) -> list[Instruction]:
        eid = self.engines.index(engine)
        return [self[i] for i, r in enumerate(self.records) if r[ENGINE] == eid]

    def explain(self, k: int, program) -> str:
        """Why record k (instruction k of `program`, launched alone) started when it did
        (`explain.why`: its queue, which dependency, a shared port, LoadStationary)."""
        from .explain import why
        return str(why(program, self, k))

    def same_schedule(self, other: "Timeline") -> bool:
        """True if both timelines hold the same instructions at the same times (notes ignored)."""
        if len(self) != len(other):
            return False
        return all(a[:NOTE] == b[:NOTE] for a, b in zip(self.records, other.records))

    def chrome_events(self, pid: int = 0) -> list[dict]:
        """This timeline's Chrome trace events: process `pid` (the core), a thread per engine,
        and a row of region spans above the engines."""
        events = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": self.name}}]
        used = sorted({r[ENGINE] for r in self.records})
        for eid in used:
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": eid,
                           "args": {"name": engine_long_name(self.engines[eid])}})
        for i, r in enumerate(self.records):
            args = {"index": i, "flops": r[FLOPS], "hbm_bytes": r[HBM], "sbuf_bytes": r[SBUF],
                    "psum_bytes": r[PSUM], "ready_us": r[READY] / 1e3, "waited_for": r[WAITED]}
            if r[NOTE]:
                args["note"] = r[NOTE]
            events.append({"name": r[OPCODE], "ph": "X", "pid": pid, "tid": r[ENGINE],
                           "ts": r[START] / 1e3, "dur": (r[END] - r[START]) / 1e3, "args": args})
        if self.regions:
            tid = len(self.engines)
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"name": "regions"}})
            for name, first, end in self.regions:
                if end > first:
                    begin = min(self.records[i][START] for i in range(first, end))
                    finish = max(self.records[i][READY] for i in range(first, end))
                    events.append({"name": name, "ph": "X", "pid": pid, "tid": tid,
                                   "ts": begin / 1e3, "dur": (finish - begin) / 1e3,
                                   "args": {"instructions": end - first}})
        return events

    def to_chrome_trace(self, path=None) -> dict:
        """Chrome trace-event JSON (opens in Perfetto or chrome://tracing); writes it if `path`."""
        return write_chrome_trace([self], path)


def write_chrome_trace(timelines: list, path=None) -> dict:
    """One Chrome trace of several cores' timelines (a process per core, a thread per engine)."""
    events = []
    for pid, timeline in enumerate(timelines):
        events.extend(timeline.chrome_events(pid))
    trace = {"traceEvents": events, "displayTimeUnit": "ns"}
    if path is not None:
        with open(path, "w") as f:
            json.dump(trace, f)
    return trace
