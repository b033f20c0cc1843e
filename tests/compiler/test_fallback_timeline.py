"""A host op's time is real on the run's timeline: its transfer device -> host, its compute and its
transfer back are records of their own ("host_link", "host"), the next device partition starts after
them, and the run's total and the profile include them (compiler.execute, compiler.fallback)."""
import numpy as np
import pytest
import torch
import torch.nn as nn

import trnlab.compiler as tc
from trnlab.compiler import fallback
from trnlab.hardware import presets
from trnlab.hardware.records import END, ENGINE, OPCODE, READY, START


class LinearSortLinear(nn.Module):
    """A device partition, a host op (sort: no kernel), a device partition."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(torch.sort(self.fc1(x), dim=-1).values)


@pytest.fixture(scope="module")
def run():
    torch.manual_seed(0)
    model = LinearSortLinear()
    x = torch.randn(4, 8)
    compiled = tc.compile(model, (x,), fallback=True)
    return model, x, compiled, compiled.run(x)


def _host_records(tl):
    return [i for i, r in enumerate(tl.records) if tl.engines[r[ENGINE]] in ("host", "host_link")]


def test_host_op_has_transfer_and_compute_records_on_their_own_tracks(run):
    _, _, _, result = run
    tl = result.profile.timeline
    recs = [tl.records[i] for i in _host_records(tl)]
    assert [tl.engines[r[ENGINE]] for r in recs] == ["host_link", "host", "host_link"]
    assert recs[0][OPCODE] == "to_host" and "sort" in recs[1][OPCODE] and recs[2][OPCODE] == "to_device"
    assert recs[0][END] == recs[1][START] and recs[1][END] == recs[2][START]   # one after the other


def test_next_device_partition_starts_after_the_host_op_result_is_back(run):
    _, _, compiled, result = run
    tl = result.profile.timeline
    host = next(o for o in result.profile.ops if o.bound == "host")
    before = next(o for o in result.profile.ops if o.op == "linear" and o.end_ns <= host.start_ns)
    after = [o for o in result.profile.ops if o.bound != "host" and o.start_ns > before.start_ns]
    spec = presets.core_spec("trn2")
    # the next launch's start-up follows the host op's result; the host op reads fc1's result after
    # fc1's launch has ended (its tear-down)
    assert after and min(o.start_ns for o in after) == pytest.approx(host.end_ns + spec.launch_start_ns)
    assert host.start_ns == pytest.approx(before.end_ns + spec.launch_end_ns)
    device = [r for i, r in enumerate(tl.records) if i not in set(_host_records(tl))]
    late = [r for r in device if r[START] >= host.end_ns]
    assert late and all(r[START] >= host.end_ns for r in device if r[READY] > host.end_ns)


def test_total_is_the_timeline_end_and_host_time_is_the_cost_model(run):
    _, x, compiled, result = run
    profile = result.profile
    assert profile.total_ns == pytest.approx(profile.timeline.total_ns)
    # the ops' times and the runtime's start-up and tear-down of each device partition's launch
    spec = presets.core_spec("trn2")
    assert profile.launch_ns == len(compiled.programs) * (spec.launch_start_ns + spec.launch_end_ns) > 0
    assert profile.total_ns == pytest.approx(sum(o.ns for o in profile.ops) + profile.launch_ns)
    host = next(o for o in profile.ops if o.bound == "host")
    nbytes = 4 * 16 * 4                                     # fc1's [4, 16] fp32 output, and sort's back
    link = presets.TRN2.host_link_bandwidth
    expected = (2 * nbytes / link * 1e9 + 2 * fallback.TRANSFER_LATENCY_NS
                + 2 * nbytes / fallback.HOST_BYTES_PER_S * 1e9)
    assert host.span_ns == pytest.approx(expected) and host.ns == pytest.approx(expected)
    call = next(c for c in compiled.program.calls if c.kind == "host")
    assert call.cost["bytes_to_host"] == nbytes and call.cost["bytes_to_device"] == nbytes


def test_host_link_bandwidth_comes_from_the_compiled_target():
    slow = presets.TRN1.host_link_bandwidth / 4
    assert fallback.host_cost([1 << 20], 1 << 20, 1 << 20, True, slow)["transfer_ns"] > \
        fallback.host_cost([1 << 20], 1 << 20, 1 << 20, True)["transfer_ns"]
    assert fallback.host_link_bandwidth("trn1") == presets.TRN1.host_link_bandwidth


def test_outputs_still_match_eager_pytorch(run):
    model, x, _, result = run
    y = torch.as_tensor(np.asarray(result.outputs if not isinstance(result.outputs, (list, tuple))
                                   else result.outputs[0]))
    assert torch.allclose(y, model(x), rtol=1e-4, atol=1e-5)


def test_host_tracks_are_named_in_the_chrome_trace_and_grey_in_the_picture(run):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from trnlab.viz import timeline as viz
    _, _, _, result = run
    trace = result.profile.to_chrome_trace()
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"Host link (PCIe)", "Host CPU"} <= threads
    fig = viz.plot_timeline(result.profile.timeline)
    box = fig.axes[0].get_legend()
    legend = {t.get_text(): to_hex(h.get_facecolor()) for t, h in zip(box.get_texts(), box.legend_handles)
              if hasattr(h, "get_facecolor")}                   # bars (not the PSUM tail's line)
    assert legend["to_host"] == legend["to_device"] == viz.HOST_LINK_COLOUR
    assert [c for op, c in legend.items() if op.startswith("host:")] == [viz.HOST_COLOUR]
    plt.close(fig)
    assert viz.HOST_LINK_COLOUR not in {c for op, c in legend.items() if op not in ("to_host", "to_device")}

