"""Cycle-level mode of the tensor engine: a small systolic array stepped PE by PE.

The fast cost model (`trnlab.hardware.cost`) says how many cycles one `nc_matmul` takes; this module
shows *why*, by running the instruction on a grid of processing elements (PEs) one clock cycle at a
time and recording every cycle, so that `trnlab.viz.systolic` can animate it.

The dataflow is weight-stationary, as in the NeuronCore's tensor engine ([ARCH-v2] in
`/work/shared/HARDWARE.md`; `nki.isa.nc_matmul` computes ``stationary.T @ moving``):

- the *stationary* tile [K, M] is loaded first: PE (k, m) holds ``stationary[k, m]``. Rows of the
  array are partitions (the contraction dimension K), columns are the output partitions M;
- the *moving* tile [K, N] streams in from the left: row k of the array receives ``moving[k, n]``
  at cycle ``n + k`` (the skew: each row starts one cycle after the row above), and every cycle a
  value moves one PE to the right;
- *partial sums* flow down: PE (k, m) adds ``stationary[k, m] * moving[k, n]`` to the partial sum
  it receives from PE (k-1, m) and passes the result down. When it leaves row K-1 it is the finished
  ``result[m, n]`` and is written to PSUM.

So ``result[m, n]`` is complete at cycle ``n + (K-1) + (m)`` (0-based), and the whole instruction
takes ``N + K + M - 2`` cycles: N to stream the moving columns in, K-1 for a partial sum to fall
through the rows, M-1 for a value to cross the columns. The fast cost model gives the same latency
for the same small array (tested in ``tests/test_systolic.py``).

Stationary loading is not stepped here: the published cost model runs LoadStationary in the
background, overlapped with the previous instruction's MultiplyMoving.

    from trnlab.hardware import presets
    from trnlab.hardware.systolic import simulate_matmul
    tiny = presets.TRN2.core.derive(pe_rows=4, pe_cols=4, matmul_min_cycles=1)
    trace = simulate_matmul(stationary, moving, tiny)     # stationary [K, M], moving [K, N]
    trace.result          # [M, N] fp32 == stationary.T @ moving
    trace.cycles          # N + K + M - 2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trnlab.hardware.errors import MatmulShapeError

# Every cycle of every PE is recorded; keep the recording small enough for a notebook.
MAX_RECORDED_PE_CYCLES = 4_000_000


class SystolicShapeError(ValueError):
    """The recording would be too large for cycle-level mode (not a hardware rule: use the fast model)."""


def systolic_step(
    stationary: np.ndarray, moving_regs: np.ndarray, psum_regs: np.ndarray, left_inputs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One clock cycle of a weight-stationary systolic array.

    stationary  [R, C]  the weight each PE holds (fixed for the whole instruction)
    moving_regs [R, C]  the moving value each PE multiplied in the previous cycle
    psum_regs   [R, C]  the partial sum each PE passed down in the previous cycle
    left_inputs [R]     the moving values entering column 0 this cycle (0 where nothing enters)

    Returns the new (moving_regs, psum_regs). Every PE updates at the same clock edge, so each one
    reads its neighbours' values from the *previous* cycle: a moving value advances one column per
    cycle and a partial sum one row per cycle.
    """
    moving_next = np.empty_like(moving_regs)
    moving_next[:, 0] = left_inputs  # new values enter from the left
    moving_next[:, 1:] = moving_regs[:, :-1]  # everything else moves one PE to the right
    psum_from_above = np.zeros_like(psum_regs)
    psum_from_above[1:, :] = psum_regs[:-1, :]  # row 0 starts from zero
    psum_next = (psum_from_above + stationary * moving_next).astype(np.float32)  # fp32 accumulation
    return moving_next, psum_next


@dataclass(frozen=True)
class SystolicTrace:
    """Everything that happened in the array, cycle by cycle.

    The recorded arrays cover the whole pe_rows x pe_cols grid; PEs outside the K x M corner that
    the stationary tile occupies hold NaN (and column index -1): they sit idle for this instruction.
    """

    stationary: np.ndarray  # [K, M] as given
    moving: np.ndarray  # [K, N] as given
    pe_rows: int
    pe_cols: int
    moving_regs: np.ndarray  # (cycles, pe_rows, pe_cols) the moving value in each PE; NaN if none
    moving_column: np.ndarray  # (cycles, pe_rows, pe_cols) int: which moving column n; -1 if none
    psum_regs: np.ndarray  # (cycles, pe_rows, pe_cols) fp32 partial sum each PE passes down; NaN if none
    psum: np.ndarray  # (cycles, M, N) fp32 PSUM after each cycle; NaN where not yet written

    @property
    def K(self) -> int:
        return self.stationary.shape[0]

    @property
    def M(self) -> int:
        return self.stationary.shape[1]

    @property
    def N(self) -> int:
        return self.moving.shape[1]

    @property
    def cycles(self) -> int:
        """Cycles from the first moving value entering to the last result landing in PSUM."""
        return self.moving_regs.shape[0]

    @property
    def result(self) -> np.ndarray:
        """[M, N] fp32: what the instruction writes to PSUM (stationary.T @ moving)."""
        return self.psum[-1]

    @property
    def active(self) -> np.ndarray:
        """(cycles, pe_rows, pe_cols) bool: the PE did a useful multiply-add in that cycle."""
        return self.moving_column >= 0

    @property
    def utilisation(self) -> np.ndarray:
        """(cycles,) fraction of all PEs doing useful work in each cycle."""
        return self.active.mean(axis=(1, 2))


