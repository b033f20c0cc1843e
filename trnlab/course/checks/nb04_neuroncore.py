"""Checks for notebook 04, the NeuronCore: SBUF blocking, DMA time, PSUM banks (cases / run / judge).

Every expected value comes from the simulator itself, in the judging process: the allocator of a
fresh Trainium2 core (what fits, how many bytes per partition it reserves) and its timeline (how long
a DMA takes). While the student's function runs, the simulator's core, memories and cost model are
switched off: the answer must be computed from the numbers, not read off the simulator.
"""

from __future__ import annotations

import math

from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise
from trnlab.hardware import NeuronCore, dtypes, presets
from trnlab.hardware.errors import PSUMBankError, PSUMOverflowError
from trnlab.hardware.memory import check_pe_result

NOTEBOOK = "04_the_neuroncore"
SPEC = presets.TRN2.core
DTYPE_OF_BYTES = {1: dtypes.float8_e4m3, 2: dtypes.bfloat16, 4: dtypes.float32}
SIMULATOR = ("trnlab.hardware.core.NeuronCore", "trnlab.hardware.memory", "trnlab.hardware.cost",
             "trnlab.hardware.dependencies", "trnlab.hardware.engines")


def sbuf_bytes_of_blocking(K: int, block_m: int, block_n: int, dtype_bytes: int) -> int:
    """Allocate the blocking on a fresh core and read how many bytes per partition SBUF reserves."""
    core = NeuronCore(SPEC.derive(sbuf_partition_bytes=2**40), mode="timing")  # room for any answer
    k_tiles = math.ceil(K / 128)
    dtype = DTYPE_OF_BYTES[dtype_bytes]
    core.sbuf.allocate((k_tiles, min(K, 128), block_m), dtype, name="lhsT_block", partition_axis=1)
    core.sbuf.allocate((k_tiles, min(K, 128), block_n), dtype, name="rhs_block", partition_axis=1)
    core.sbuf.allocate((math.ceil(block_m / 128), min(block_m, 128), block_n), dtypes.float32,
                       name="out_block", partition_axis=1)
    return core.sbuf.used_partition_bytes


def dma_time_of(rows: int, cols: int, dtype_bytes: int) -> float:
    """One HBM -> SBUF dma_copy on an idle core: its duration in the timeline."""
    core = NeuronCore(SPEC, mode="timing")
    dtype = DTYPE_OF_BYTES[dtype_bytes]
    source = core.hbm.allocate((rows, cols), dtype, name="source")
    tile = core.sbuf.allocate((rows, cols), dtype, name="tile")
    core.dma_copy(dst=tile, src=source)
    record = core.timeline[0]
    return record.end_ns - record.start_ns


def psum_tiles_of(tile_n: int) -> int:
    """How many [128, tile_n] fp32 accumulation tiles a fresh core's PSUM holds at once: tiles it
    accepts, each one a matmul result may fill. A PSUM tensor may span banks, but a matmul's result
    lies in one bank (`memory.check_pe_result`), so a tile wider than a bank accumulates nothing."""
    core = NeuronCore(SPEC, mode="timing")
    count = 0
    try:
        while True:
            tile = core.psum.allocate((128, tile_n), dtypes.float32, name=f"acc{count}")
            check_pe_result(SPEC, tile.full, "nc_matmul")
            count += 1
    except (PSUMOverflowError, PSUMBankError):
        return count


@exercise("nb04_sbuf_blocking", notebook=NOTEBOOK, points=2, answer="sbuf_bytes_per_partition",
          title="Does this blocking fit in SBUF?", asks_for=SIMULATOR)
class SbufBlocking:
    def cases(rng):
        fixed = [[1024, 256, 1024, 2], [128, 128, 512, 2], [200, 128, 512, 2], [64, 64, 100, 4], [300, 300, 700, 4]]
        drawn = [[int(rng.integers(1, 8192)), int(rng.integers(1, 1024)), int(rng.integers(1, 4096)),
                  int(rng.choice([1, 2, 4]))] for _ in range(4)]
        return fixed + drawn

    def run(sbuf_bytes_per_partition, case):
        return plain.number(sbuf_bytes_per_partition(*case), "the bytes per partition")

    def judge(case, got):
        expected = sbuf_bytes_of_blocking(*case)
        if got != expected:
            K, block_m, block_n, dtype_bytes = case
            raise CheckFailed(
                f"expected {expected:,} bytes per partition, got {got:,.0f} for (K, block_m, block_n, "
                f"dtype_bytes) = {tuple(case)} (the allocator reserves whole 128-partition tiles: a K of {K} "
                f"is {math.ceil(K / 128)} tile(s), and the output block is fp32)")


