"""Programs: what a kernel (or a whole compiled model) becomes before a NeuronCore runs it.

As on the real stack, nothing runs eagerly on the chip. Tracing an `nki.jit` kernel records every
instruction it issues into a `Program` — plain data, like micrograd's graph:

- ``buffers``: the buffer table — one row per tensor the program touches (kernel arguments and
  outputs in HBM, tiles in SBUF and PSUM) with memory, shape, dtype, partition axis and, after
  allocation (`allocate.py`), its byte offset; ``first``/``last`` are the indices of the first and
  last instruction that touch it (its live range);
- ``instructions``: in program order, each with its opcode (the `NeuronCore` method, named as in
  ``nki.isa``), the engine it ran on when traced, its operands (``name -> Access``: a region of a
  buffer, NumPy indexing), its other attributes, the kernel source line and the region;
- ``inputs`` / ``outputs``: which buffers the caller's arguments fill and which come back.

A program prints as a listing per engine (like the instruction streams of a NEFF), saves and loads
as versioned JSON (never pickle), and runs on any core of a `Device` again and again without Python
tracing (`replay.py`).

Everything that changes how a program is scheduled, allocated or run is a declared field and is
saved (the directives: ``no_reorder``, ``inlined_regions``, ``allocation_mode``, ``blocks``, ``spec``,
``matmul_dtypes``). What is only computed from the program — its compiled timing form, replay plans,
values plan, read-only inputs — lives in one place, ``program.derived`` (`Derived`), under one rule:
it is valid while the program object, its instruction list, its buffer list and its revision are
the ones it was computed for; whoever changes a program in place calls ``program.changed()``.

    program = nki.trace(kernel, a, b)        # Program
    print(program)                           # the listing
    program.save("kernel.json"); Program.load("kernel.json")
"""
from __future__ import annotations

import dataclasses
import json
import math
import threading
import weakref
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

import numpy as np

from . import dtypes

FORMAT = "trnlab.program"
VERSION = 3          # 2: the directives (no_reorder, inlined_regions, blocks, spec, matmul_dtypes); 3: loops
READABLE = (1, 2, 3) # versions this trnlab loads (a version 1 program has the default directives, 1-2 no loops)
# a program without loops is saved as version 2, so a trnlab that reads only 1-2 loads it; one with
# loops needs a reader that runs them

# operands an instruction writes; every other operand is read (nc_matmul may also read its dst)
WRITES = ("dst", "reduce_res", "dst_scale", "dst_idx")   # dst_scale: quantize_mx (hardware/mx.py); dst_idx: nc_match_replace8
# opcodes whose dst keeps the values they do not overwrite (a predicated copy, a shuffle's kept
# partitions, ...): their dst is read as well as written (hardware/select.py, gather.py)
READS_DST = frozenset(("tensor_copy_predicated", "nc_stream_shuffle", "nonzero_with_count", "topk",
                       "tensor_indirect"))     # tensor_indirect: a scatter keeps the columns it does not write


@dataclass
class Buffer:
    """One row of the buffer table."""
    id: int
    name: str
    memory: str                      # "hbm" | "sbuf" | "psum"
    shape: tuple
    dtype: str                       # dtypes.name(...)
    partition_axis: int | None = None
    role: str = "internal"           # "input" | "output" | "internal" (HBM scratch, tiles)
    first: int = -1                  # first and last instruction touching it (-1: never touched)
    last: int = -1
    offset: int | None = None        # bytes per partition from the start of SBUF/PSUM (allocated)
    placement: dict | None = None    # direct allocation asked by the kernel (nki.compiler mod_alloc)
    data: np.ndarray | None = None   # constant HBM contents (nl.shared_constant), else None
    alias_of: int | None = None      # HBM: another shape of that buffer's bytes (tensor.reshape)
    shared: bool = False             # HBM: nl.shared_hbm, one tensor for both cores of LNC=2 (shared_hbm.py)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * dtypes.as_dtype(self.dtype).itemsize

    @property
    def partition_bytes(self) -> int:
        """Bytes per partition (on chip); all bytes for HBM."""
        if self.partition_axis is None:
            return self.nbytes
        return self.nbytes // max(int(self.shape[self.partition_axis]), 1)

    @property
    def on_chip(self) -> bool:
        return self.memory in ("sbuf", "psum")


