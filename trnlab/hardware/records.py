"""The records that cross the simulator's modules, named in one place.

Three kinds, each a `NamedTuple` (a tuple: cheap to build, and a hot loop may unpack it):

- **descriptions** — what an instruction asks of the engines, as the trace-time describer
  (`describe.DescribingCore`) writes it: engine, duration, operands as (buffer id, box), bytes,
  ports. One class per kind of issue; the first field (`kind`) says which.
- **resolved ops** — a description with its dependencies resolved to nodes (`replay_timing._resolve`):
  what the timing replay and the list schedule run. Stored as plain tuples of the class's fields
  (the replay's loop unpacks one per instruction, and Python unpacks an exact tuple fastest);
  `as_op` names one.
- **the timeline record** (`Record`) — one per executed instruction (`timeline.Timeline`).

A program keeps its descriptions as plain tuples of the same fields (loop stamping rebuilds plain
tuples; a rewrite slices one, `allocate._issue_on_tiles`); `as_description` gives one its class
back, and `read_refs` / `write_refs` read either.
"""
from __future__ import annotations

from typing import NamedTuple

# -- descriptions: the `kind` field of each ------------------------------------------------------
ISSUE, MATMUL, PE_ISSUE, DMA, SEED, PRINT = range(6)


class ComputeIssue(NamedTuple):
    """A Vector / Scalar / GpSimd instruction (or a collective: duration 0, timed by the fabric)."""
    kind: int                   # ISSUE
    engine: int                 # engine id (PE, ACT, DVE, POOL, ...)
    opcode: str
    duration: float             # ns the engine is busy (before the Vector engine's hidden overhead)
    reads: tuple                # ((buffer id, box), ...)
    writes: tuple
    flops: float
    sbuf: int                   # bytes touched in SBUF
    psum: int                   # ... and in PSUM
    sbuf_port: bool             # needs the shared SBUF port (NeuronCore-v2 Vector / GpSimd)
    psum_port: object           # None, "core", or ((buffer id, first byte, end byte), ...) per PSUM bank
    hidden: float = 0.0         # ns of static overhead hidden when the Vector engine issues back to back


class MatmulIssue(NamedTuple):
    """nc_matmul on the Tensor engine."""
    kind: int                   # MATMUL
    dst: tuple                  # (buffer id, box)
    stationary: tuple
    moving: tuple
    busy: float                 # ns the PE array is busy
    latency: float              # ns after the start the result is in PSUM
    load: float                 # ns LoadStationary takes
    flops: float
    sbuf: int
    psum: int
    tiles: int = 0              # tiling mode: the 32 x 32 PE blocks it occupies (engines.tensor_tiled)


class TensorIssue(NamedTuple):
    """A Tensor-engine instruction other than nc_matmul (nc_transpose, the MX and double-row
    matmuls): it always loads its stationary tile and joins no accumulation group."""
    kind: int                   # PE_ISSUE
    opcode: str
    stationary: tuple
    reads: tuple
    dst: tuple
    busy: float
    latency: float
    load: float
    flops: float
    sbuf: int
    psum: int
    tiles: int = 0              # tiling mode (nc_matmul_mx row tiles): the PE blocks it occupies


class DmaIssue(NamedTuple):
    """A DMA on a queue (`queue` None: the queue free first, chosen at run time)."""
    kind: int                   # DMA
    opcode: str
    dst: tuple
    reads: tuple
    nbytes: int
    queue: int | None
    fixed_ns: float             # the fixed latency before the engines begin
    cycles: float               # ns the transfer itself takes
    engine_ns: float            # ns of the core's shared DMA engines it occupies
    hbm_bytes: int              # bytes through the HBM channel
    sbuf: int


class SeedIssue(NamedTuple):
    """set_rng_seed: a tiny Vector instruction."""
    kind: int                   # SEED
    reads: tuple
    duration: float


class PrintIssue(NamedTuple):
    """device_print: takes no engine time; prints at its place in the run."""
    kind: int                   # PRINT
    prefix: str
    text: str


DESCRIPTIONS = (ComputeIssue, MatmulIssue, TensorIssue, DmaIssue, SeedIssue, PrintIssue)
_new_tuple = tuple.__new__


def as_description(d: tuple):
    """`d` as its description class (a plain tuple of the same fields is converted)."""
    cls = DESCRIPTIONS[d[0]]
    if type(d) is cls:
        return d
    if len(d) == len(cls._fields):
        return _new_tuple(cls, d)                   # (NamedTuple._make without its checks)
    return cls(*d)                                  # (defaults fill the rest)


def read_refs(d: tuple) -> tuple:
    """The (buffer id, box) operands a description (or a plain tuple of its fields) reads."""
    kind = d[0]
    if kind == MATMUL:
        return (d[2], d[3])                         # stationary, moving
    if kind == PE_ISSUE:
        return (d[2],) + d[3]                       # stationary + reads
    if kind == ISSUE or kind == DMA:
        return d[4] if kind == ISSUE else d[3]      # reads
    if kind == SEED:
        return d[1]
    return ()


