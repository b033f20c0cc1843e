"""`nki.simulator`: the module form of AWS's CPU simulator entry point,
``nki.simulator.simulate_kernel(kernel, args, kwargs, lnc)`` — what vLLM-Neuron calls when
``NKI_SIMULATOR=1`` (AWS's "NKI CPU Simulator" page for vllm-neuron). It runs like
``nki.cpu_simulate(kernel)[lnc](*args, **kwargs)`` and returns the outputs.
"""
from __future__ import annotations


def simulate_kernel(kernel, args=(), kwargs=None, lnc: int = 1):
    """Run `kernel` on the simulator with positional `args` and keyword `kwargs`; `lnc` physical
    cores per logical core (2: one program per core, launched together)."""
    from trnlab import nki
    return nki.cpu_simulate(kernel)[lnc](*tuple(args), **dict(kwargs or {}))