@dataclass
class Access:
    """A region of a buffer: ``buffers[buffer][index]`` with NumPy indexing (None: all of it)."""
    buffer: int
    index: object = None             # None | tuple of int / slice / integer ndarray


@dataclass
class Instruction:
    opcode: str                      # NeuronCore method / nki.isa name: "nc_matmul", "dma_copy", ...
    engine: str                      # its engine: "pe", "act", "dve", "pool", "dma3" ("dma": the queue
                                     # free first, chosen when the program runs)
    operands: dict                   # parameter name -> Access
    attrs: dict = field(default_factory=dict)   # the other parameters (numbers, names, arrays)
    line: str = ""                   # the kernel source line that issued it ("file.py:12 (kernel)")
    region: str = ""                 # the region (compiled op, kernel call) it belongs to
    source: tuple | None = None      # (path, line number, function) of that line
    # how the checked instruction asks to be scheduled (describe.py; not saved: re-derived on load)
    issue: tuple | None = field(default=None, repr=False, compare=False)

    def reads(self) -> list[Access]:
        return [a for name, a in self.operands.items() if name not in WRITES]

    def writes(self) -> list[Access]:
        return [a for name, a in self.operands.items() if name in WRITES]


@dataclass
class Loop:
    """A loop the device runs (`nl.dynamic_range`, `nl.fori_loop` with a register bound): its body,
    instructions ``begin .. end-1``, is in the program once; each bound is an int or the id of the
    register holding it (``{"register": id}``), read when the program runs; ``index`` is the register
    the body reads the iteration value from (`dynamic_loops.py` runs it). A branch of `nl.if_else` is a
    loop of 0 or 1 trips without an index: ``kind="if"`` runs ``range(0, t)``, ``kind="else"``
    ``range(t, 1)``, t the register holding (cond != 0)."""
    begin: int
    end: int
    start: object                    # int | {"register": id}
    stop: object                     # int | {"register": id}
    step: int = 1
    index: int | None = None         # the iterator's register id
    line: str = ""                   # the kernel line of the loop
    source: tuple | None = None      # (path, line number, function)
    kind: str = "for"                # "for": start..stop by step; "while": while register `start` != 0;
                                     # "if" / "else": a branch (run as "for": range(0, t) / range(t, 1))
    next: int | None = None          # "while": the register the body returns (moved into `start` after it)

    def bound(self, value) -> str:
        return f"reg{value['register']}" if isinstance(value, dict) else str(value)

    def __str__(self) -> str:
        if self.kind == "while":
            then = "" if self.next in (None, self.start["register"]) else f", then reg{self.start['register']} = reg{self.next}"
            where = f"  # {self.line}" if self.line else ""
            return (f"while {self.bound(self.start)} != 0{then}: instructions {self.begin}..{self.end - 1}{where}")
        where = f"  # {self.line}" if self.line else ""
        if self.kind == "if":
            return f"if {self.bound(self.stop)} != 0: instructions {self.begin}..{self.end - 1}{where}"
        if self.kind == "else":
            return f"else ({self.bound(self.start)} == 0): instructions {self.begin}..{self.end - 1}{where}"
        index = "" if self.index is None else f"reg{self.index} in "
        return (f"for {index}range({self.bound(self.start)}, {self.bound(self.stop)}, {self.step}): "
                f"instructions {self.begin}..{self.end - 1}{where}")