def write_refs(d: tuple) -> tuple:
    """The (buffer id, box) operands a description (or a plain tuple of its fields) writes."""
    kind = d[0]
    if kind == ISSUE:
        return d[5]                                 # writes
    if kind == MATMUL:
        return (d[1],)                              # dst
    if kind == PE_ISSUE:
        return (d[4],)
    if kind == DMA:
        return (d[2],)
    return ()


# -- resolved ops: the `kind` field of each --------------------------------------------------------
LATEST_OP, ENGINE_OP, PE_OP, DMA_OP, SEED_OP, PRINT_OP = range(6)


class LatestOp(NamedTuple):
    """A node standing for the latest of several (a merged record, a freed tile's accesses)."""
    kind: int                   # LATEST_OP
    node: int
    inputs: tuple


class EngineOp(NamedTuple):
    """A Vector / Scalar / GpSimd instruction, its dependencies resolved."""
    kind: int                   # ENGINE_OP
    engine: int
    duration: float
    deps: tuple                 # nodes it waits for (RAW, WAR, WAW), in the order the core examines them
    ports: tuple                # shared ports: "sbuf", "psum", ("psum", bank)
    node: int                   # its end
    opcode: str
    flops: float
    sbuf: int
    psum: int
    note: str
    hidden: float


class PeOp(NamedTuple):
    """A Tensor-engine instruction, its dependencies resolved."""
    kind: int                   # PE_OP
    pre: tuple                  # nodes it waits for before its stationary load (RAW on moving)
    new: bool                   # loads a new stationary tile
    stationary_deps: tuple      # nodes the stationary tile waits for (RAW)
    post: tuple                 # nodes it waits for after (WAR / WAW on dst)
    group: tuple                # the PSUM accumulation group it joins (its result is ready no earlier)
    busy: float
    latency: float
    load: float
    end_node: int
    ready_node: int
    opcode: str
    flops: float
    sbuf: int
    psum: int
    note: str
    tiles: int = 0              # tiling mode: the PE blocks it occupies (MatmulIssue.tiles)


class DmaOp(NamedTuple):
    """A DMA, its dependencies resolved."""
    kind: int                   # DMA_OP
    deps: tuple
    queue: int | None
    fixed_ns: float
    cycles: float
    engine_ns: float
    hbm_bytes: int
    node: int
    opcode: str
    sbuf: int
    note: str


class SeedOp(NamedTuple):
    kind: int                   # SEED_OP
    deps: tuple
    duration: float
    node: int
    note: str


class PrintOp(NamedTuple):
    kind: int                   # PRINT_OP
    prefix: str
    text: str


OPS = (LatestOp, EngineOp, PeOp, DmaOp, SeedOp, PrintOp)


def as_op(op: tuple):
    """A resolved op (a plain tuple) as its named class."""
    return OPS[op[0]]._make(op)


def op_deps(op: tuple) -> tuple:
    """Every node a resolved instruction waits for (by the fields' positions above)."""
    kind = op[0]
    if kind == PE_OP:
        return op[1] + op[3] + op[4] + op[5]        # pre, stationary_deps, post, group
    if kind == ENGINE_OP:
        return op[3]                                # deps
    if kind == DMA_OP or kind == SEED_OP:
        return op[1]                                # deps
    return ()


def op_nodes(op: tuple) -> tuple:
    """The nodes a resolved instruction produces: its end (a PE op's end and ready)."""
    kind = op[0]
    if kind == PE_OP:
        return (op[9], op[10])                      # end_node, ready_node
    if kind == ENGINE_OP:
        return (op[5],)                             # node
    if kind == DMA_OP:
        return (op[7],)
    if kind == SEED_OP:
        return (op[3],)
    return ()


# -- the timeline record ------------------------------------------------------------------------
class Record(NamedTuple):
    """One executed instruction, as the timeline stores it. The hot loops (`NeuronCore._append`,
    `replay_timing.run_timing`) append plain tuples of these fields in this order — building a
    NamedTuple costs more than the rest of a replayed instruction's bookkeeping."""
    engine: int                 # engine id: the timeline's `engines[engine]`
    opcode: str
    start: float                # ns: starts on its engine
    end: float                  # ns: the engine is free again
    ready: float                # ns: its results are visible to other instructions
    flops: float
    hbm: int                    # bytes moved through HBM
    sbuf: int
    psum: int
    waited: int                 # the instruction whose completion decided the start (-1: its queue)
    note: str                   # where it was issued (source line, region)


ENGINE, OPCODE, START, END, READY, FLOPS, HBM, SBUF, PSUM, WAITED, NOTE = range(len(Record._fields))
