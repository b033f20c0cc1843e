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

Cost of each host op (in the profile, as the op's share of the run): the transfers of the tensors it
reads from the device and of its output back, at the host link's bandwidth plus a fixed latency per
transfer, and its compute at the host's memory bandwidth (bytes read + written).
"""
from __future__ import annotations

# Assumed: PCIe Gen5 x16 between the host and the device, 32 GT/s per lane x 16 lanes, 128b/130b
# encoding ~ 63 GB/s per direction (PCI-SIG, PCI Express Base Specification 5.0). No preset field holds
# the host link yet (trnlab/hardware/presets.py): the lead is asked for one.
HOST_LINK_BYTES_PER_S = 63.0e9
HOST_LINK_SOURCE = "assumed: PCIe Gen5 x16, ~63 GB/s per direction (PCI-SIG PCIe 5.0 base spec)"
TRANSFER_LATENCY_NS = 5_000.0          # assumed: per transfer, DMA descriptor setup and a synchronisation
HOST_BYTES_PER_S = 20.0e9              # assumed: one CPU core streaming through DRAM

DEVICE_DTYPES = ("float32", "bfloat16", "float16", "int32", "int64", "int8", "uint8", "int16", "bool")


def on_device(dtype: str) -> bool:
    """Can a tensor of this dtype live on the device?"""
    return dtype in DEVICE_DTYPES


def host_cost(read_from_device: list, nbytes_in: int, nbytes_out: int, out_to_device: bool) -> dict:
    """The cost (ns) of one host op: transfers in (the tensors it reads from the device), its compute,
    and the transfer of its output back (if a device op reads it)."""
    to_host = sum(read_from_device)
    back = nbytes_out if out_to_device else 0
    transfers = len(read_from_device) + (1 if out_to_device else 0)
    transfer_ns = (to_host + back) / HOST_LINK_BYTES_PER_S * 1e9 + transfers * TRANSFER_LATENCY_NS
    compute_ns = (nbytes_in + nbytes_out) / HOST_BYTES_PER_S * 1e9
    return {"transfer_ns": transfer_ns, "compute_ns": compute_ns, "total_ns": transfer_ns + compute_ns,
            "bytes_to_host": int(to_host), "bytes_to_device": int(back), "link": HOST_LINK_SOURCE}