@dataclass
class Program:
    """A traced kernel: instructions + buffer table. See the module docstring."""
    name: str
    target: str                                  # the CoreSpec name it was traced for
    buffers: list = field(default_factory=list)
    instructions: list = field(default_factory=list)
    inputs: list = field(default_factory=list)   # [(argument name, buffer id)] in call order
    outputs: object = None                       # buffer ids in the kernel's return structure
    allocated: bool = False
    schedule: str = "program"                    # the instruction order chosen ("program" | "list")
    # directives: they change how the program is scheduled, allocated or costed (all saved)
    no_reorder: bool = False                     # a loop said ncc.no_reorder(): keep the traced order
    inlined_regions: frozenset = frozenset()     # regions of kernels inlined into a caller (nki.jit)
    allocation_mode: str = "ring"                # how the allocator picks a tile's bytes (allocate.MODES)
    blocks: dict = field(default_factory=dict)   # tile buffer id -> (block tensor id, block index)
                                                 # (allocate.split_block_tensors)
    spec: object = None                          # the CoreSpec traced for (None: the preset `target` names)
    matmul_dtypes: set = field(default_factory=set)   # input dtypes of its matmuls (MFU's peak)
    loops: list = field(default_factory=list)    # the loops the device runs (`Loop`), by begin
    # the CoreSpec the instructions' `issue` descriptions were made for (like them, not saved:
    # described again on the first run of a loaded program)
    issue_spec: object = field(default=None, repr=False, compare=False)
    revision: int = field(default=0, repr=False, compare=False)   # bumped by `changed`

    # -- derived caches ------------------------------------------------------------------------
    @property
    def derived(self) -> "Derived":
        """What is computed from this program (see `Derived`): a fresh, empty cache when the
        instructions, buffers or revision are not those it was computed for, or it belongs to
        another program (a `copy.copy` shares the attribute, not the cache)."""
        d = self.__dict__.get("_derived")
        if (d is None or d.owner() is not self or d.instructions is not self.instructions
                or d.buffers is not self.buffers or d.revision != self.revision):
            d = Derived(self)
            self.__dict__["_derived"] = d
        return d

    def changed(self) -> None:
        """Say that the program changed in place (instructions, operands, buffers, directives):
        every derived cache is dropped."""
        self.revision += 1
        self.__dict__.pop("_derived", None)

    def read_live_ranges(self, keep_offsets: bool = False) -> None:
        """Read every buffer's live range (first and last instruction, every memory) off the
        instructions as they now are, after a pass that rewrote or reordered them; offsets cleared
        unless `keep_offsets`."""
        for b in self.buffers:
            b.first, b.last = -1, -1
            if not keep_offsets:
                b.offset = None
        for k, ins in enumerate(self.instructions):
            for a in ins.operands.values():
                b = self.buffers[a.buffer]
                if b.first < 0:
                    b.first = k
                b.last = k

    # -- summaries ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.instructions)

    def opcode_counts(self) -> Counter:
        return Counter(i.opcode for i in self.instructions)

    def engine_counts(self) -> Counter:
        return Counter(_engine_group(i.engine) for i in self.instructions)

    def regions(self) -> list[str]:
        """Region names in order of first appearance."""
        return list(dict.fromkeys(i.region for i in self.instructions if i.region))

    def peak_bytes(self, memory: str) -> int:
        """The most bytes per partition of `memory` live at any instruction (after allocation: the
        highest byte any tile of it reaches)."""
        if self.allocated:
            return max((b.offset + b.partition_bytes for b in self.buffers
                        if b.memory == memory and b.offset is not None), default=0)
        events = []
        for b in self.buffers:
            if b.memory == memory and b.first >= 0:
                events += [(b.first, 0, b.partition_bytes), (b.last, 1, -b.partition_bytes)]
        live = peak = 0
        for _, _, delta in sorted(events):
            live += delta
            peak = max(peak, live)
        return peak

    def live_at(self, index: int, memory: str | None = None) -> list[Buffer]:
        """The on-chip buffers live at instruction `index`."""
        return [b for b in self.buffers if b.on_chip and b.first <= index <= b.last
                and (memory is None or b.memory == memory)]

    # -- the listing -------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (f"Program({self.name!r}, target={self.target}, {len(self.instructions)} instructions, "
                f"{len(self.buffers)} buffers)")

    def __str__(self) -> str:
        return self.listing()

    def listing(self, limit: int = 20, by_engine: bool = True) -> str:
        """A readable listing: the buffer table, then the instructions (per engine, as the separate
        instruction streams of a NEFF), at most `limit` per stream (None: all)."""
        lines = [f"program {self.name}  target={self.target}  {len(self.instructions)} instructions  "
                 f"schedule={self.schedule}"]
        lines.append("buffers:")
        for b in self.buffers:
            where = b.memory.upper()
            if b.offset is not None:
                where += f"@{b.offset}"
            live = f"[{b.first}..{b.last}]" if b.first >= 0 else "[unused]"
            par = "" if b.partition_axis is None else f" par={b.partition_axis}"
            lines.append(f"  %{b.id:<4} {b.name:<18} {where:<12} {_shape(b.shape):<16} {b.dtype:<9}"
                         f"{par} {b.role:<8} live {live}")
        if self.loops:
            lines.append("loops (run by the device, their bodies listed once):")
            lines += [f"  L{n} {loop}" for n, loop in enumerate(self.loops)]
        streams: dict[str, list[int]] = {}
        for k, ins in enumerate(self.instructions):
            key = _engine_group(ins.engine) if by_engine else "all"
            streams.setdefault(key, []).append(k)
        for engine in sorted(streams, key=_engine_order):
            indices = streams[engine]
            lines.append(f"{engine} ({len(indices)} instructions):")
            shown = indices if limit is None else indices[:limit]
            for k in shown:
                lines.append("  " + self.format_instruction(k))
            if len(shown) < len(indices):
                lines.append(f"  ... {len(indices) - len(shown)} more")
        return "\n".join(lines)

    def format_instruction(self, k: int) -> str:
        ins = self.instructions[k]
        ops = ", ".join(f"{name}=%{a.buffer}{_index(a.index)}" for name, a in ins.operands.items())
        attrs = ", ".join(f"{name}={_attr(v)}" for name, v in ins.attrs.items() if v is not None)
        where = f"  # {ins.line}" if ins.line else ""
        region = f" <{ins.region}>" if ins.region else ""
        inside = "".join(f" [L{n}]" for n, loop in enumerate(self.loops) if loop.begin <= k < loop.end)
        return f"{k:>6}{inside} {ins.opcode}({ops}{', ' if attrs and ops else ''}{attrs}){region}{where}"

    # -- JSON ----------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "format": FORMAT, "version": VERSION if self.loops else 2, "name": self.name, "target": self.target,
            "allocated": self.allocated, "schedule": self.schedule,
            "no_reorder": self.no_reorder, "inlined_regions": sorted(self.inlined_regions),
            **({"allocation_mode": self.allocation_mode} if self.allocation_mode != "ring" else {}),
            "blocks": [[t, b, list(block)] for t, (b, block) in sorted(self.blocks.items())],
            "spec": _encode_spec(self.spec, self.target),
            "matmul_dtypes": sorted(dtypes.name(d) for d in self.matmul_dtypes),
            "loops": [{k: _encode(v) for k, v in dataclasses.asdict(loop).items()} for loop in self.loops],
            "inputs": [[n, b] for n, b in self.inputs], "outputs": _encode(self.outputs),
            "buffers": [{"id": b.id, "name": b.name, "memory": b.memory, "shape": list(b.shape),
                         "dtype": b.dtype, "partition_axis": b.partition_axis, "role": b.role,
                         "first": b.first, "last": b.last, "offset": b.offset,
                         "placement": b.placement, "data": _encode(b.data), "alias_of": b.alias_of,
                         **({"shared": True} if b.shared else {})}
                        for b in self.buffers],
            "instructions": [{"opcode": i.opcode, "engine": i.engine, "line": i.line,
                              "region": i.region, "source": _encode(i.source),
                              "operands": {k: [a.buffer, _encode(a.index)] for k, a in i.operands.items()},
                              "attrs": {k: _encode(v) for k, v in i.attrs.items()}}
                             for i in self.instructions],
        }

    @classmethod
    def from_json(cls, doc: dict) -> "Program":
        if doc.get("format") != FORMAT:
            raise ValueError(f"not a trnlab program: format {doc.get('format')!r}, expected {FORMAT!r}")
        if doc.get("version") not in READABLE:
            raise ValueError(f"program format version {doc.get('version')!r}; this trnlab reads "
                             f"versions {', '.join(map(str, READABLE))}")
        buffers = [Buffer(id=b["id"], name=b["name"], memory=b["memory"], shape=tuple(b["shape"]),
                          dtype=b["dtype"], partition_axis=b["partition_axis"], role=b["role"],
                          first=b["first"], last=b["last"], offset=b["offset"],
                          placement=b.get("placement"), data=_decode(b.get("data")),
                          alias_of=b.get("alias_of"), shared=bool(b.get("shared", False)))
                   for b in doc["buffers"]]
        instructions = [Instruction(opcode=i["opcode"], engine=i["engine"], line=i["line"],
                                    region=i["region"], source=_decode(i.get("source")),
                                    operands={k: Access(a[0], _decode(a[1])) for k, a in i["operands"].items()},
                                    attrs={k: _decode(v) for k, v in i["attrs"].items()})
                        for i in doc["instructions"]]
        return cls(name=doc["name"], target=doc["target"], buffers=buffers, instructions=instructions,
                   inputs=[(n, b) for n, b in doc["inputs"]], outputs=_decode(doc["outputs"]),
                   allocated=doc["allocated"], schedule=doc.get("schedule", "program"),
                   no_reorder=doc.get("no_reorder", False),
                   inlined_regions=frozenset(doc.get("inlined_regions", ())),
                   allocation_mode=doc.get("allocation_mode", "ring"),
                   blocks={t: (b, tuple(block)) for t, b, block in doc.get("blocks", ())},
                   spec=_decode_spec(doc.get("spec"), doc["target"]),
                   matmul_dtypes={dtypes.as_dtype(d) for d in doc.get("matmul_dtypes", ())},
                   loops=[Loop(**{k: _decode(v) for k, v in loop.items()}) for loop in doc.get("loops", ())])

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> "Program":
        return cls.from_json(json.loads(text))

    def save(self, path) -> None:
        with open(path, "w") as f:
            f.write(self.dumps())

    @classmethod
    def load(cls, path) -> "Program":
        with open(path) as f:
            return cls.loads(f.read())


