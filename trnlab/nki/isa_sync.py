"""`nki.isa`'s synchronisation and DMA-engine names (NKI 0.7): `dma_engine`, `core_barrier`, `sendrecv`,
`dma_compute`.

Names and parameters as AWS's pages (awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/
nki.isa.core_barrier.html, .sendrecv.html, .dma_compute.html, .dma_engine.html).

- `core_barrier(data, cores, engine)`: "a synchronization point where all specified NeuronCores must
  reach before any can proceed", for two cores sharing an HBM stack that wrote disjoint parts of
  `data`; "currently only cores=(0, 1) is supported". One instruction on GpSimd (or the engine given)
  that waits for this core's earlier writes to `data` and, on a core of a cluster, for the peer core
  of its pair (ranks 2k, 2k + 1; an nl.nc(2) launch's two cores) to reach its barrier (`hardware/system.py`). Cost ASSUMED: the
  engine's static overhead after the peer's semaphore (a 4-byte send/recv) arrives.
- `dma_compute(dst, srcs, reduce_op, scales)`: dst = the fp32 sum of the sources converted to dst's
  dtype, one DMA instruction (`hardware/system.py`; ASSUMED cost: one DMA of dst's bytes).
- `sendrecv(src, dst, send_to_rank, recv_from_rank)`: a collective of the two cores of a pair (the two
  cores of an `nl.nc(2)` launch, which `Device.run_spmd` runs together under a Cluster's rendezvous, or
  ranks 2k, 2k + 1 of a `trnlab.distributed.cluster.Cluster`), matched in program order like AWS's ("the Nth
  sendrecv on one rank rendezvous with the Nth sendrecv on the peer rank", nki.lnc.sendrecv), on CC
  engine cc0 (ASSUMED), costed as a send/recv of src's bytes over the cluster's topology. On a lone core
  (a one-core launch) it is refused by name (`CollectiveError`: the peer's program is not running).
"""
from __future__ import annotations

import enum

from trnlab.nki import issue
from trnlab.nki.errors import NKIError
from trnlab.nki.isa_binder import _engine, engine, op_name
from trnlab.nki.tensor import NkiTensor


class NotSimulatedError(NKIError):
    """An NKI name that trnlab knows but does not simulate; the message says why."""


class dma_engine(enum.Enum):
    """nki.isa.dma_engine: which DMA engine moves a sendrecv's data (accepted; see sendrecv)."""
    dma = "dma"                   # shared DMA with CoreBarrier synchronization (default)
    gpsimd_dma = "gpsimd_dma"     # GpSimd's internal DMA engine (SBUF to SBUF swaps at LNC=2)


def core_barrier(data: NkiTensor, cores, engine: engine = engine.gpsimd, name: str | None = None) -> None:
    """Barrier between the cores `cores` = (0, 1) over the shared tensor `data` [nki.isa.core_barrier]."""
    data = issue.tile(data, "data")
    if tuple(cores) != (0, 1):
        raise NKIError(f"core_barrier: only cores=(0, 1) is supported (nki.isa.core_barrier), got {tuple(cores)}")
    launch = issue.begin()
    launch.core.core_barrier(data=data.hw_view(), engine=_engine(engine, "pool"))


def sendrecv(src: NkiTensor, dst: NkiTensor, send_to_rank, recv_from_rank, pipe_id=None,
             dma_engine: dma_engine = dma_engine.dma, name: str | None = None) -> None:
    """Send src to core `send_to_rank`'s dst while receiving core `recv_from_rank`'s src into dst (SBUF
    tiles; ranks 0 / 1: the two physical cores of a logical core) [nki.isa.sendrecv]. Runs between the
    cores of an `nl.nc(2)` launch or on a `trnlab.distributed.cluster.Cluster` whose ranks 2k, 2k + 1
    are the pairs; `pipe_id` and
    `dma_engine` are accepted (AWS: pipe_id "remains ignored")."""
    src, dst = issue.tile(src, "src"), issue.tile(dst, "dst")
    launch = issue.begin()
    launch.core.sendrecv(dst=dst.hw_view(), src=src.hw_view(), send_to_rank=int(send_to_rank),
                         recv_from_rank=int(recv_from_rank))


def dma_compute(dst: NkiTensor, srcs, reduce_op=None, scales=None, unique_indices: bool = True,
                oob_mode=None, name: str | None = None) -> None:
    """dst = reduce_op(srcs[0] * scales[0], srcs[1] * scales[1], ...) computed in fp32 inside a DMA engine,
    converted to dst's dtype [nki.isa.dma_compute]. As AWS's page: only nl.add, every scale 1.0 (or None);
    srcs and dst in HBM or SBUF. Both orders of AWS's pages are read: ``(dst, srcs, reduce_op, scales)``
    and ``(dst, srcs, scales, reduce_op)``. Up to four sources (trnlab's limit: one DMA instruction);
    indirect (vector_offset) read-modify-write is refused."""
    if isinstance(reduce_op, (list, tuple)) and (scales is None or callable(scales) or isinstance(scales, str)):
        reduce_op, scales = scales, reduce_op          # the (dst, srcs, scales, reduce_op) order
    dst = issue.tile(dst, "dst")
    srcs = [issue.tile(s, "srcs") for s in (srcs if isinstance(srcs, (list, tuple)) else [srcs])]
    if not 1 <= len(srcs) <= 4:
        raise NKIError(f"dma_compute: trnlab issues 1 to 4 sources as one DMA, got {len(srcs)}")
    if _op_name(reduce_op) not in ("add", None):
        raise NKIError(f"dma_compute: reduce_op must be nl.add (the only operator nki.isa.dma_compute supports), "
                       f"got {reduce_op!r}")
    if scales is not None and (len(scales) != len(srcs) or any(float(s) != 1.0 for s in scales)):
        raise NKIError(f"dma_compute: every scale must be 1.0 (nki.isa.dma_compute), got {list(scales)}")
    if dst._gather is not None or any(s._gather is not None for s in srcs):
        raise NotSimulatedError("dma_compute with an indirect (vector_offset) operand: the read-modify-write "
                                "scatter / gather is not simulated")
    launch = issue.begin()
    views = [s.hw_view() for s in srcs] + [None] * (4 - len(srcs))
    launch.core.dma_compute(dst=dst.hw_view(), src0=views[0], src1=views[1], src2=views[2], src3=views[3])


def _op_name(op):
    if op is None:
        return None
    name = op_name(op)
    return name if isinstance(name, str) else getattr(name, "__name__", name)
