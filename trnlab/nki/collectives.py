"""nki.collectives — collective communication between ranks, from inside a kernel.

Names and parameters as in AWS's ``nki.collectives`` (Trn2/Trn3 pages of the NKI API):

    import trnlab.nki.collectives as ncc
    group = ncc.ReplicaGroup([[0, 1]])
    ncc.all_reduce(srcs=[grad], dsts=[grad_sum], replica_group=group, op=nl.add)
    ncc.all_gather(srcs=[shard], dsts=[full], replica_group=group, collective_dim=0)
    ncc.reduce_scatter(srcs=[full], dsts=[shard], replica_group=group, collective_dim=0, op=nl.add)
    ncc.collective_permute(srcs=[x], dsts=[y], source_target_pairs=[(0, 1), (1, 0)])

Each (src, dst) pair becomes one instruction on the core's collective-communication engine ``cc0``
(`trnlab.hardware.collective`); the compute engines go on meanwhile. A kernel with collectives is
traced once into a program and run on every rank of a `trnlab.distributed.cluster.Cluster`, which
matches the ranks' collectives, costs them over the topology's links and moves the values.

NKI 0.7's variable-length collectives and the implicit ring permute:

    ncc.all_gather_v(srcs=[x], dsts=[y], replica_group=group, metadata_tensor=meta)   # counts in meta
    ncc.all_to_all_v(srcs=[x], dsts=[y], replica_group=group, metadata_tensor=meta)
    ncc.collective_permute_implicit(srcs_by_channel=[[x]], dsts_by_channel=[[y]], replica_group=group)
    ncc.collective_permute_implicit_reduce([[a]], [[b]], [[y]], group, op=nl.add)   # sends a + b
    ncc.all_to_all(srcs=[x], dsts=[y], replica_group=group, collective_dim=0)        # fixed-size pieces

(the counts are read from each rank's uint32 metadata tensor when the program runs; the layout is in
`trnlab.hardware.collective.variable_values`; each channel of the ring permute is one permute to the
next rank of the list, on CC engine channel mod 2 — ASSUMED: the channels share the core's two CC cores.)

Differences from AWS's module: srcs/dsts lists are issued pair by pair (no coalescing discount);
``priority`` is accepted and has no effect. ``rank_id()`` and
``collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group)`` return a register
holding, when the program runs, the rank (or the rank whose data the ring has brought after
``iteration_id`` steps: its own at 0, then its predecessors') — `nisa.register_store` writes it to memory,
``tensor.ap(scalar_offset=register)`` uses it as a dynamic offset; a loop bounded by it is refused: a
program is traced once for every rank.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from trnlab.hardware import collective as _hw  # noqa: F401  (the instructions on NeuronCore)
from trnlab.hardware import ops as _ops
from trnlab.nki import isa as _isa
from trnlab.nki import issue
from trnlab.nki.errors import NKIError


class rg_partition_op(Enum):
    """How `ReplicaGroup.from_partition_op` maps a rank to its rank list."""
    bitwise_and = "bitwise_and"
    div = "div"
    mod = "mod"


@dataclass
class ReplicaGroup:
    """The ranks a collective runs on, as a list of disjoint rank lists; the collective runs
    independently (and in parallel) within each list."""
    groups: list

    def __post_init__(self):
        self.groups = [[int(r) for r in g] for g in self.groups]

    @staticmethod
    def from_partition_op(world_size: int, op: rg_partition_op, operand: int) -> "ReplicaGroup":
        """Ranks [0, world_size) sharing ``op(rank, operand)`` form one list: ``div, 4`` over 8 ranks gives
        [[0..3], [4..7]], ``mod, 4`` gives [[0, 4], [1, 5], [2, 6], [3, 7]]; ``bitwise_and, 0`` all ranks."""
        key = {rg_partition_op.bitwise_and: lambda r: r & operand, rg_partition_op.div: lambda r: r // operand,
               rg_partition_op.mod: lambda r: r % operand}[rg_partition_op(op)]
        lists: dict[int, list] = {}
        for r in range(world_size):
            lists.setdefault(key(r), []).append(r)
        return ReplicaGroup([lists[k] for k in sorted(lists)])


def _groups(replica_group) -> list:
    return replica_group.groups if isinstance(replica_group, ReplicaGroup) else [list(g) for g in replica_group]


def _op(op) -> str:
    name = _isa.op_name(op)
    return name if isinstance(name, str) else _ops.op_name(name)


def _pairs(srcs, dsts, what: str):
    srcs, dsts = list(srcs), list(dsts)
    if len(srcs) != len(dsts) or not srcs:
        raise NKIError(f"{what}: srcs and dsts must be lists of the same non-zero length, got {len(srcs)} and "
                       f"{len(dsts)}")
    return [(issue.tile(s, "srcs"), issue.tile(d, "dsts")) for s, d in zip(srcs, dsts)]


def all_reduce(srcs, dsts, replica_group, op) -> None:
    """Every rank of a list gets the reduction (``op``: nl.add, nl.minimum, nl.maximum) of the list's srcs."""
    launch = issue.begin()
    for s, d in _pairs(srcs, dsts, "all_reduce"):
        launch.core.all_reduce(dst=d.hw_view(), src=s.hw_view(), replica_group=_groups(replica_group), op=_op(op))