class Derived:
    """A program's derived caches, by name: what `replay_timing.compiled_for` ("compiled": CoreSpec ->
    Compiled), `replay.plan` ("plan"), `replay` ("hbm", "read_only_inputs"), the values replay
    ("values_ok", "values_plan") and the loop stamper's notes to the allocator ("stamped_tiles")
    computed from it. One invalidation rule (`Program.derived`): the cache belongs to one program
    object, instruction list, buffer list and revision; any other is an empty cache."""
    __slots__ = ("owner", "instructions", "buffers", "revision", "items")

    def __init__(self, program: "Program"):
        self.owner = weakref.ref(program)
        self.instructions, self.buffers = program.instructions, program.buffers
        self.revision = program.revision
        self.items: dict = {}

    def get(self, name: str, default=None):
        return self.items.get(name, default)

    def put(self, name: str, value):
        self.items[name] = value
        return value

    def pop(self, name: str, default=None):
        return self.items.pop(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self.items


class ProgramCache:
    """Traced programs by key (shapes, dtypes, core, ...), as compiled NEFFs are kept per input
    shape: the least recently used beyond `size` is dropped. Safe to share between threads."""

    def __init__(self, size: int):
        self.size = size
        self._programs: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key) -> "Program | None":
        with self._lock:
            program = self._programs.get(key)
            if program is not None:
                self._programs.move_to_end(key)
            return program

    def put(self, key, program: "Program") -> None:
        with self._lock:
            self._programs[key] = program
            while len(self._programs) > self.size:
                self._programs.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._programs.clear()

    def __len__(self) -> int:
        return len(self._programs)


