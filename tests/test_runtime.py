"""The runtime: a compiled model on a device, its profile per op and per engine, and its advice."""
import json

import pytest
import torch

import trnlab.compiler as tc
from trnlab import config
from trnlab.model.gpt import GPT, GPTConfig
from trnlab.runtime import Runtime


@pytest.fixture(scope="module")
def gpt_run():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, n_embd=32)).eval()
    idx = torch.randint(0, 20, (2, 16), generator=torch.Generator().manual_seed(0))
    compiled = tc.compile(model, (idx,))
    return compiled, compiled.run(idx), idx


def test_profile_totals_are_the_sum_of_the_ops(gpt_run):
    _, run, _ = gpt_run
    p = run.profile
    # the ops' times and the runtime's start-up and tear-down of the one launch
    assert p.launch_ns > 0
    assert p.total_ns == pytest.approx(sum(o.ns for o in p.ops) + p.launch_ns, rel=1e-9)
    assert sum(o.share for o in p.ops) + p.launch_ns / p.total_ns == pytest.approx(1.0)
    assert 0 < p.mfu < 1 and 0 < p.mbu < 1
    assert set(p.bytes_by_level) == {"hbm", "sbuf", "psum"} and p.bytes_by_level["hbm"] > 0
    assert "pe" in p.active and all(0 < a <= 1 for a in p.active.values())
    assert p.by_op()["linear"] > 0 and p.by_op()["attention"] > 0


def test_every_op_traces_back_to_a_source_line(gpt_run):
    _, run, _ = gpt_run
    kernels = [o for o in run.profile.ops if o.kernel]
    assert kernels and all(o.source.startswith("gpt.py:") for o in kernels)
    assert all(o.bound in ("compute", "memory", "latency") for o in kernels)


def test_timing_only_run_costs_the_same_without_values(gpt_run):
    compiled, run, idx = gpt_run
    timed = compiled.run(idx, timing_only=True)
    assert timed.outputs == (None, None)
    assert timed.profile.total_ns == pytest.approx(run.profile.total_ns)


def test_chrome_trace_has_engine_tracks_and_op_regions(gpt_run, tmp_path):
    _, run, _ = gpt_run
    path = tmp_path / "trace.json"
    run.profile.to_chrome_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    regions = [e for e in events if e.get("tid") == 999 and e["ph"] == "X"]
    assert {e["name"] for e in regions} >= {"layer_norm.0+linear.0", "attention.0", "linear.1"}
    assert any(e["ph"] == "X" and e["tid"] != 999 for e in events)


def test_advice_names_the_op_it_comes_from(gpt_run):
    _, run, _ = gpt_run
    kinds = {a.kind for a in run.advice}
    assert "low_mfu" in kinds                     # a tiny model at batch 2 is far from the peak
    regions = {o.region for o in run.profile.ops}
    assert all(a.region in regions for a in run.advice)
    assert all(a.source for a in run.advice if a.kind != "spill")


def test_transposes_advice_fires_without_the_layout_pass():
    from trnlab.compiler.passes import PIPELINE, layout
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)).eval()
    x = torch.randn(128, 64)
    saved = list(PIPELINE)
    PIPELINE.remove(layout)
    try:
        run = tc.compile(model, (x,)).run(x)
    finally:
        PIPELINE[:] = saved
    advice = [a for a in run.advice if a.kind == "transposes"]
    assert advice and advice[0].region.startswith("linear.")


def test_device_checks_inputs(gpt_run):
    compiled, _, idx = gpt_run
    loaded = Runtime("trn2").load(compiled)
    with pytest.raises(TypeError, match="takes 1 inputs"):
        loaded.run(idx, idx)
    with pytest.raises(ValueError, match="one of"):
        Runtime("trn9")


def test_the_whole_graph_is_one_program_with_a_region_per_op(gpt_run):
    compiled, run, idx = gpt_run
    (program,) = compiled.programs                       # no host ops: ONE program for the graph
    kernels = [c.region for c in compiled.program.calls if c.kind == "kernel"]
    assert [r.split("/")[0] for r in program.regions()] == kernels
    assert [o.region for o in run.profile.ops] == kernels
    # replaying the stored program gives the run's numbers (no Python tracing at run time)
    from trnlab.hardware.device import Device
    from trnlab.hardware.program import Program
    again = Program.loads(program.dumps())
    launch = Device("trn2", cores=1).run(again, *[compiled.constants.get(n, idx.numpy().astype("int32"))
                                                for n, _ in again.inputs])
    assert launch.latency_ns == pytest.approx(run.profile.total_ns)


def test_kernels_overlap_across_op_boundaries(gpt_run):
    _, run, _ = gpt_run
    ops = [o for o in run.profile.ops if o.kernel]
    overlapping = [(a.region, b.region) for a, b in zip(ops, ops[1:]) if b.start_ns < a.end_ns]
    assert overlapping                                   # the next op's loads start during this op
    assert sum(o.span_ns for o in ops) > run.profile.total_ns   # so the spans add up to more than the run


