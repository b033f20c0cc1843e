"""The host fallback: which ops run on the host CPU, and what they cost on the timeline.

Rules (`compile(..., fallback=True)` or `torch.compile(..., options={"fallback": True})`):

- an op runs on the host when no kernel lowers it (the lowering's `CompileError`), or when one of its
  tensors has a dtype the device does not hold (complex from `torch.fft`, float64): such a tensor
  never crosses to the device, so its readers run on the host too;
- a host op is any op with a PyTorch implementation: `ops.evaluate` runs it (ATen ops by their own
  overload, with the captured arguments); it reads weights and constants like any input;
- every tensor that crosses between the device and the host is a partition boundary, drawn in the
  graph (`[host]` nodes) and in the program listing; a graph with host ops is one device program per
  run of device ops.

Cost of each host op, on the run's timeline (`compiler.execute`) and in the profile: the transfer of the
tensors it reads from the device (device -> host), its compute, and the transfer of its output back
(host -> device, if a device op or the caller reads it). A transfer takes its bytes at the compiled
target's host-link bandwidth (`ChipSpec.host_link_bandwidth`, ASSUMED PCIe Gen5 x16 ~ 63 GB/s per
direction) plus a fixed latency; the compute streams the bytes it reads and writes at the host's
memory bandwidth. The three are records on the run's timeline (engines "host_link" and "host") and
the next device partition starts after them.
"""
from __future__ import annotations

from trnlab.hardware import presets

# The host link of the default target; each compiled target's own is its ChipSpec.host_link_bandwidth
# (ASSUMED there: PCIe Gen5 x16, see trnlab/hardware/presets.py).
HOST_LINK_BYTES_PER_S = presets.TRN2.host_link_bandwidth
HOST_LINK_SOURCE = "assumed: PCIe Gen5 x16, ~63 GB/s per direction (PCI-SIG PCIe 5.0 base spec)"
TRANSFER_LATENCY_NS = 5_000.0          # assumed: per transfer, DMA descriptor setup and a synchronisation
HOST_BYTES_PER_S = 20.0e9              # assumed: one CPU core streaming through DRAM

DEVICE_DTYPES = ("float32", "bfloat16", "float16", "int32", "int64", "int8", "uint8", "int16", "bool")


def on_device(dtype: str) -> bool:
    """Can a tensor of this dtype live on the device?"""
    return dtype in DEVICE_DTYPES


def host_link_bandwidth(target) -> float:
    """Bytes/s per direction between the host and a chip of `target` (a name or a spec)."""
    from trnlab.hardware.device import chip_spec
    return chip_spec(target).host_link_bandwidth


def host_cost(read_from_device: list, nbytes_in: int, nbytes_out: int, out_to_device: bool,
              link_bytes_per_s: float = HOST_LINK_BYTES_PER_S) -> dict:
    """The cost (ns) of one host op: the transfer of the tensors it reads from the device (one per
    tensor), its compute, and the transfer of its output back (if a device op reads it)."""
    to_host = sum(read_from_device)
    back = nbytes_out if out_to_device else 0
    to_host_ns = to_host / link_bytes_per_s * 1e9 + len(read_from_device) * TRANSFER_LATENCY_NS
    to_device_ns = back / link_bytes_per_s * 1e9 + (TRANSFER_LATENCY_NS if out_to_device else 0.0)
    compute_ns = (nbytes_in + nbytes_out) / HOST_BYTES_PER_S * 1e9
    return {"to_host_ns": to_host_ns, "compute_ns": compute_ns, "to_device_ns": to_device_ns,
            "transfer_ns": to_host_ns + to_device_ns, "total_ns": to_host_ns + compute_ns + to_device_ns,
            "bytes_to_host": int(to_host), "bytes_to_device": int(back),
            "link_bytes_per_s": link_bytes_per_s, "link": HOST_LINK_SOURCE}
