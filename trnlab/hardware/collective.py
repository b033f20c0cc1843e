"""Collective instructions on a NeuronCore's collective-communication (CC) engines.

On Trainium the compute engines do not move collective data themselves: "Collective communication
(CC) operations ... are executed autonomously from computation engines using dedicated CC cores";
an engine triggers the CC core (the compiler's PseudoTriggerCollective2 instruction) and later waits
for its completion semaphore, so compute and communication overlap; "the hardware provides two CC
cores per physical Neuron core", one per CC stream [CCO]. The data moves through DMA rings set up by
the runtime [CCO].

Here each core gets two engines, ``cc0`` and ``cc1`` (one per CC stream), next to pe/act/dve/pool and
the DMA queues. The collective instructions, named after ``nki.collectives`` [NKI-CC]:

    all_reduce(dst, src, replica_group, op)                        dst = op over the group of src
    all_gather(dst, src, replica_group, collective_dim=0)          dst = the group's srcs, concatenated
    reduce_scatter(dst, src, replica_group, collective_dim=0, op)  dst = my piece of the reduced srcs
    collective_permute(dst, src, source_target_pairs)              send src to my target, receive dst

are methods of `NeuronCore` (`CollectiveInstructions`, composed into it, so that tracing records them into programs and
replay issues them like any other instruction). Like every instruction they wait for their operands
(RAW on src, WAR/WAW on dst) and for their engine's queue; unlike the others they also wait for the
other ranks of their group: a *fabric* (`trnlab.distributed.cluster.Cluster`) holds the ranks, matches
the k-th collective of each rank of a group (program order, as NKI pairs its point-to-point messages),
starts it when every rank's operands are ready, costs it over the topology's links and writes the
values. A core outside a cluster runs collectives over one-rank groups only (a copy).

Rules checked (from the ``nki.collectives`` pages [NKI-CC]): src and dst both in HBM or both in SBUF
(never PSUM, never mixed); collective_permute on HBM only; reduce ops add / minimum / maximum;
``collective_dim`` 0 (or 1 for 2D SBUF tiles, as the all_gather page allows); the rank lists of a replica group do not overlap and contain this rank;
shapes: all_reduce keeps the shape, all_gather multiplies dim ``collective_dim`` by the group size,
reduce_scatter divides it. With LNC=2 ranks (a Cluster of ``lnc=2``), each physical core's collectives
meet the same-numbered core of the other ranks (`logical_rank`).

[CCO] AWS Neuron docs, "Compute-Communication Overlap in Neuron" (neuron-runtime/explore/compute-comm-overlap).
[NKI-CC] AWS Neuron docs, NKI API "nki.collectives" (all_reduce, all_gather, reduce_scatter,
collective_permute, ReplicaGroup).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import dependencies
from .errors import HardwareError
from .records import Record
from .shared_hbm import meet
from .tensor import Tensor, View

if TYPE_CHECKING:
    from .core import NeuronCore

CC_ENGINES = ("cc0", "cc1")   # two CC cores per physical NeuronCore [CCO]
OPCODES = ("all_reduce", "all_gather", "reduce_scatter", "collective_permute", "all_gather_v", "all_to_all_v",
           "sendrecv", "all_to_all", "collective_permute_reduce")
V_OPCODES = ("all_gather_v", "all_to_all_v")       # counts read from a metadata tensor at run time
REDUCE_OPS = ("add", "minimum", "maximum")


class CollectiveError(HardwareError):
    """A collective broke a rule of nki.collectives, or its ranks do not match."""
    rule = "collective"


@dataclass
class Request:
    """One rank's side of one collective, as the fabric sees it."""
    opcode: str
    rank: int
    members: tuple            # the ranks taking part (this rank's rank list, or the permute's ranks)
    src: View
    dst: View
    ready_ns: float           # this rank's operands and CC engine are ready
    attrs: dict = field(default_factory=dict)   # op, collective_dim, source_target_pairs
    core: object = None
    meta: View | None = None  # the counts and displacements of all_gather_v / all_to_all_v; the right
    #                           operand of collective_permute_reduce

    @property
    def nbytes(self) -> int:
        """The collective's size as nccl-tests and nccom-test count it: the all-reduce buffer, the
        all-gather output, the reduce-scatter input, the message of a permute (the v collectives:
        their whole buffers, ASSUMED — the counts are known only at run time)."""
        if self.opcode == "core_barrier":
            return 4                                 # a semaphore (ASSUMED)
        return self.dst.nbytes if self.opcode in ("all_gather", "all_gather_v") else self.src.nbytes