def _pe_dims(spec: Any) -> tuple[int, int]:
    return int(spec.pe_rows), int(spec.pe_cols)


def simulate_matmul(stationary: np.ndarray, moving: np.ndarray, spec: Any) -> SystolicTrace:
    """Run ``stationary.T @ moving`` on the spec's PE array one cycle at a time.

    stationary [K, M], moving [K, N]; K <= spec.pe_rows, M <= spec.pe_cols. `spec` is a `CoreSpec`
    (only ``pe_rows`` and ``pe_cols`` are used). Products and sums are fp32, as in PSUM; the sum
    over k runs top to bottom in order k = 0, 1, ..., K-1.
    """
    pe_rows, pe_cols = _pe_dims(spec)
    stationary = np.asarray(stationary)
    moving = np.asarray(moving)
    if stationary.ndim != 2 or moving.ndim != 2:
        raise MatmulShapeError(
            f"matmul tile shape: the systolic array takes 2-D tiles: stationary {stationary.shape}, moving {moving.shape}"
        )
    K, M = stationary.shape
    K_moving, N = moving.shape
    if K != K_moving:
        raise MatmulShapeError(
            f"matmul tile shape: contraction mismatch: stationary has K={K} partitions, moving has {K_moving}; they must be equal"
        )
    if min(K, M, N) < 1:
        raise MatmulShapeError(f"matmul tile shape: empty tile: K={K}, M={M}, N={N}")
    if K > pe_rows:
        raise MatmulShapeError(f"matmul tile shape: stationary K={K} partitions exceeds the array's {pe_rows} PE rows")
    if M > pe_cols:
        raise MatmulShapeError(f"matmul tile shape: stationary M={M} columns exceeds the array's {pe_cols} PE columns")
    # The run length is not assumed: the loop stops when the last result has landed in PSUM.
    # Bound it (and the recording) by a generous estimate so a bug cannot loop forever.
    max_cycles = N + pe_rows + pe_cols
    if max_cycles * pe_rows * pe_cols > MAX_RECORDED_PE_CYCLES:
        raise SystolicShapeError(
            f"cycle-level recording too large: up to {max_cycles} cycles x {pe_rows}x{pe_cols} PEs = "
            f"{max_cycles * pe_rows * pe_cols:,} PE-cycles, limit {MAX_RECORDED_PE_CYCLES:,}; "
            "use a smaller array (spec.derive(pe_rows=..., pe_cols=...)) or the fast cost model"
        )

    weights = stationary.astype(np.float32)  # [K, M]: PE (k, m) holds stationary[k, m]
    values = moving.astype(np.float32)  # [K, N]
    moving_regs = np.zeros((K, M), np.float32)
    psum_regs = np.zeros((K, M), np.float32)
    column = np.full((K, M), -1)  # which moving column n each PE holds
    written = np.full((M, N), np.nan, np.float32)  # PSUM [M, N]
    rows = np.arange(K)
    rec_moving, rec_column, rec_psum, rec_written = [], [], [], []

    t = 0
    while np.isnan(written).any():
        if t >= max_cycles:
            raise RuntimeError(f"systolic array did not finish within {max_cycles} cycles")
        # Skewed feed: row k receives moving[k, n] at cycle n + k.
        n_entering = t - rows  # [K]
        entering = (n_entering >= 0) & (n_entering < N)
        left = np.where(entering, values[rows, np.clip(n_entering, 0, N - 1)], 0.0).astype(np.float32)
        moving_regs, psum_regs = systolic_step(weights, moving_regs, psum_regs, left)
        column[:, 1:] = column[:, :-1]
        column[:, 0] = np.where(entering, n_entering, -1)

        # A partial sum leaving row K-1 of column m is the finished result[m, column n].
        n_done = column[K - 1]  # [M]
        finished = n_done >= 0
        written[np.arange(M)[finished], n_done[finished]] = psum_regs[K - 1, finished]

        held = column >= 0
        pe_column = np.full((pe_rows, pe_cols), -1, np.int32)
        pe_moving = np.full((pe_rows, pe_cols), np.nan, np.float32)
        pe_psum = np.full((pe_rows, pe_cols), np.nan, np.float32)
        pe_column[:K, :M] = column
        pe_moving[:K, :M] = np.where(held, moving_regs, np.nan)
        pe_psum[:K, :M] = np.where(held, psum_regs, np.nan)
        rec_column.append(pe_column)
        rec_moving.append(pe_moving)
        rec_psum.append(pe_psum)
        rec_written.append(written.copy())
        t += 1

    return SystolicTrace(
        stationary=stationary,
        moving=moving,
        pe_rows=pe_rows,
        pe_cols=pe_cols,
        moving_regs=np.stack(rec_moving),
        moving_column=np.stack(rec_column),
        psum_regs=np.stack(rec_psum),
        psum=np.stack(rec_written),
    )

