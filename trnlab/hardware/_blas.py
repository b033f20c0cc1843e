"""Run NumPy's matrix products single-threaded, for the simulator's many mid-sized products.

OpenBLAS splits every product over all cores. For the shapes a tiled GEMM produces
([128, K] x [K, 512]) on a small, busy machine that costs far more in thread hand-offs than it
gains (measured: up to 10x slower than one thread). Full mode therefore computes its deferred
PSUM products with BLAS set to one thread, and runs independent products in parallel Python
threads instead (NumPy releases the GIL inside BLAS): those pending together at a read
(`fast/psum_pool.py`), and in the values replay each tile's products from the end of its K loop,
beside the next tile's instructions (`psum_pool.Products.start`, `fast/values_order.py`).

Fast path (`trnlab.config.fast()`, and ``config.get("blas_threads") == "single"``, the default;
``TRNLAB_BLAS_THREADS=default`` leaves BLAS alone): with either off, `single_threaded()` does
nothing and the reference computes each product with BLAS as the process set it — the same bits
(BLAS splits a product's rows and columns over its threads, never its K sum). It changes the user's
process only for the block: the thread count found at its start is set again when the outermost
block ends, by an exception too (tests/test_fast_paths.py).

The switch goes through OpenBLAS's own ``*_set_num_threads`` entry point of the library NumPy
loaded (found in /proc/self/maps, as threadpoolctl does). Where that is not available (macOS's
Accelerate, other BLAS), `single_threaded()` does nothing — results are identical either way.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading

from .. import config

_NAMES = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
          ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
          ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
          ("openblas_set_num_threads", "openblas_get_num_threads"))
# A single deferred product at least this large would run with BLAS's own threads. Never: on an idle
# 2-core machine a [1024, 128]^T x [1024, 512] fp32 group (134 MFLOP) took 1.3 ms on one thread and
# 0.7 ms on two (best of 50), but on a busy one (load average 10 on 2 cores) OpenBLAS's threads,
# which spin while they wait for each other, made each such product ~100 ms: the tiled NKI matmul at
# 1024^3 took 1.3 s instead of 0.23 s (benchmarks/bench_nki_ladder.py, same minute). One thread per
# product, independent products in parallel Python threads, is fast on both.
MULTITHREAD_FLOPS = float("inf")
_lock = threading.Lock()
_depth = 0                  # nesting of single_threaded() blocks, over all threads
_saved = [1]               # the thread count the outermost block restores
_api = None


def _find():
    global _api
    if _api is not None:
        return _api
    _api = False
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower()},
                           key=lambda p: "numpy" not in p)
    except OSError:
        return _api
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _NAMES:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes = [ctypes.c_int]
                _api = (setter, getter)
                return _api
    return _api


@contextlib.contextmanager
def single_threaded():
    """BLAS on one thread inside the block (no-op where the BLAS cannot be controlled).

    Re-entrant and cheap when nested: only the outermost block (over all Python threads) sets and
    restores the thread count. Setting it costs ~50 us (OpenBLAS wakes its threads), so full mode
    enters one block per run (`fast.values_replay.run_values`) rather than one per PSUM read."""
    global _depth
    with _lock:
        nested = _depth > 0             # inside a block that switched already: no settings to read
        if nested:
            _depth += 1
    if not nested:
        api = _find() if config.get("blas_threads") != "default" and config.fast() else None
        if not api:
            yield
            return
        setter, getter = api
        with _lock:
            if _depth == 0:
                _saved[0] = getter()
                if _saved[0] != 1:
                    setter(1)
            _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved[0] != 1:
                _find()[0](_saved[0])


def workers() -> int:
    """Python threads to run independent products in parallel."""
    return max(1, min(os.cpu_count() or 1, 4))