def _as_view(x, what: str, opcode: str) -> View:
    if isinstance(x, Tensor):
        return x.full
    if isinstance(x, View):
        return x
    raise CollectiveError(f"collective: {opcode} {what} must be a tensor or a view of one, got {type(x).__name__}",
                          value=type(x).__name__, limit="Tensor | View")


def _describing(core) -> bool:
    """Is `core` only checking and describing instructions (while a kernel is traced, or a program is
    described for a compiled replay), not running them? Then there is no rank and no fabric."""
    return core.name == "trace" or hasattr(core, "_describe")


def logical_rank(core) -> tuple[int, int, int]:
    """(rank, lane, lnc) of `core` in its fabric: the fabric numbers physical cores ("slots"); with LNC=k
    the k cores of logical rank r are slots r*k .. r*k + k - 1, lane c being the core's place in its
    logical core (nl.program_id(0) of an LNC launch). Replica groups and rank_id name logical ranks; the
    collectives of lane c meet the lane-c cores of the other ranks (ASSUMED: each physical core of an
    LNC=2 rank runs its own collectives, with the same-numbered core of every other rank)."""
    slot = int(getattr(core, "_cc_rank", 0) or 0)
    lnc = int(getattr(core, "_cc_lnc", 1) or 1)
    return slot // lnc, slot % lnc, lnc


def _slots(ranks, core) -> tuple:
    """The fabric slots (physical cores) of logical `ranks` in `core`'s lane."""
    _, lane, lnc = logical_rank(core)
    return tuple(int(r) * lnc + lane for r in ranks)


def _rank_list(replica_group, core: NeuronCore, opcode: str) -> tuple:
    """This core's rank list of `replica_group` (while tracing, with no rank yet: the first list), as
    the fabric slots of its lane (the logical ranks themselves at LNC=1)."""
    lists = [tuple(int(r) for r in group) for group in getattr(replica_group, "groups", replica_group)]
    if not lists or not all(lists):
        raise CollectiveError(f"collective: {opcode} needs a replica group of non-empty rank lists, got {lists}",
                              value=lists, limit="non-empty lists")
    rank = logical_rank(core)[0] if hasattr(core, "_cc_rank") else None
    if rank is None:
        rank = lists[0][0] if _describing(core) else 0
    seen: dict[int, int] = {}
    for i, group in enumerate(lists):
        for r in group:
            if r in seen:
                raise CollectiveError(f"collective: replica group rank lists must not overlap; rank {r} is in "
                                      f"lists {seen[r]} and {i} of {lists}", value=lists, limit="disjoint lists")
            seen[r] = i
    if rank not in seen:
        raise CollectiveError(f"collective: {opcode} on rank {rank}, which is in no rank list of {lists}",
                              value=rank, limit=lists)
    return _slots(lists[seen[rank]], core)


