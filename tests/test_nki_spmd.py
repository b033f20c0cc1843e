"""SPMD launch grids over several NeuronCores (`nl.nc`, `nl.spmd_dim`): the placement AWS's
nki.language.spmd_dim / nc pages give, values, and the speed-up of cores sharing one chip's HBM."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab.hardware.device import Device
from trnlab.nki import spmd

from nki_kernels.tensor_add import add_spmd


def _ab(rows=512, cols=2048, dtype=np.float16):
    rng = np.random.default_rng(0)
    return rng.random((rows, cols)).astype(dtype), rng.random((rows, cols)).astype(dtype)


def test_placement_follows_the_spmd_dim_page_for_a_4_by_2_grid():
    # cores first: programs 0, 1 of the axis on core 0, 2, 3 on core 1
    blocked = spmd.placement((nl.spmd_dim(nl.nc(2), 2), 2))
    assert blocked == [[(0, 0), (0, 1), (1, 0), (1, 1)], [(2, 0), (2, 1), (3, 0), (3, 1)]]
    # cores last: even programs on core 0, odd on core 1
    interleaved = spmd.placement((nl.spmd_dim(2, nl.nc(2)), 2))
    assert interleaved == [[(0, 0), (0, 1), (2, 0), (2, 1)], [(1, 0), (1, 1), (3, 0), (3, 1)]]
    # the sugar: nl.nc(2) * 2 and 2 * nl.nc(2)
    assert spmd.placement((nl.nc(2) * 2, 2)) == blocked
    assert spmd.placement((2 * nl.nc(2), 2)) == interleaved
    # a bare nl.nc(2) axis: program i on core i
    assert spmd.placement((spmd.grid_entry(nl.nc(2)), 2)) == [[(0, 0), (0, 1)], [(1, 0), (1, 1)]]


def test_a_grid_without_nc_axes_stays_on_one_core():
    assert spmd.cores_of((4, 4)) == 1
    a, b = _ab(256, 1024)
    run = nki.run(add_spmd[2, 2], a, b)
    assert not isinstance(run, spmd.SpmdKernelRun)
    np.testing.assert_array_equal(run.outputs, a + b)


@pytest.mark.parametrize("axis", [nl.spmd_dim(2, nl.nc(2)), nl.spmd_dim(nl.nc(2), 2), nl.nc(4)])
def test_programs_on_several_cores_write_one_shared_output(axis):
    a, b = _ab()
    run = nki.run(add_spmd[axis, 4], a, b)
    assert isinstance(run, spmd.SpmdKernelRun)
    assert len(run.cores) == spmd.cores_of(add_spmd[axis, 4].grid)
    np.testing.assert_array_equal(run.outputs, a + b)
    # every core ran its share: the same number of instructions on each
    counts = {len(r.timeline.records) for r in run.launch.runs}
    assert len(counts) == 1 and counts.pop() > 0


def test_run_takes_the_grid_with_nc_axes_too():
    a, b = _ab(256, 1024)
    run = nki.run(add_spmd, a, b, grid=(nl.nc(2), 2))
    assert len(run.cores) == 2
    np.testing.assert_array_equal(run.outputs, a + b)


def test_an_element_no_core_writes_stays_unwritten():
    @nki.jit
    def first_tile_only(a_tensor):
        out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
        if nl.program_id(0) == 0:            # only core 0's program writes
            nl.store(out[0:128, :], nl.load(a_tensor[0:128, :]))
        return out

    from trnlab.hardware.errors import UninitializedReadError
    a = np.ones((256, 64), np.float32)
    with pytest.raises(UninitializedReadError):
        first_tile_only[nl.nc(2)](a)


def test_two_cores_halve_a_memory_bound_kernel_and_share_the_hbm():
    a, b = _ab()
    sd = nki.ShapeDtype(a.shape, "float16")
    one = nki.run(add_spmd[4, 4], sd, sd, timing_only=True)
    two = nki.run(add_spmd[nl.spmd_dim(2, nl.nc(2)), 4], sd, sd, timing_only=True)
    start_up = one.core.spec.launch_ns   # each core pays it, at once
    work = lambda run: run.latency_ns - start_up                             # noqa: E731
    assert work(two) < 0.65 * work(one)                    # the work is split over two cores
    assert work(two) > 0.45 * work(one)                    # ... not free: each core's DMA still moves half
    # the same two programs on two cores that share the HBM, vs. on two devices of the same
    # bandwidth each (no sharing): sharing cannot be faster, and with a narrow HBM it is slower
    programs = two.programs
    shared = Device("trn2", mode="timing", cores=2)
    together = shared.run_spmd(programs, None, None).latency_ns
    apart = max(Device("trn2", mode="timing", cores=2).run_spmd([p], None, None).latency_ns for p in programs)
    assert together >= apart
    # with an HBM narrow enough to be the limit (50 GB/s, assumed for the test), two cores on one
    # channel take about twice as long as one core alone on it
    def on(programs, bandwidth=50e9):
        device = Device("trn2", mode="timing", cores=2)
        for core in device.cores:
            core.hbm_bandwidth = bandwidth
        return device.run_spmd(programs, None, None).latency_ns
    assert on(programs) > 1.8 * on(programs[:1])


def test_more_cores_than_the_chip_has_is_refused_by_name():
    a, b = _ab(128 * 4, 512)
    with pytest.raises(nki.NKIError, match="2 NeuronCores|has 2"):
        nki.run(add_spmd[nl.nc(4), 1], a, b, target="trn1")


def test_benchmark_of_an_spmd_grid_reports_the_multi_core_latency():
    a, b = _ab()
    bench = nki.benchmark(add_spmd, warmup=1, iters=2)
    np.testing.assert_array_equal(bench[nl.spmd_dim(2, nl.nc(2)), 4](a, b), a + b)
    two = bench.benchmark_result.nc_latency.get_latency_percentile(99)
    single = nki.run(add_spmd[4, 4], a, b)
    start_up_us = single.core.spec.launch_ns / 1e3
    assert two - start_up_us < 0.65 * (single.latency_us - start_up_us)


def test_profile_of_an_spmd_grid_traces_every_core(tmp_path):
    import json
    a, b = _ab(256, 1024)
    prof = nki.profile(add_spmd, working_directory=str(tmp_path), save_trace_name="spmd.ntff")
    np.testing.assert_array_equal(prof[nl.nc(2), 2](a, b), a + b)
    trace = json.loads(open(prof.profile_result["trace"]).read())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    processes = {e.get("pid") for e in events if e.get("ph") == "X"}
    assert len(processes) == 2                       # one process per core


@nki.jit
def _add_tile(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    ip, jf = nl.arange(128)[:, None], nl.arange(64)[None, :]
    x = nl.load(a[i * 128 + ip, j * 64 + jf])
    y = nl.load(b[i * 128 + ip, j * 64 + jf])
    nl.store(out[i * 128 + ip, j * 64 + jf], value=x + y)
    return out


def test_a_kernel_with_a_grid_called_from_a_traced_function_runs_every_program_of_its_grid():
    # AWS's tutorials wrap `kernel[2, 2](a, b)` in a plain function: traced as one program, the
    # inlined launch runs all four programs into its one shared output, then the caller goes on
    def wrapper(a, b):
        return _add_tile[2, 2](a, b)
    a, b = (np.random.default_rng(s).random((256, 128), dtype=np.float32) for s in (0, 1))
    run = nki.run(wrapper, a, b)
    np.testing.assert_array_equal(run.outputs, a + b)
    np.testing.assert_array_equal(_add_tile[2, 2](a, b), a + b)
    assert sum(r.opcode == "dma_copy" for r in run.timeline) == 4 * 3      # two loads and a store each
