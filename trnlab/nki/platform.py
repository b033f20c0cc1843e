"""The target a kernel runs on when it names none: AWS's environment variables, then trnlab's Trn2.

- ``NEURON_PLATFORM_TARGET_OVERRIDE``: AWS's CPU simulator "models different NeuronCore generations.
  Set the target using the NEURON_PLATFORM_TARGET_OVERRIDE environment variable": ``trn1`` or
  ``gen2`` (Trn1, NeuronCore-v2), ``trn2`` or ``gen3`` (Trn2), ``trn3`` or ``gen4`` (Trn3)
  (NKI CPU Simulator guide, "Target Platform", awsdocs-neuron `nki/guides/nki_simulator`). Unset,
  AWS's simulator detects the machine's chip or takes trn3; trnlab takes trn2, its default preset.
- ``NKI_NC_VERSION``: set by AWS's NKI Library harness before each simulated kernel, to the test's
  platform as an `nki.isa.nc_version` name (``gen2``/``gen3``/``gen4``; test/utils/simulation_setup.py
  of github aws-neuron/nki-library). Not on AWS's documentation pages; as the more specific of the
  two (set per kernel), it wins.

An explicit target (``@nki.jit(target=...)``, ``nki.run(..., target=...)``) wins over both.
"""
from __future__ import annotations

from trnlab import config
from trnlab.nki.errors import NKIError

DEFAULT = "trn2"
NAMES = {"trn1": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2", "trn3": "trn3", "gen4": "trn3",
         "inf2": "trn1", "trn3_a0": "trn3", "trn3pre": "trn3"}


class PlatformTargetError(NKIError):
    """Rule: a platform variable names one of AWS's targets."""


def default_target() -> str:
    """The preset name ("trn1" | "trn2" | "trn3") of a kernel run without an explicit target."""
    for switch in ("nc_version", "platform_target"):
        text = str(config.get(switch)).strip()
        if text:
            key = text.lower().removeprefix("nc_version.")
            if key not in NAMES:
                env = config.SWITCHES[switch].env
                raise PlatformTargetError(f"{env}={text!r} names no target; AWS's values are "
                                          f"trn1|gen2, trn2|gen3, trn3|gen4")
            return NAMES[key]
    return DEFAULT