@exercise("nb04_dma_time", notebook=NOTEBOOK, points=2, answer="dma_time_ns",
          title="How long does one DMA take?", asks_for=SIMULATOR)
class DmaTime:
    def cases(rng):
        fixed = [[128, 2048, 2], [128, 16, 2], [1, 4096, 4], [8, 4096, 4], [100, 50000, 1]]
        drawn = [[int(rng.integers(1, 129)), int(rng.integers(1, 20000)), int(rng.choice([1, 2, 4]))] for _ in range(4)]
        return fixed + drawn

    def run(dma_time_ns, case):
        return plain.number(dma_time_ns(*case), "the time in ns")

    def judge(case, got):
        expected = dma_time_of(*case)
        if not math.isclose(got, expected, rel_tol=1e-6):
            rows = case[0]
            raise CheckFailed(
                f"expected {expected:,.1f} ns, got {got:,.1f} ns for (rows, cols, dtype_bytes) = {tuple(case)}: "
                f"{_dma_mistake(*case, got)}")


def _dma_mistake(rows: int, cols: int, dtype_bytes: int, got: float) -> str:
    """Which part of the DMA formula an answer left out, if it matches a formula missing one part."""
    lanes = SPEC.partitions // SPEC.dma_engines
    engines = min(SPEC.dma_engines, -(-rows // lanes))
    row_bytes, nbytes, bw = cols * dtype_bytes, rows * cols * dtype_bytes, SPEC.dma_engine_bandwidth / 1e9
    rows_per_engine = -(-rows // engines)
    hbm = nbytes * 1e9 / SPEC.hbm_bandwidth
    latency = SPEC.dma_latency_ns
    engines_ns = rows_per_engine * max(row_bytes / bw, SPEC.dma_descriptor_ns)
    known = {
        "the HBM bandwidth limit is missing (the time is never below bytes / hbm_bandwidth)": latency + engines_ns,
        "the minimum time per descriptor (dma_descriptor_ns) is missing: a short row still costs it":
            latency + max(rows_per_engine * row_bytes / bw, hbm),
        f"the engines: {rows} rows use {engines} engine(s), one per {lanes} partitions, not min(rows, 16)":
            latency + max(-(-rows // min(rows, SPEC.dma_engines)) * max(row_bytes / bw, SPEC.dma_descriptor_ns), hbm),
        "the fixed latency (dma_latency_ns) is missing": engines_ns if engines_ns > hbm else hbm,
        "the time is in µs or s, not ns": (latency + max(engines_ns, hbm)) / 1e3,
    }
    for cause, value in known.items():
        if math.isclose(got, value, rel_tol=1e-6):
            return cause
    return (f"fixed latency, plus the busiest DMA engine's rows — {engines} engine(s), one per {lanes} rows; each row "
            f"one descriptor taking at least dma_descriptor_ns — never faster than the core's HBM bandwidth")


@exercise("nb04_psum_tiles", notebook=NOTEBOOK, points=2, answer="psum_tiles_that_fit",
          title="How many accumulation tiles fit in PSUM at once?", asks_for=SIMULATOR)
class PsumTiles:
    def cases(rng):
        return [512, 384, 128, 2, 513, *(int(rng.integers(48, 1100)) for _ in range(4))]

    def run(psum_tiles_that_fit, tile_n):
        return plain.integer(psum_tiles_that_fit(tile_n), "the number of tiles")

    def judge(tile_n, got):
        expected = psum_tiles_of(tile_n)
        if got != expected:
            raise CheckFailed(
                f"expected {expected} tiles, got {got} for tile_n={tile_n} "
                f"({tile_n * 4} bytes per partition per fp32 tile; {SPEC.psum_banks} banks of "
                f"{SPEC.psum_bank_bytes} bytes; a matmul's result lies in one bank, so a tile never "
                f"straddles two and one wider than a bank is no accumulation tile)")
