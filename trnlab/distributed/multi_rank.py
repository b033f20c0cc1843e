"""Where `nki.multi_rank_simulate`'s ranks run: the chips and cores of a Cluster (trnlab/nki/multi_rank.py).

All ranks' physical cores on one chip if they fit; otherwise one rank per chip of the smallest instance
of that chip with enough chips (ASSUMED: AWS publishes nothing on how its simulator places ranks).
nki lends nothing upward: this module is found through the "trnlab.multi_rank_cluster" entry point.
"""
from __future__ import annotations

from trnlab.distributed import topology
from trnlab.distributed.cluster import Cluster


def placement(chip, world_size: int, lnc: int, mode: str):
    """(topology, slots): where the ranks' physical cores are (see the module docstring)."""
    from trnlab.hardware.device import Device
    if world_size * lnc <= chip.cores:
        device = Device(chip, mode=mode, cores=world_size * lnc, name="chip0")
        return topology.chip_cores(chip), [(device, s) for s in range(world_size * lnc)]
    instances = (topology.TRN1_32XLARGE, topology.TRN2_48XLARGE, topology.TRN2_ULTRASERVER,
                 topology.TRN3_ULTRASERVER_GEN1, topology.TRN3_ULTRASERVER_GEN2)
    fits = [t for t in instances if t.chip.name == chip.name and t.ranks >= world_size]
    if not fits:
        raise ValueError(f"nki.multi_rank_simulate: {world_size} ranks of LNC={lnc} need more {chip.name} chips than "
                         f"trnlab's largest {chip.name} topology has")
    devices = [Device(chip, mode=mode, cores=lnc, name=f"chip{r}") for r in range(world_size)]
    return fits[0], [(d, c) for d in devices for c in range(lnc)]


def make_cluster(chip, world_size: int, lnc: int, timing: bool, algorithm: str | None = None):
    """(cluster, slots): a Cluster of `world_size` ranks of `lnc` physical cores each, and the
    (device, core) of every physical core, rank by rank."""
    mode = "timing" if timing else "full"
    where, slots = placement(chip, world_size, lnc, mode)
    return Cluster(where, ranks=world_size, mode=mode, algorithm=algorithm, lnc=lnc, slots=slots), slots