def all_gather(srcs, dsts, replica_group, collective_dim: int = 0) -> None:
    """Every rank of a list gets the list's srcs concatenated along ``collective_dim`` (0 only)."""
    launch = issue.begin()
    for s, d in _pairs(srcs, dsts, "all_gather"):
        launch.core.all_gather(dst=d.hw_view(), src=s.hw_view(), replica_group=_groups(replica_group),
                               collective_dim=collective_dim)


def reduce_scatter(srcs, dsts, replica_group, collective_dim: int = 0, op=None) -> None:
    """Rank i of a list gets piece i (along ``collective_dim``, 0 only) of the reduction of the list's srcs."""
    if op is None:
        raise NKIError("reduce_scatter needs op= (nl.add, nl.minimum or nl.maximum)")
    launch = issue.begin()
    for s, d in _pairs(srcs, dsts, "reduce_scatter"):
        launch.core.reduce_scatter(dst=d.hw_view(), src=s.hw_view(), replica_group=_groups(replica_group),
                                   collective_dim=collective_dim, op=_op(op))


def collective_permute(srcs, dsts, source_target_pairs) -> None:
    """Each (source, target) pair sends source's src into target's dst (HBM tensors, one per list)."""
    pairs = _pairs(srcs, dsts, "collective_permute")
    if len(pairs) != 1:
        raise NKIError(f"collective_permute takes exactly one tensor in srcs and dsts, got {len(pairs)}")
    launch = issue.begin()
    s, d = pairs[0]
    launch.core.collective_permute(dst=d.hw_view(), src=s.hw_view(),
                                   source_target_pairs=[tuple(p) for p in source_target_pairs])


def _single(srcs, dsts, what: str):
    pairs = _pairs(srcs, dsts, what)
    if len(pairs) != 1:
        raise NKIError(f"{what} takes exactly one tensor in srcs and dsts (coalescing is not supported), got {len(pairs)}")
    return pairs[0]


def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known: bool = False,
                 has_rdispls: bool = False, priority=None, name=None) -> None:
    """Variable-length all-gather over flat element buffers: each rank's chunk src[send_displ :
    send_displ + send_count] lands in every rank's dst (counts in the uint32 metadata tensor, rows:
    send counts, send displacements, [recv counts], [recv displacements]; one column per rank)."""
    s, d = _single(srcs, dsts, "all_gather_v")
    meta = issue.tile(metadata_tensor, "metadata_tensor")
    launch = issue.begin()
    launch.core.all_gather_v(dst=d.hw_view(), src=s.hw_view(), metadata_tensor=meta.hw_view(),
                             replica_group=_groups(replica_group), recv_counts_known=recv_counts_known,
                             has_rdispls=has_rdispls)


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known: bool = False,
                 has_rdispls: bool = False, priority=None, name=None) -> None:
    """Variable-length all-to-all over flat element buffers: rank r sends src[send_displ[d] :
    send_displ[d] + send_count[d]] to rank d (counts in the uint32 metadata tensor, as all_gather_v's)."""
    s, d = _single(srcs, dsts, "all_to_all_v")
    meta = issue.tile(metadata_tensor, "metadata_tensor")
    launch = issue.begin()
    launch.core.all_to_all_v(dst=d.hw_view(), src=s.hw_view(), metadata_tensor=meta.hw_view(),
                             replica_group=_groups(replica_group), recv_counts_known=recv_counts_known,
                             has_rdispls=has_rdispls)


MAX_CHANNELS = 4      # "The maximum number of channels is 4" (nki.collectives.collective_permute_implicit)


def _channels(what: str, channel_ids, *by_channel) -> list:
    """The channels of an implicit ring permute, checked: one entry per channel in each list."""
    lists, channel_ids = [list(x) for x in by_channel], list(channel_ids)
    if len({len(x) for x in lists} | {len(channel_ids)}) != 1 or not channel_ids:
        raise NKIError(f"{what}: the by-channel lists and channel_ids must have the same non-zero length, got "
                       f"{[len(x) for x in lists] + [len(channel_ids)]}")
    if len(channel_ids) > MAX_CHANNELS or len(set(channel_ids)) != len(channel_ids):
        raise NKIError(f"{what}: at most {MAX_CHANNELS} distinct channels, got {channel_ids}")
    return channel_ids, lists


