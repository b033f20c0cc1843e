"""A reshaped HBM tensor is the same bytes: an access through the alias waits for the base's writes.

A compiled graph hands one kernel's output to the next through a view (`x.reshape(...)`, an HBM
alias). The scheduler must see that the reader of the alias reads what the writer of the base
wrote (RAW), or the next kernel's loads start before its input exists (a timeline that is too
fast). Both paths are checked: the directly driven core (`nki.run` of one kernel) and the replay
of a traced program (`Device.run`), which must agree.
"""
import numpy as np

import trnlab.nki as nki
from trnlab.hardware.device import Device
from trnlab.kernels import KERNELS

add = KERNELS["add"][0]


def two_kernels(a, b):
    with nki.region("first"):
        y = add(a, b)                                   # [32, 64]
    with nki.region("second"):
        return add(y.reshape((64, 32)), y.reshape((64, 32)))   # reads y through an alias


def _spans(run, name):
    t = run.core.timeline
    records = [t[i] for region, first, end in t.regions if f"/{name}/" in region for i in range(first, end)]
    return records


def test_a_kernel_reading_a_reshaped_output_waits_for_it_to_be_written():
    a = np.arange(32 * 64, dtype=np.float32).reshape(32, 64)
    b = np.ones((32, 64), np.float32)
    program = nki.trace(two_kernels, nki.ShapeDtype((32, 64), np.float32), nki.ShapeDtype((32, 64), np.float32),
                        target="trn2")
    run = Device("trn2", cores=1).run(program, a, b)
    np.testing.assert_array_equal(np.asarray(run.outputs), 2 * (a + b).reshape(64, 32))
    first_writes_end = max(r.end_ns for r in _spans(run, "first") if r.engine.startswith("dma"))
    second_loads = [r for r in _spans(run, "second") if r.engine.startswith("dma")]
    second_first_load = min(r.start_ns for r in second_loads)
    assert second_first_load >= first_writes_end, (second_first_load, first_writes_end)


def test_a_program_loaded_from_json_keeps_the_alias_dependency():
    from trnlab.hardware.program import Program
    spec = nki.ShapeDtype((32, 64), np.float32)
    program = nki.trace(two_kernels, spec, spec, target="trn2")
    a = np.ones((32, 64), np.float32)
    traced = Device("trn2", cores=1).run(program, a, a)
    loaded = Device("trn2", cores=1).run(Program.loads(program.dumps()), a, a)
    assert loaded.latency_ns == traced.latency_ns
