"""The NKI Library's quality-of-results metrics, computed from a trnlab run's timeline.

AWS's NKI Library harness reports each kernel run on hardware with these names (its
test/utils/qor_collector.py `QOR_METRICS` and metrics_collector.py, read from neuron-profile's
output); `qor(run)` gives the same names from the simulated timeline, so a kernel's row reads
like the library's own CSV:

- ``InferenceTime`` (s): the launch's latency, first instruction to last result on any core.
- ``ActiveInferenceTime`` (s): first instruction start to last instruction end (the harness leaves
  out setup opcodes; a trnlab program has none).
- ``TpbSgCyclesSum``: the longest core's run in cycles of the Tensor engine clock (the clock the
  library's collector takes for its MFU: 2.4 GHz on trn2/trn3; ASSUMED to be the unit of AWS's
  CycleCount, which AWS does not document).
- ``MbuEstimatedPercent``: HBM bytes moved / (InferenceTime x HBM bandwidth of the cores used) x 100.
- ``ProfilerMFU``: the collector's formula, (matmul FLOPs - transpose FLOPs) /
  (2 x 128 x 128 x PE clock x InferenceTime x LNC cores) x 100.
"""
from __future__ import annotations

QOR_METRICS = ("TpbSgCyclesSum", "MbuEstimatedPercent", "ProfilerMFU", "InferenceTime", "ActiveInferenceTime")
TRANSPOSE_OPCODES = ("nc_transpose",)     # counted as Tensor-engine FLOPs, left out of MFU as AWS does


def _cores(run) -> list:
    """The NeuronCores a run used: a KernelRun's (an SPMD launch over nl.nc cores has several), or a
    device launch's (`Device.run` / `Device.run_spmd`)."""
    if getattr(run, "cores", None):
        return list(run.cores)
    if getattr(run, "runs", None):
        return [r.core for r in run.runs]
    return [run.core]


def qor(run) -> dict:
    """The library's QoR metrics (names above) of a `trnlab.nki.KernelRun` or a device launch."""
    cores = _cores(run)
    spec = cores[0].spec
    seconds = run.latency_ns * 1e-9
    starts, ends, flops, transpose_flops, hbm_bytes, spans = [], [], 0.0, 0.0, 0.0, []
    for core in cores:
        c = core.timeline.columns()
        if not c["n"]:
            continue
        starts.append(float(c["start"].min()))
        ends.append(float(c["end"].max()))
        spans.append(core.timeline.total_ns)
        flops += float(c["flops"].sum())
        transpose_flops += sum(float(f) for op, f in zip(c["opcode"], c["flops"]) if op in TRANSPOSE_OPCODES)
        hbm_bytes += float(c["hbm"].sum())
    active = (max(ends) - min(starts)) * 1e-9 if starts else 0.0
    peak_per_core = 2.0 * spec.pe_rows * spec.pe_cols * spec.pe_clock_hz
    return {
        "TpbSgCyclesSum": round(max(spans, default=0.0) * 1e-9 * spec.pe_clock_hz),
        "MbuEstimatedPercent": 100.0 * hbm_bytes / (seconds * spec.hbm_bandwidth * len(cores)) if seconds else 0.0,
        "ProfilerMFU": 100.0 * (flops - transpose_flops) / (peak_per_core * seconds * len(cores)) if seconds else 0.0,
        "InferenceTime": seconds,
        "ActiveInferenceTime": active,
    }