def _ring(replica_group) -> list:
    """(rank, next rank) of every rank of every rank list: the implicit permutes' ring."""
    return [(group[i], group[(i + 1) % len(group)]) for group in _groups(replica_group) for i in range(len(group))]


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=(0,),
                                priority=None, name=None) -> None:
    """Each rank sends its src to the next rank of its rank list and receives the previous rank's into dst
    (a ring), once per channel: ``srcs_by_channel[i]`` / ``dsts_by_channel[i]`` hold one tensor each."""
    channel_ids, (srcs_by_channel, dsts_by_channel) = _channels(
        "collective_permute_implicit", channel_ids, srcs_by_channel, dsts_by_channel)
    pairs = _ring(replica_group)
    for srcs, dsts, channel in zip(srcs_by_channel, dsts_by_channel, channel_ids):
        s, d = _single(srcs, dsts, "collective_permute_implicit")
        launch = issue.begin()
        launch.core.collective_permute(dst=d.hw_view(), src=s.hw_view(), source_target_pairs=pairs,
                                       stream=int(channel) % 2, implicit=True)


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group, op,
                                       channel_ids=(0,), priority=None, name=None) -> None:
    """collective_permute_implicit of op(srcs0[i], srcs1[i]) (nl.add, nl.minimum, nl.maximum): each rank
    sends the reduction of its two sources to the next rank of its list and receives the previous rank's
    into dst, once per channel [nki.collectives.collective_permute_implicit_reduce]. One CC instruction per
    channel, costed as a permute of one operand (ASSUMED: the reduction rides on the transfer)."""
    channel_ids, (srcs0_by_channel, srcs1_by_channel, dsts_by_channel) = _channels(
        "collective_permute_implicit_reduce", channel_ids, srcs0_by_channel, srcs1_by_channel, dsts_by_channel)
    pairs = _ring(replica_group)
    for srcs0, srcs1, dsts, channel in zip(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, channel_ids):
        s0, d = _single(srcs0, dsts, "collective_permute_implicit_reduce")
        s1, _ = _single(srcs1, dsts, "collective_permute_implicit_reduce")
        launch = issue.begin()
        launch.core.collective_permute_reduce(dst=d.hw_view(), src0=s0.hw_view(), src1=s1.hw_view(),
                                              source_target_pairs=pairs, op=_op(op), stream=int(channel) % 2)


def all_to_all(srcs, dsts, replica_group, collective_dim: int = 0, priority=None, name=None) -> None:
    """Piece j (of p along ``collective_dim``, 0 only) of each rank's src goes to the list's j-th rank, whose
    dst holds the pieces in rank-list order; HBM tensors only [nki.collectives.all_to_all]. Pairs are issued
    one by one (no coalescing), each one CC instruction costed as an all-gather of its buffer (ASSUMED, as
    all_to_all_v)."""
    launch = issue.begin()
    for s, d in _pairs(srcs, dsts, "all_to_all"):
        launch.core.all_to_all(dst=d.hw_view(), src=s.hw_view(), replica_group=_groups(replica_group),
                               collective_dim=collective_dim)


def rank_id(name=None):
    """The rank of the running core within the collective group, as a VirtualRegister (its value is known
    when the program runs on its rank, not while it is traced) [nki.collectives.rank_id]."""
    from trnlab.nki.isa_registers import VirtualRegister
    register = VirtualRegister()
    register.origin = "the rank id (nki.collectives.rank_id), known when the program runs on its rank"
    launch = issue.begin()
    launch.core.register_rank(register=register.id)
    return register


def collective_permute_implicit_current_processing_rank_id(iteration_id: int, replica_group, channel_id: int = 0,
                                                           num_channels: int = 1, name=None):
    """The rank whose data this rank processes in ring iteration ``iteration_id`` of
    collective_permute_implicit(_reduce) over ``replica_group``: its own rank at iteration 0, then the
    rank of the data received from its predecessors, going back around its rank list one rank per
    iteration [nki.collectives.collective_permute_implicit_current_processing_rank_id, v2.33]. A
    VirtualRegister, as rank_id's: known when the program runs on its rank. Every channel of trnlab's
    ring permute follows the same ring, so ``channel_id`` does not change the rank."""
    from trnlab.nki.isa_registers import VirtualRegister
    iteration = getattr(iteration_id, "value", iteration_id)         # a register known at trace time
    if isinstance(iteration, bool) or not isinstance(iteration, int) and not hasattr(iteration, "__index__"):
        raise NKIError(f"collective_permute_implicit_current_processing_rank_id: iteration_id is a Python int "
                       f"(or a loop index) known when the kernel is traced, got {iteration_id!r}")
    if int(iteration) < 0:
        raise NKIError(f"collective_permute_implicit_current_processing_rank_id: iteration_id counts ring steps "
                       f"from 0, got {int(iteration)}")
    groups = _groups(replica_group)
    register = VirtualRegister()
    register.origin = (f"the rank processed in ring iteration {int(iteration)} (nki.collectives."
                       f"collective_permute_implicit_current_processing_rank_id), known when the program runs")
    launch = issue.begin()
    launch.core.register_rank(register=register.id, ring=tuple(tuple(g) for g in groups), iteration=int(iteration))
    return register