def _check(opcode: str, src: View, dst: View, members: tuple, collective_dim: int = 0, op: str | None = None,
           implicit: bool = False) -> None:
    sk, dk = src.tensor.kind, dst.tensor.kind
    if "psum" in (sk, dk) or sk != dk:
        raise CollectiveError(f"operand memory: {opcode} needs src and dst both in HBM or both in SBUF, got "
                              f"{sk.upper()} -> {dk.upper()}", value=(sk, dk), limit="HBM/HBM or SBUF/SBUF")
    # the explicit permute: "Tensors must reside on HBM. SBUF is not currently supported for collective_permute"
    # (nki.collectives.collective_permute); the implicit ring permutes' pages state no such rule, and AWS's
    # NKI Library passes them SBUF tiles (experimental/collectives/fg_allgather.py)
    if opcode in ("collective_permute", "all_to_all") and sk != "hbm" and not implicit:
        raise CollectiveError(f"operand memory: {opcode} moves HBM tensors only, got {sk.upper()}",
                              value=sk, limit="hbm")
    if src.tensor.dtype != dst.tensor.dtype:
        raise CollectiveError(f"data type: {opcode} does not convert: src {src.tensor.dtype}, dst {dst.tensor.dtype}",
                              value=src.tensor.dtype, limit=dst.tensor.dtype)
    if op is not None and op not in REDUCE_OPS:
        raise CollectiveError(f"collective: {opcode} reduces with one of {REDUCE_OPS}, got {op!r}",
                              value=op, limit=REDUCE_OPS)
    s, d = tuple(src.shape), tuple(dst.shape)
    # "Currently only 0 is supported for HBM tensors. For SBUF tensors, 0 or 1 is supported as SBUF
    # collectives currently only operate on 2D tensors with a single free dimension" (nki.collectives.all_gather)
    if collective_dim != 0 and not (collective_dim == 1 and sk == "sbuf" and len(s) == 2):
        raise CollectiveError(f"collective: {opcode} splits along collective_dim 0 (or 1, for 2D SBUF tiles), got "
                              f"{collective_dim} on a {len(s)}D {sk.upper()} tensor", value=collective_dim, limit=0)
    p, k = len(members), int(collective_dim)
    scaled = lambda f: s[:k] + (f(s[k]),) + s[k + 1:] if s else s   # noqa: E731
    want = {"all_reduce": s, "collective_permute": s, "all_to_all": s,
            "all_gather": scaled(lambda n: n * p), "reduce_scatter": scaled(lambda n: n // p)}[opcode]
    if opcode in ("reduce_scatter", "all_to_all") and s and s[k] % p:
        raise CollectiveError(f"shape mismatch: {opcode} over {p} ranks needs dim {k} of src {s} divisible "
                              f"by {p}", value=s[k], limit=p)
    if d != want:
        raise CollectiveError(f"shape mismatch: {opcode} over {p} ranks of src {s} needs dst {want}, got {d}",
                              value=d, limit=want)


def _cc_engine(core: NeuronCore, stream: int) -> int:
    """The engine id of CC stream `stream` on `core` (the engines are added on first use; their
    queues are kept apart from the compute and DMA queues, whose positions the core relies on)."""
    if not 0 <= int(stream) < len(CC_ENGINES):
        raise CollectiveError(f"engine: CC stream {stream} does not exist; a core has {len(CC_ENGINES)} CC cores",
                              value=stream, limit=len(CC_ENGINES))
    if "cc0" not in core.engines:
        base = len(core.engines)
        core.engines.extend(CC_ENGINES)
        if core.timeline.engines is not core.engines:
            core.timeline.engines.extend(CC_ENGINES)
        core._cc_base = base
        core._cc_free = [0.0] * len(CC_ENGINES)
    return core._cc_base + int(stream)


def issue_collective(core: NeuronCore, opcode: str, src, dst, members: tuple, attrs: dict, stream: int = 0,
                     meta: View | None = None) -> int:
    """Schedule one collective on `core`'s CC engine `stream`; the fabric (if any) decides when the
    group can start and how long it takes, and writes the values. Returns the record index."""
    eid = _cc_engine(core, stream)
    reads = (src,) if meta is None else (src, meta)
    describe = getattr(core, "_describe", None)
    if describe is not None:
        # a describing core (the compiled timing replay's): duration 0 marks the instruction as one the
        # compiled replay cannot time (it depends on the other ranks), so such programs are replayed
        # instruction by instruction, where the fabric times each collective
        from .records import ISSUE, ComputeIssue
        ref = core._ref
        return describe(ComputeIssue(ISSUE, eid, opcode, 0.0, tuple(ref(v) for v in reads), (ref(dst),), 0.0, 0, 0,
                                     False, None))
    # the trigger sits in the core's instruction streams: never before the launch's first engine is free
    start = max(core._cc_free[int(stream)], min(core._free))
    start, waited = dependencies.wait_reads(reads, start, -1)
    start, waited, _ = dependencies.wait_write(dst, start, waited)
    fabric = getattr(core, "_cc_fabric", None)
    rank = getattr(core, "_cc_rank", members[0] if members else 0)
    request = Request(opcode, rank, tuple(members), src, dst, start, dict(attrs), core, meta)
    if fabric is not None:
        begin, end = meet(core, fabric, request)
    elif len(members) <= 1 or _describing(core):
        # alone (or while a kernel is traced: rules only): a one-rank collective is a copy
        begin, end = start, start + dst.nbytes * 1e9 / core.hbm_bandwidth
        if core.full and len(members) <= 1 and opcode in V_OPCODES:
            variable_values(opcode, [request])
        elif core.full and len(members) <= 1 and opcode == "collective_permute_reduce":
            permute_reduce_values([request])
        elif core.full and len(members) <= 1:
            src.check_initialized()
            value = np.asarray(src.values())
            dst.write(np.reshape(value, dst.shape).astype(dst.tensor.dtype, copy=False))
    else:
        raise CollectiveError(f"collective: {opcode} over ranks {list(members)} on a core that belongs to no "
                              f"cluster; run the kernel on all ranks with nki.multi_rank_simulate (a program: "
                              f"trnlab.distributed.cluster.Cluster)",
                              value=len(members), limit=1)
    idx = len(core._records)
    dependencies.record_reads(reads, end, idx)
    dependencies.record_write(dst, end, idx)
    core._cc_free[int(stream)] = end
    nbytes = request.nbytes
    hbm = 2 * nbytes if src.tensor.kind == "hbm" else 0
    sbuf = 2 * nbytes if src.tensor.kind == "sbuf" else 0
    core._records.append(Record(eid, opcode, begin, end, end, 0.0, hbm, sbuf, 0,
                                waited if begin == start else -1, core.note))
    if end > core._now:
        core._now = end
    return idx


# -- the instructions, as NeuronCore methods ----------------------------------------------------------
def all_reduce(self: NeuronCore, dst, src, replica_group, op="add", stream: int = 0) -> int:
    """dst = src reduced with `op` (add, minimum, maximum) over this rank's list of `replica_group`,
    on CC engine `stream` (nki.collectives.all_reduce)."""
    src, dst = _as_view(src, "src", "all_reduce"), _as_view(dst, "dst", "all_reduce")
    op = getattr(op, "name", op)
    members = _rank_list(replica_group, self, "all_reduce")
    _check("all_reduce", src, dst, members, op=op)
    return issue_collective(self, "all_reduce", src, dst, members, {"op": op}, stream)


def all_gather(self: NeuronCore, dst, src, replica_group, collective_dim: int = 0, stream: int = 0) -> int:
    """dst = the srcs of this rank's list, concatenated along dim 0 in rank-list order."""
    src, dst = _as_view(src, "src", "all_gather"), _as_view(dst, "dst", "all_gather")
    members = _rank_list(replica_group, self, "all_gather")
    _check("all_gather", src, dst, members, collective_dim)
    return issue_collective(self, "all_gather", src, dst, members, {"collective_dim": collective_dim}, stream)


def reduce_scatter(self: NeuronCore, dst, src, replica_group, collective_dim: int = 0, op="add",
                   stream: int = 0) -> int:
    """dst = piece i (of p along dim 0) of the srcs reduced with `op`, i = this rank's place in its list."""
    src, dst = _as_view(src, "src", "reduce_scatter"), _as_view(dst, "dst", "reduce_scatter")
    op = getattr(op, "name", op)
    members = _rank_list(replica_group, self, "reduce_scatter")
    _check("reduce_scatter", src, dst, members, collective_dim, op=op)
    return issue_collective(self, "reduce_scatter", src, dst, members,
                            {"collective_dim": collective_dim, "op": op}, stream)


def collective_permute(self: NeuronCore, dst, src, source_target_pairs, stream: int = 0, implicit: bool = False) -> int:
    """Send src to the target of every (source = this rank, target) pair; receive dst from the source of
    the pair whose target is this rank (dst is left as it is if none) — send/recv. `implicit`: a ring
    permute of nki.collectives.collective_permute_implicit (SBUF tiles allowed)."""
    src, dst = _as_view(src, "src", "collective_permute"), _as_view(dst, "dst", "collective_permute")
    pairs = [(int(s), int(t)) for s, t in source_target_pairs]
    members = tuple(sorted({r for pair in pairs for r in pair}))
    rank = logical_rank(self)[0] if hasattr(self, "_cc_rank") else (members[0] if members and _describing(self) else 0)
    if rank not in members:
        raise CollectiveError(f"collective: collective_permute on rank {rank}, which is in no pair of {pairs}",
                              value=rank, limit=pairs)
    targets = [t for _, t in pairs]
    if len(set(targets)) != len(targets):
        raise CollectiveError(f"collective: collective_permute receives at most one message per rank; targets "
                              f"{targets}", value=targets, limit="distinct targets")
    _check("collective_permute", src, dst, members, implicit=implicit)
    slot_pairs = [(a, b) for a, b in zip(_slots([s for s, _ in pairs], self), _slots(targets, self))]
    return issue_collective(self, "collective_permute", src, dst, _slots(members, self),
                            {"source_target_pairs": slot_pairs}, stream)


def all_to_all(self: NeuronCore, dst, src, replica_group, collective_dim: int = 0, stream: int = 0) -> int:
    """Piece j (of p along dim 0) of src goes to the list's j-th rank, and dst holds the pieces this rank
    receives in rank-list order; HBM tensors, dst of src's shape [nki.collectives.all_to_all]."""
    src, dst = _as_view(src, "src", "all_to_all"), _as_view(dst, "dst", "all_to_all")
    members = _rank_list(replica_group, self, "all_to_all")
    _check("all_to_all", src, dst, members, collective_dim)
    return issue_collective(self, "all_to_all", src, dst, members, {"collective_dim": collective_dim}, stream)


def all_to_all_values(requests: list) -> None:
    """Full mode: dst of the list's j-th rank = piece j of every rank's src, in rank-list order (the
    values themselves, any dtype: nothing is computed)."""
    p = len(requests)
    pieces = []
    for r in requests:
        r.src.check_initialized()
        pieces.append(np.split(np.asarray(r.src.values()).reshape(r.src.shape), p, axis=0))
    for j, receiver in enumerate(requests):
        value = np.concatenate([pieces[i][j] for i in range(p)], axis=0)
        receiver.dst.write(value.reshape(receiver.dst.shape).astype(receiver.dst.tensor.dtype, copy=False))


def collective_permute_reduce(self: NeuronCore, dst, src0, src1, source_target_pairs, op="add",
                              stream: int = 0) -> int:
    """collective_permute of op(src0, src1): each source sends the reduction of its two operands to its
    target (nki.collectives.collective_permute_implicit_reduce's ring, one instruction per channel)."""
    src0 = _as_view(src0, "src0", "collective_permute_reduce")
    src1 = _as_view(src1, "src1", "collective_permute_reduce")
    dst = _as_view(dst, "dst", "collective_permute_reduce")
    op = getattr(op, "name", op)
    pairs = [(int(s), int(t)) for s, t in source_target_pairs]
    members = tuple(sorted({r for pair in pairs for r in pair}))
    if tuple(src1.shape) != tuple(src0.shape) or src1.tensor.dtype != src0.tensor.dtype:
        raise CollectiveError(f"shape mismatch: collective_permute_reduce operands {tuple(src0.shape)} "
                              f"{src0.tensor.dtype} and {tuple(src1.shape)} {src1.tensor.dtype} must match",
                              value=tuple(src1.shape), limit=tuple(src0.shape))
    _check("collective_permute", src0, dst, members, op=op, implicit=True)     # always a ring (implicit)
    _check("collective_permute", src1, dst, members, implicit=True)
    slot_pairs = [(a, b) for a, b in zip(_slots([s for s, _ in pairs], self), _slots([t for _, t in pairs], self))]
    return issue_collective(self, "collective_permute_reduce", src0, dst, _slots(members, self),
                            {"source_target_pairs": slot_pairs, "op": op}, stream, meta=src1)


def permute_reduce_values(requests: list) -> None:
    """Full mode: each pair's target dst = op(src0, src1) of its source, in fp32 like every reduction."""
    reduce = {"add": np.add, "minimum": np.minimum, "maximum": np.maximum}[requests[0].attrs["op"]]
    by_rank = {r.rank: r for r in requests}
    for source, target in requests[0].attrs["source_target_pairs"]:
        sender, receiver = by_rank[source], by_rank[target]
        sender.src.check_initialized()
        sender.meta.check_initialized()
        value = reduce(np.asarray(sender.src.values(), np.float32), np.asarray(sender.meta.values(), np.float32))
        receiver.dst.write(value.reshape(receiver.dst.shape).astype(receiver.dst.tensor.dtype, copy=False))


# -- the variable-length collectives (counts in a metadata tensor, read at run time) --------------------
def _check_variable(opcode: str, src: View, dst: View, meta: View, members: tuple, rows: int) -> None:
    if src.tensor.kind != "hbm" or dst.tensor.kind != "hbm":
        raise CollectiveError(f"operand memory: {opcode} takes HBM tensors, got {src.tensor.kind.upper()} -> "
                              f"{dst.tensor.kind.upper()}", value=(src.tensor.kind, dst.tensor.kind), limit="hbm")
    if src.tensor.dtype != dst.tensor.dtype:
        raise CollectiveError(f"data type: {opcode} does not convert: src {src.tensor.dtype}, dst {dst.tensor.dtype}",
                              value=src.tensor.dtype, limit=dst.tensor.dtype)
    if meta.tensor.kind == "psum" or np.dtype(meta.tensor.dtype) != np.uint32:
        raise CollectiveError(f"collective: {opcode} metadata_tensor must be uint32 in HBM or SBUF, got "
                              f"{np.dtype(meta.tensor.dtype).name} in {meta.tensor.kind.upper()}",
                              value=np.dtype(meta.tensor.dtype).name, limit="uint32")
    width = max(members) + 1
    if len(meta.shape) != 2 or meta.shape[0] < rows or meta.shape[1] < width:
        raise CollectiveError(f"shape mismatch: {opcode} metadata_tensor {tuple(meta.shape)} needs {rows} rows "
                              f"(send counts, send displacements{', recv counts' if rows > 2 else ''}"
                              f"{', recv displacements' if rows > 3 else ''}) of one column per rank (>= {width})",
                              value=tuple(meta.shape), limit=(rows, width))


def _variable(self: NeuronCore, opcode: str, dst, src, metadata_tensor, replica_group, recv_counts_known: bool,
              has_rdispls: bool, stream: int) -> int:
    src, dst = _as_view(src, "src", opcode), _as_view(dst, "dst", opcode)
    meta = _as_view(metadata_tensor, "metadata_tensor", opcode)
    members = _rank_list(replica_group, self, opcode)
    rows = 2 + (1 if recv_counts_known or has_rdispls else 0) + (1 if has_rdispls else 0)
    _check_variable(opcode, src, dst, meta, members, rows)
    attrs = {"recv_counts_known": bool(recv_counts_known), "has_rdispls": bool(has_rdispls)}
    return issue_collective(self, opcode, src, dst, members, attrs, stream, meta)


def all_gather_v(self: NeuronCore, dst, src, metadata_tensor, replica_group, recv_counts_known: bool = False,
                 has_rdispls: bool = False, stream: int = 0) -> int:
    """Every rank of the list gets every rank's chunk src[send_displ : send_displ + send_count] (flat
    elements; metadata rows 0 and 1, first column) in its slot of dst [nki.collectives.all_gather_v]."""
    return _variable(self, "all_gather_v", dst, src, metadata_tensor, replica_group, recv_counts_known,
                     has_rdispls, stream)


def all_to_all_v(self: NeuronCore, dst, src, metadata_tensor, replica_group, recv_counts_known: bool = False,
                 has_rdispls: bool = False, stream: int = 0) -> int:
    """Each rank sends src[send_displ[d] : send_displ[d] + send_count[d]] (flat elements) to rank d of the
    list [nki.collectives.all_to_all_v]."""
    return _variable(self, "all_to_all_v", dst, src, metadata_tensor, replica_group, recv_counts_known,
                     has_rdispls, stream)


def variable_values(opcode: str, requests: list) -> None:
    """Full mode: the values of all_gather_v / all_to_all_v over `requests` (one per rank, rank-list order).

    Flat element buffers (row-major). Metadata columns are indexed by rank; row 0 the send counts, row 1
    the send displacements (all_gather_v reads the first column only: one chunk broadcast to every rank),
    row 2 the receive counts (checked against what arrives), row 3 the receive displacements. Without
    receive displacements, rank j's dst holds one equal slot per source (dst elements / ranks) and the
    chunk from the list's i-th rank starts at i * slot (the all_gather_v page; ASSUMED for all_to_all_v).
    Elements no chunk reaches keep their values (garbage if never written)."""
    p = len(requests)
    ranks = [logical_rank(r.core)[0] if r.core is not None else r.rank for r in requests]   # metadata columns
    srcs, metas = [], []
    for r in requests:
        r.src.check_initialized()
        r.meta.check_initialized()
        srcs.append(np.asarray(r.src.values()).reshape(-1))
        metas.append(np.asarray(r.meta.values()).astype(np.int64).reshape(r.meta.shape))
    attrs = requests[0].attrs
    for j, receiver in enumerate(requests):
        dst = receiver.dst
        flat = np.array(dst.values() if dst.tensor.data is not None else np.zeros(dst.shape), copy=True).reshape(-1)
        undefined = dst.undefined()
        garbage = np.zeros(flat.size, bool) if undefined is None else np.asarray(undefined).reshape(-1).copy()
        slot = flat.size // p
        meta_j = metas[j]
        for i, sender in enumerate(requests):
            column = 0 if opcode == "all_gather_v" else ranks[j]
            count, displ = int(metas[i][0, column]), int(metas[i][1, column])
            if displ < 0 or count < 0 or displ + count > srcs[i].size:
                raise CollectiveError(f"collective: {opcode} rank {ranks[i]} sends elements {displ}..{displ + count} "
                                      f"of a source of {srcs[i].size}", value=displ + count, limit=srcs[i].size)
            if attrs.get("recv_counts_known") or attrs.get("has_rdispls"):
                expected = int(meta_j[2, ranks[i]])
                if expected != count:
                    raise CollectiveError(f"collective: {opcode} rank {ranks[j]} expects {expected} elements from "
                                          f"rank {ranks[i]}, which sends {count}", value=count, limit=expected)
            at = int(meta_j[3, ranks[i]]) if attrs.get("has_rdispls") else i * slot
            if at < 0 or at + count > flat.size:
                raise CollectiveError(f"collective: {opcode} rank {ranks[j]} receives elements {at}..{at + count} "
                                      f"into a dst of {flat.size}", value=at + count, limit=flat.size)
            flat[at:at + count] = srcs[i][displ:displ + count]
            garbage[at:at + count] = False
        dst.write(flat.reshape(dst.shape).astype(dst.tensor.dtype, copy=False))
        if garbage.any():
            dst.set_poison(garbage.reshape(dst.shape), f"{opcode}: elements of {dst.tensor.name!r} no chunk reached")


# -- sendrecv: the two physical cores of a logical core exchange tiles (nki.isa.sendrecv) --------------
def sendrecv(self: NeuronCore, dst, src, send_to_rank: int, recv_from_rank: int, stream: int = 0) -> int:
    """Send src (SBUF) to core `send_to_rank`'s dst while receiving core `recv_from_rank`'s src into dst;
    ranks 0 and 1 are the two cores of this rank's pair (ranks 2k, 2k + 1 of the cluster) [nki.isa.sendrecv].
    Paired with the peer's sendrecv in program order, like any collective; NeuronCore-v3 and newer."""
    src, dst = _as_view(src, "src", "sendrecv"), _as_view(dst, "dst", "sendrecv")
    gen = int(str(self.spec.generation).lower().lstrip("v") or 3)
    if gen < 3:
        raise CollectiveError(f"collective: sendrecv needs NeuronCore-v3 or newer (logical cores), this core is "
                              f"NeuronCore-v{gen}", value=f"v{gen}", limit="v3+")
    if src.tensor.kind != "sbuf" or dst.tensor.kind != "sbuf":
        raise CollectiveError(f"operand memory: sendrecv moves SBUF tiles, got {src.tensor.kind.upper()} -> "
                              f"{dst.tensor.kind.upper()}", value=(src.tensor.kind, dst.tensor.kind), limit="sbuf")
    if tuple(src.shape) != tuple(dst.shape) or src.tensor.dtype != dst.tensor.dtype:
        raise CollectiveError(f"shape mismatch: sendrecv src {tuple(src.shape)} {src.tensor.dtype} and dst "
                              f"{tuple(dst.shape)} {dst.tensor.dtype} must match", value=tuple(dst.shape),
                              limit=tuple(src.shape))
    for what, r in (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank)):
        if int(r) not in (0, 1):
            raise CollectiveError(f"collective: sendrecv {what} must be 0 or 1 (the two cores of a logical core), "
                                  f"got {r}", value=r, limit=(0, 1))
    rank = getattr(self, "_cc_rank", 0)
    base = rank - rank % 2
    attrs = {"send_to_rank": int(send_to_rank), "recv_from_rank": int(recv_from_rank)}
    return issue_collective(self, "sendrecv", src, dst, (base, base + 1), attrs, stream)


def sendrecv_values(requests: list) -> None:
    """Full mode: each core's dst = the src of the core it receives from, which must send to it."""
    by_local = {r.rank % 2: r for r in requests}
    for r in requests:
        source = by_local[r.attrs["recv_from_rank"]]
        if source.attrs["send_to_rank"] != r.rank % 2:
            raise CollectiveError(f"collective: sendrecv on rank {r.rank} receives from core "
                                  f"{r.attrs['recv_from_rank']}, which sends to core {source.attrs['send_to_rank']}",
                                  value=source.attrs["send_to_rank"], limit=r.rank % 2)
        # a DMA from one core's SBUF into the other's: garbage (memory never written, e.g. the padding
        # partitions of a tile) moves with the data, as a dma_copy within the chip moves it; a later read
        # that matters (a store to HBM) is the error, naming where it came from
        garbage = source.src.undefined()
        r.dst.write(np.array(source.src.values()).reshape(r.dst.shape))
        if garbage is not None:
            src = source.src
            origin = src.tensor.poison_origin or (f"sendrecv from core {source.rank % 2}: {src.tensor.name!r}"
                                                  f"[{src._index_str()}] read never-written")
            r.dst.set_poison(garbage.reshape(r.dst.shape), origin)


class CollectiveInstructions:
    """NeuronCore's collective instructions (composed into `core.NeuronCore`)."""
    all_reduce = all_reduce
    all_gather = all_gather
    reduce_scatter = reduce_scatter
    collective_permute = collective_permute
    all_gather_v = all_gather_v
    all_to_all_v = all_to_all_v
    all_to_all = all_to_all
    collective_permute_reduce = collective_permute_reduce
    sendrecv = sendrecv
