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
- `sendrecv` and `dma_compute` are refused by name (`NotSimulatedError`): sendrecv exchanges tiles
  between the two programs of an LNC=2 launch while they run, which trnlab's per-core replay cannot
  pair; dma_compute's DMA-engine arithmetic is not modelled (use `nisa.tensor_tensor` to add).
"""
from __future__ import annotations

import enum

from trnlab.nki import issue
from trnlab.nki.errors import NKIError
from trnlab.nki.isa_binder import _engine, engine
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


def dma_compute(dst: NkiTensor, srcs, scales=None, reduce_op=None, name: str | None = None, **kwargs) -> None:
    """dst = reduce_op(srcs[0] * scales[0], ...) computed in the DMA engines [nki.isa.dma_compute]: not simulated."""
    raise NotSimulatedError("nisa.dma_compute is not simulated: the DMA engines' arithmetic is not modelled; add the "
                            "tiles with nisa.tensor_tensor(op=nl.add) and move the result with nisa.dma_copy")