def locate_instruction(error: Exception, program: Program, k: int) -> Exception:
    """Name the instruction (and its kernel line) where `error` arose: an overflow found by the
    allocation, or a replay failure such as a read of a tile never written (only values tell)."""
    ins = program.instructions[k] if k < len(program.instructions) else None
    if ins is None or getattr(error, "_nki_located", False):
        return error
    error._nki_located = True
    where = f"\n  at instruction {k} ({ins.opcode}) of program {program.name!r}"
    if ins.source:
        import linecache
        path, lineno, function = ins.source
        error.kernel_location = (path, lineno)
        where += f"\n  in kernel line {path}:{lineno} ({function}): {linecache.getline(path, lineno).strip()}"
    if error.args and isinstance(error.args[0], str):
        error.args = (error.args[0] + where,) + tuple(error.args[1:])
    return error


# -- helpers ------------------------------------------------------------------------------------
def _encode_spec(spec, target: str):
    """The traced CoreSpec as JSON: None when it is the preset `target` names (the usual case)."""
    if spec is None:
        return None
    from .presets import CORES
    if any(preset == spec and preset.name == target for preset in CORES.values()):
        return None
    return {k: _encode(v) for k, v in dataclasses.asdict(spec).items()}


def _decode_spec(doc, target: str):
    from .presets import CoreSpec
    if doc is None:
        return None
    return CoreSpec(**{k: _decode(v) for k, v in doc.items()})


