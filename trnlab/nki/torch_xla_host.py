"""torch_xla's device calls for NKI code written for a Neuron instance: here the "XLA device" is the host.

AWS's NKI getting-started guide and course labs (the Build on Trainium workshop's NKI lab) call `@nki.jit`
kernels from PyTorch through torch_xla: ``device = xm.xla_device()``, tensors made on it, the kernel called
with them. The zero-edit hook (`zero_edit.py`) serves ``torch_xla``, ``torch_xla.core`` and
``torch_xla.core.xla_model`` from this module where no real torch_xla is installed. The device is the host
CPU: PyTorch's own operations (a lab's reference ``torch.matmul``) run in PyTorch on the CPU, and an NKI
kernel called with the tensors runs on trnlab's simulated NeuronCore (torch in, torch out: `trnlab.nki`).
Nothing is traced lazily into an XLA graph, so `mark_step` and `sync` have nothing to wait for.
"""
from __future__ import annotations

import torch

HOST = torch.device("cpu")


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """The device tensors are made on: the host (trnlab simulates the NeuronCore behind `nki.jit`)."""
    return HOST


def device(index: int | None = None) -> torch.device:
    """``torch_xla.device()`` (torch_xla 2.5 and later): the same as `xla_device`."""
    return HOST


def xla_device_hw(device) -> str:
    """The hardware behind a device: a NeuronCore, simulated."""
    return "NEURON"


def get_xla_supported_devices(devkind: str | None = None, max_devices: int | None = None) -> list[str]:
    return ["xla:0"]


def get_ordinal() -> int:
    return 0


def xrt_world_size() -> int:
    return 1


def world_size() -> int:
    return 1


def is_xla_tensor(tensor) -> bool:
    """Every tensor is on the host here, which stands for the device."""
    return isinstance(tensor, torch.Tensor)


def mark_step(wait: bool = False) -> None:
    """Ends an XLA graph on a Neuron instance; here every operation has already run."""


def sync(wait: bool = False) -> None:
    """``torch_xla.sync()``: as `mark_step`."""


def wait_device_ops(devices=()) -> None:
    """Nothing runs asynchronously here."""
