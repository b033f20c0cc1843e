"""`nki.isa`'s random numbers (NKI 0.7): `rng`, `rand2`, `rand_get_state`, `rand_set_state`, `set_rng_seed`,
and `nki.language.rand` (a new tile of uniform values in [0, 1), nki.language.rand.html).

Names, parameters and rules as AWS's pages (awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/
generated/nki.isa.rng.html, .rand2.html, .rand_get_state.html, .rand_set_state.html,
.set_rng_seed.html). Each engine keeps a XORWOW generator state per compute lane for the rest of the
run; the hardware side, the state's layout and what is ASSUMED are in `trnlab/hardware/prng.py` and
`trnlab/hardware/system.py`. A kernel run twice in full mode with the same seed gets the same values.

Destination style only (NKI 0.7 has no functional form of these). `set_rng_seed` and `rand_set_state`
take no dst: they are plain functions (`nki.isa.SIGNATURES` holds instructions whose first parameter
is dst).
"""
from __future__ import annotations

import numpy as np

from trnlab.hardware.errors import DtypeError, ShapeMismatchError
from trnlab.nki import issue
from trnlab.nki.isa_binder import Operand, Tile, _engine, engine, instruction
from trnlab.nki.tensor import NkiTensor


def _engine_name(value) -> str:
    return _engine(value, "unknown")


@instruction(functional=None)
def rng(dst: Tile, engine: engine = engine.unknown, name: str | None = None) -> None:
    """dst = 32 random bits per element, the least significant bits kept (an int8/16/32 or uint8/16/32
    dst in SBUF or PSUM); Vector engine, or GpSimd (SBUF only) from NeuronCore-v3 [nki.isa.rng]."""
    dst = issue.tile(dst, "dst")
    launch = issue.begin()
    launch.core.rng(dst=dst.hw_view(), engine=_engine_name(engine))


@instruction(functional=None)
def rand2(dst: Tile, min: Operand, max: Operand, name: str | None = None) -> None:  # noqa: A002 (AWS's names)
    """dst = uniform random values in [min, max] (FP32 scalars or [P, 1] tiles), converted to dst's
    dtype; Vector engine, NeuronCore-v4 and newer [nki.isa.rand2]."""
    dst = issue.tile(dst, "dst")
    launch = issue.begin()
    low = min.hw_view() if isinstance(min, NkiTensor) else float(min)
    high = max.hw_view() if isinstance(max, NkiTensor) else float(max)
    launch.core.rand2(dst=dst.hw_view(), low=low, high=high)


@instruction(functional=None)
def rand_get_state(dst: Tile, engine: engine = engine.unknown, name: str | None = None) -> None:
    """dst's partition p = lane p's generator state (uint32; 6 words on GpSimd, 24 on Vector);
    NeuronCore-v3+ (Vector from v4) [nki.isa.rand_get_state]."""
    dst = issue.tile(dst, "dst")
    launch = issue.begin()
    launch.core.rand_get_state(dst=dst.hw_view(), engine=_engine_name(engine))


def rand_set_state(src_seeds: Tile, engine: engine = engine.unknown, name: str | None = None) -> None:
    """Lane p's generator state = src_seeds' partition p (uint32; 6 words on GpSimd, 24 on Vector);
    NeuronCore-v3+ (Vector from v4) [nki.isa.rand_set_state]."""
    src = issue.tile(src_seeds, "src_seeds")
    launch = issue.begin()
    launch.core.rand_set_state(src=src.hw_view(), engine=_engine_name(engine))


def set_rng_seed(src_seeds: Tile, name: str | None = None) -> None:
    """Seed the Vector engine's generators with the 32-bit value of a [1, 1] SBUF/PSUM tile
    [nki.isa.set_rng_seed]; the same instruction as nl.random_seed (it also seeds the stream
    nisa.dropout draws from)."""
    src = issue.tile(src_seeds, "src_seeds")
    if tuple(src.shape) != (1, 1):
        raise ShapeMismatchError(f"shape mismatch: set_rng_seed src_seeds must be a [1, 1] tile, got "
                                 f"{tuple(src.shape)}", value=tuple(src.shape), limit=(1, 1))
    if np.dtype(src.dtype).itemsize != 4:
        raise DtypeError(f"data type: set_rng_seed src_seeds must be a 32-bit value, got {np.dtype(src.dtype).name}",
                         value=np.dtype(src.dtype).name, limit="32-bit")
    launch = issue.begin()
    launch.core.set_rng_seed(seed=src.hw_view())


def rand(shape, dtype=np.float32, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    """nl.rand: a new tensor of `shape` on `buffer` (default SBUF) filled with values uniform in [0, 1)
    from the Vector engine's generators (seeded by nl.random_seed / nisa.set_rng_seed); an HBM tensor
    is filled through an SBUF tile and a DMA [nki.language.rand]."""
    from trnlab.nki import language as nl          # (language imports this module's names)
    target = nl.ndarray(shape, dtype, buffer=buffer, name=name)
    tile = target if target.buffer in ("sbuf", "psum") else nl.ndarray(shape, dtype, buffer=nl.sbuf)
    launch = issue.begin()
    launch.core.rand(dst=tile.hw_view())
    if tile is not target:
        from trnlab.nki.isa_dma import dma_copy
        dma_copy(dst=target, src=tile)
    return target