def _engine_group(engine: str) -> str:
    return "dma" if engine.startswith("dma") else engine


def _engine_order(engine: str) -> int:
    order = ["pe", "act", "dve", "pool", "dma"]
    return order.index(engine) if engine in order else len(order)


def _shape(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _index(index) -> str:
    if index is None:
        return ""
    parts = []
    for i in (index if isinstance(index, tuple) else (index,)):
        if isinstance(i, slice):
            step = "" if i.step in (None, 1) else f":{i.step}"
            parts.append(f"{'' if i.start is None else i.start}:{'' if i.stop is None else i.stop}{step}")
        elif isinstance(i, np.ndarray):
            parts.append(f"<{i.size} indices>")
        else:
            parts.append(str(i))
    return "[" + ", ".join(parts) + "]"


def _attr(value) -> str:
    if isinstance(value, np.ndarray):
        return f"<array {value.shape} {value.dtype}>"
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value)


def _encode(value):
    """JSON for attribute values, indices and output structures (tagged where JSON has no type)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if np.isfinite(v) else {"float": repr(v)}
    if isinstance(value, slice):
        return {"slice": [value.start, value.stop, value.step]}
    if isinstance(value, np.ndarray):
        name = dtypes.name(value.dtype) if value.dtype != bool else "bool"
        flat = value.astype(np.float32) if name == "bfloat16" else value
        return {"array": _encode_list(flat.reshape(-1).tolist()), "dtype": name, "shape": list(value.shape)}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {"dict": [[_encode(k), _encode(v)] for k, v in value.items()]}
    raise TypeError(f"cannot save {type(value).__name__} {value!r} in a program")


def _encode_list(values: list) -> list:
    return [v if not isinstance(v, float) or np.isfinite(v) else repr(v) for v in values]


def _decode(value):
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "float" in value:
        return float(value["float"])
    if "slice" in value:
        return slice(*value["slice"])
    if "tuple" in value:
        return tuple(_decode(v) for v in value["tuple"])
    if "dict" in value:
        return {_decode(k): _decode(v) for k, v in value["dict"]}
    if "array" in value:
        name = value["dtype"]
        items = [float(v) if isinstance(v, str) else v for v in value["array"]]
        dt = bool if name == "bool" else dtypes.as_dtype(name)
        if name == "bfloat16":
            return np.asarray(items, np.float32).astype(dt).reshape(value["shape"])
        return np.asarray(items, dtype=dt).reshape(value["shape"])
    raise ValueError(f"unknown encoded value {value!r}")