def test_intermediates_kept_in_sbuf_cut_hbm_traffic(gpt_run):
    compiled, run, idx = gpt_run
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, n_embd=32)).eval()
    kept = [n for n, t in compiled.graph.meta["memory"]["tensors"].items() if t["level"] == "sbuf"]
    assert len(kept) == 2 * 2 + 1                        # each layer norm's output feeds its linear on chip
    through_hbm = tc.compile(model, (idx,), keep_in_sbuf=False)
    assert not [t for t in through_hbm.graph.meta["memory"]["tensors"].values() if t["level"] == "sbuf"]
    slow = through_hbm.run(idx)
    fast = tc.compile(model, (idx,)).run(idx)
    torch.testing.assert_close(fast.outputs[0], slow.outputs[0], rtol=1e-5, atol=1e-5)
    saved = sum(compiled.graph.values[n].nbytes for n in kept)
    drop = slow.profile.bytes_by_level["hbm"] - fast.profile.bytes_by_level["hbm"]
    assert drop == pytest.approx(2 * saved, rel=0.05)     # each kept tensor: one store and one load fewer
    assert fast.profile.total_ns < slow.profile.total_ns


def test_compile_once_replay_many_on_one_device(gpt_run):
    compiled, run, idx = gpt_run
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, n_embd=32)).eval()
    one = tc.compile(model, (idx[:1],))                  # another bucket (batch 1) of the same model
    device = Runtime("trn2")
    device.MAX_RECORDS = 1000                            # force a fresh hardware device between runs
    big, small = device.load(compiled), device.load(one)
    assert big.chips is small.chips is device            # one chip: both models' weights in its HBM
    assert device.chip.hbm.used >= big.resident_bytes + small.resident_bytes
    with torch.no_grad():
        expected, _ = model(idx)
    for _ in range(2):                                   # replays: new inputs only, constants rebound if needed
        torch.testing.assert_close(big.run(idx).outputs[0], expected, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(small.run(idx[:1]).outputs[0], expected[:1], rtol=1e-4, atol=1e-5)
    assert big.run(idx).profile.total_ns == pytest.approx(run.profile.total_ns)   # each run starts at 0


def test_a_loaded_artifact_replays_its_stored_program_without_tracing(gpt_run, tmp_path, monkeypatch):
    import trnlab.nki as nki
    compiled, run, idx = gpt_run
    path = compiled.save(tmp_path / "gpt.neff")

    def no_tracing(*args, **kwargs):
        raise AssertionError("traced at load or run time")

    monkeypatch.setattr(nki, "trace", no_tracing)
    again = Runtime("trn2").load(path).run(idx)
    torch.testing.assert_close(again.outputs[0], run.outputs[0], rtol=0, atol=0)
    assert again.profile.total_ns == pytest.approx(run.profile.total_ns)


def test_full_mode_values_are_the_checked_replays_and_independent_of_earlier_runs():
    """The full-mode values path (fast.values_replay.run_values: tiles and operand views kept per program and core,
    reset at each allocation) gives bit for bit the values of the checked replay, which issues every
    instruction to the core, for each of several different inputs in a row and between two programs."""
    import numpy as np

    from trnlab.hardware import replay
    from trnlab.hardware.device import Device
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=32, n_layer=1, n_head=2, n_embd=32)).eval()
    batches = [torch.randint(0, 20, (3, 32), generator=torch.Generator().manual_seed(s)) for s in range(3)]
    packed = tc.compile(model, (batches[0],))                  # B >= 2, T = 32: the packed attention kernel
    single = tc.compile(model, (batches[0][:1],))
    assert any(c.kernel == "causal_attention_qkv_packed" for c in packed.program.calls)
    loaded_packed, loaded_single = Runtime("trn2").load(packed), Runtime("trn2").load(single)
    for idx in batches:
        for loaded, x in ((loaded_packed, idx), (loaded_single, idx[:1])):
            fast = loaded.run(x).outputs[0]
            program = loaded.programs[0]
            args = [loaded.constants[n] if n in loaded.constants else x.numpy().astype(np.int32)
                    for n, _ in program.inputs]
            chip = Device("trn2", cores=1)
            tensors = replay.execute(program, chip.cores[0], args, checked=True)
            checked = replay.read_outputs(program, tensors, True)
            checked = checked[0] if isinstance(checked, (tuple, list)) else checked
            assert np.array_equal(fast.numpy().reshape(-1), np.asarray(checked).reshape(-1))
            with torch.no_grad():
                torch.testing.assert_close(fast, model(x)[0], rtol=1e-4, atol=1e-5)


@config.override(fast=True)                      # the switch is a fast path (off: BLAS left alone)
def test_blas_single_threaded_blocks_nest_and_restore_the_thread_count_once():
    """Full mode runs BLAS on one thread for a whole run (one switch), with the PSUM reads' own blocks
    nested inside it: only the outermost block sets and restores the thread count."""
    from trnlab.hardware import _blas
    api = _blas._find()
    if not api:
        pytest.skip("this NumPy's BLAS cannot be switched (not OpenBLAS)")
    setter, getter = api
    before = getter()
    calls = []
    original = _blas._find
    _blas._find = lambda: (lambda n: calls.append(n) or setter(n), getter)
    try:
        with _blas.single_threaded():
            assert getter() == 1
            for _ in range(3):
                with _blas.single_threaded():
                    assert getter() == 1
            assert getter() == 1
    finally:
        _blas._find = original
    assert getter() == before
    assert calls == ([] if before == 1 else [1, before])
