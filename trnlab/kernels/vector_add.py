"""Vector addition three ways: the first lesson of a Trainium course (what a DMA costs), as trnlab.nki kernels.

Stanford CS149's Trainium assignment (2025, trn2; https://github.com/stanford-cs149/asst4-trainium2,
README part 1) starts from c = a + b on a 1-D vector and speeds it up by changing only the tile shape,
with `@nki.compiler.skip_middle_end_transformations` (no compiler reordering: program order). Our own
kernels of that shape (written for this course in NKI's destination style, not the lab's code):

- ``vector_add_rows``    ROW_CHUNK elements per step, one per partition: tiles [ROW_CHUNK, 1]; the add is
                         a `tensor_scalar` whose operand is b's [P, 1] tile. ROW_CHUNK = 1 issues three
                         4-byte DMAs per element; 128 uses every partition.
- ``vector_add_stream``  the vector viewed as [128, n / 128]; FREE_DIM columns per step: tiles
                         [128, FREE_DIM], one `tensor_tensor` per step. FREE_DIM = n / 128: one step.

``ONE_BUFFER=True`` allocates the tiles once, before the loop. With the storage kept as written
(`TRNLAB_VERSIONS=0`, as the calibration candidates run) every step then waits for the previous one to
release their bytes (what the chip's measurements suggest its compiler does with the middle end skipped;
docs/calibration.md, "What was tried for the largest misses", candidate (a)); in the default flow the
compiler's address rotation gives each step's loads new bytes anyway.

`benchmarks/calibration_table.py` runs them at the lab's sizes against a student's published times
(docs/calibration.md, source [CS149]).
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
@nki.compiler.skip_middle_end_transformations
def vector_add_rows(a_vec, b_vec, ROW_CHUNK: int = 128, ONE_BUFFER: bool = False):
    """c = a + b for a, b [n]: ROW_CHUNK elements per step, one per partition. ONE_BUFFER: the three
    tiles are allocated once, before the loop: with the storage kept as written (`TRNLAB_VERSIONS=0`, or
    NKI allocation) every step reuses their bytes, no multi-buffering; in the default flow the
    compiler's address rotation gives each step's loads new bytes anyway (`hardware/versions.py`)."""
    (n,) = a_vec.shape
    assert ROW_CHUNK <= nl.tile_size.pmax, f"ROW_CHUNK={ROW_CHUNK} > {nl.tile_size.pmax} partitions"
    assert n % ROW_CHUNK == 0, f"n={n} is not a multiple of ROW_CHUNK={ROW_CHUNK}"
    c_vec = nl.ndarray((n,), dtype=a_vec.dtype, buffer=nl.shared_hbm)

    def tiles():                                      # a, b, c: [ROW_CHUNK partitions, 1]
        return [nl.ndarray((ROW_CHUNK, 1), dtype=a_vec.dtype, buffer=nl.sbuf) for _ in range(3)]
    once = tiles() if ONE_BUFFER else None
    for step in nl.affine_range(n // ROW_CHUNK):
        rows = slice(step * ROW_CHUNK, (step + 1) * ROW_CHUNK)
        a_tile, b_tile, c_tile = once or tiles()
        nisa.dma_copy(dst=a_tile, src=a_vec[rows])
        nisa.dma_copy(dst=b_tile, src=b_vec[rows])
        # b's tile is the per-partition scalar operand: one element per lane
        nisa.tensor_scalar(dst=c_tile, data=a_tile, op0=nl.add, operand0=b_tile)
        nisa.dma_copy(dst=c_vec[rows], src=c_tile)
    return c_vec


@nki.jit
@nki.compiler.skip_middle_end_transformations
def vector_add_stream(a_vec, b_vec, FREE_DIM: int = 2, ONE_BUFFER: bool = False):
    """c = a + b for a, b [n], n a multiple of 128 * FREE_DIM: [128, FREE_DIM] tiles of a [128, n/128] view.
    ONE_BUFFER: as in `vector_add_rows`."""
    (n,) = a_vec.shape
    P = nl.tile_size.pmax
    assert n % (P * FREE_DIM) == 0, f"n={n} is not a multiple of {P} x FREE_DIM={FREE_DIM}"
    a_rows = a_vec.reshape((P, n // P))                      # [128 partitions, n / 128], row-major view
    b_rows = b_vec.reshape((P, n // P))
    c_rows = nl.ndarray((P, n // P), dtype=a_vec.dtype, buffer=nl.shared_hbm)

    def tiles():                                      # a, b, c: [128, FREE_DIM]
        return [nl.ndarray((P, FREE_DIM), dtype=a_vec.dtype, buffer=nl.sbuf) for _ in range(3)]
    once = tiles() if ONE_BUFFER else None
    for step in nl.affine_range(n // (P * FREE_DIM)):
        cols = slice(step * FREE_DIM, (step + 1) * FREE_DIM)
        a_tile, b_tile, c_tile = once or tiles()
        nisa.dma_copy(dst=a_tile, src=a_rows[:, cols])
        nisa.dma_copy(dst=b_tile, src=b_rows[:, cols])
        nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
        nisa.dma_copy(dst=c_rows[:, cols], src=c_tile)
    return c_rows.reshape((n,))
