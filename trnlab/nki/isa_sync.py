"""`nki.isa`'s synchronisation and DMA-engine names (NKI 0.7): `dma_engine`, `core_barrier`, `sendrecv`,
`dma_compute`.

Names and parameters as AWS's pages (awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/
nki.isa.core_barrier.html, .sendrecv.html, .dma_compute.html, .dma_engine.html).

- `core_barrier(data, cores, engine)`: "a synchronization point where all specified NeuronCores must
  reach before any can proceed", for two cores sharing an HBM stack that wrote disjoint parts of
  `data`; "currently only cores=(0, 1) is supported". trnlab issues one GpSimd instruction (or the
  engine given) that reads `data`, so it waits for this core's earlier writes to `data` and later
  instructions that depend on it wait for the barrier. The other core's side is not simulated: a
  program runs on its core alone (an `nl.nc(2)` launch replays one program per core, independently),
  so the barrier does not wait for the peer (ASSUMED: the peer is not slower). Cost ASSUMED: the
  engine's static overhead (AWS publishes no figure).
- `dma_compute(dst, srcs, reduce_op, scales)`: dst = the fp32 sum of the sources converted to dst's
  dtype, one DMA instruction (`hardware/system.py`; ASSUMED cost: one DMA of dst's bytes).
- `sendrecv` is refused by name (`NotSimulatedError`): it exchanges tiles between the two programs of
  an LNC=2 launch while they run, which trnlab's per-core replay cannot pair.
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
    """Send src to the peer core's dst while receiving the peer's src into dst [nki.isa.sendrecv]: not simulated."""
    raise NotSimulatedError("nisa.sendrecv is not simulated: it exchanges tiles between the two physical cores of "
                            "an LNC=2 launch while both run, and trnlab replays each core's program on its own; "
                            "run the exchange as a collective (nki.collectives.collective_permute on a Cluster)")


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
