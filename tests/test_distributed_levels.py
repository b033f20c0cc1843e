"""Trn3's per-level fabric: a collective is costed level by level (sled, rack, racks), each level over
its own link, and the whole is never faster than its slowest stage."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlab.distributed import collectives as C
from trnlab.distributed import scaling
from trnlab.distributed import topology as T
from trnlab.distributed import validation

GEN1, GEN2 = T.TRN3_ULTRASERVER_GEN1, T.TRN3_ULTRASERVER_GEN2


def test_the_three_levels_carry_the_figures_of_awss_trn3_page():
    assert (T.TRN3_IN_SERVER.bandwidth, T.TRN3_BETWEEN_SERVERS.bandwidth, T.TRN3_BETWEEN_RACKS.bandwidth) == \
        (256e9, 320e9, 128e9)
    assert [(name, size) for name, size, _ in GEN2.levels()] == \
        [("in server", 4), ("between servers", 18), ("between racks", 2)]
    assert GEN2.ranks == 144 and GEN1.ranks == 64  # 36 servers × 4 chips; 4 × 16 [HW-trn3]
    assert "ASSUMED" in T.TRN3_IN_SERVER.source and "ASSUMED" in GEN2.notes


def test_a_collective_within_a_server_uses_the_server_figure():
    B, p = 2**28, 4
    c = C.cost("all_reduce", B, GEN2, "ring", ranks=p)
    link = T.TRN3_IN_SERVER
    assert c.algorithm == "ring"
    assert c.time_ns == pytest.approx(2 * (p - 1) * link.hop_latency_ns + 2 * (p - 1) / p * B / 256e9 * 1e9)


def test_a_collective_across_racks_is_bounded_by_the_rack_link():
    B = 2**30
    c = C.cost("all_reduce", B, GEN2, "ring")
    stages = C.level_costs("all_reduce", B, GEN2, "ring")
    rack = stages[-1]
    assert rack.level == "between racks" and rack.link == T.TRN3_BETWEEN_RACKS.name
    # each rack stage moves the share left after the sled and the rack reduced: B / (4 × 18) per chip
    assert rack.nbytes == pytest.approx(B / 72)
    assert rack.transfer_ns == pytest.approx(2 * (2 - 1) / 2 * (B / 72) / 128e9 * 1e9)
    assert c.time_ns >= rack.time_ns and c.time_ns >= max(s.time_ns for s in stages)
    assert c.time_ns == pytest.approx(sum(s.time_ns for s in stages))
    # a slower rack link slows exactly the rack stage
    slow = GEN2.derive(rack_link=dataclasses.replace(T.TRN3_BETWEEN_RACKS, bandwidth=64e9))
    assert C.cost("all_reduce", B, slow, "ring").time_ns - c.time_ns == pytest.approx(rack.transfer_ns)


def test_groups_fill_sleds_then_racks_and_refuse_partial_ones():
    assert [(g.ranks_per_server, g.servers, g.racks) for g in (GEN2.group(4), GEN2.group(8), GEN2.group(144))] == \
        [(4, 1, 1), (4, 2, 1), (4, 18, 2)]
    with pytest.raises(ValueError, match="must fill whole racks of 72 ranks"):
        GEN2.group(96)
    with pytest.raises(ValueError, match="2 racks need an inter-rack link"):
        GEN2.derive(rack_link=None)


def test_send_recv_to_another_rack_crosses_the_rack_link():
    c = C.cost("send_recv", 2**20, GEN2, ranks=144)
    assert c.transfer_ns == pytest.approx(2**20 / 128e9 * 1e9)


def test_mesh_crosses_the_switch_between_servers_in_one_hop():
    stages = C.level_costs("all_gather", 2**20, GEN2, "mesh")
    assert [s.algorithm for s in stages] == ["mesh", "mesh", "ring"]  # the racks are joined by direct links
    assert [s.steps for s in stages] == [1, 1, 1]


SIZES = [1, 2, 3, 4, 8, 12, 36, 72, 144]


@settings(max_examples=40, deadline=None)
@given(nbytes=st.integers(1, 2**32), a=st.sampled_from(SIZES), b=st.sampled_from(SIZES),
       algorithm=st.sampled_from(["ring", "mesh"]))
def test_more_ranks_and_more_levels_are_never_faster(nbytes, a, b, algorithm):
    small, large = sorted((a, b))
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert C.cost(op, nbytes, GEN2, algorithm, small).time_ns <= C.cost(op, nbytes, GEN2, algorithm, large).time_ns


@settings(max_examples=40, deadline=None)
@given(nbytes=st.integers(1, 2**32), op=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]))
def test_each_level_works_on_the_share_the_levels_below_leave(nbytes, op):
    stages = C.level_costs(op, nbytes, GEN2, "ring")
    assert [s.nbytes for s in stages] == pytest.approx([nbytes, nbytes / 4, nbytes / 72])
    total = C.cost(op, nbytes, GEN2, "ring")
    assert total.time_ns == pytest.approx(sum(s.time_ns for s in stages))
    assert total.time_ns >= max(s.time_ns for s in stages)


def test_trn1_and_trn2_keep_their_single_level_figures():
    assert T.TRN2_ULTRASERVER.racks == 1 and [n for n, _, _ in T.TRN2_ULTRASERVER.levels()] == \
        ["in server", "between servers"]
    B, us = 2**28, T.TRN2_ULTRASERVER
    c = C.cost("all_reduce", B, us, "ring")
    intra, inter = T.NEURONLINK_V3, T.NEURONLINK_V3_ULTRA
    expected = (2 * 15 * intra.hop_latency_ns + 2 * 15 / 16 * B / intra.bandwidth * 1e9
                + 2 * 3 * inter.hop_latency_ns + 2 * 3 / 4 * (B / 16) / inter.bandwidth * 1e9)
    assert c.time_ns == pytest.approx(expected)


def test_scaling_groups_on_trn3_span_racks_only_when_they_must():
    g = scaling._group(GEN1, 8, 8)  # 8 ranks, 8 chips apart: 64 chips, both racks of 32
    assert (g.ranks_per_server, g.servers, g.racks) == (1, 4, 2)
    g = scaling._group(GEN2, 8, 8)  # 64 chips: inside one rack of 72
    assert (g.ranks_per_server, g.servers, g.racks) == (1, 8, 1)


def test_the_trn2_run_is_compared_with_the_model_and_the_gaps_reported():
    rows = validation.trn2_rows()
    assert len(rows) == len(validation.PUBLISHED_TRN2_16)
    small, large = rows[0], rows[-1]
    assert small["measured / documented"] > 10  # a ~300 µs floor the link figures do not contain
    assert 0.5 < large["measured / calibrated"] < 2


def test_the_figures_docs_quote_for_a_gen2_all_reduce():
    """docs/distributed.md, "Trn3 as built": the per-level model against the single NeuronLink-v4 figure."""
    one_figure = GEN2.derive(ranks_per_server=144, servers=1, racks=1, intra=T.NEURONLINK_V4, inter=None,
                             rack_link=None)
    big = C.cost("all_reduce", 2**30, GEN2, "ring")
    assert [round(s.time_ns / 1e3) for s in C.level_costs("all_reduce", 2**30, GEN2, "ring")] == [6300, 1636, 120]
    assert round(big.time_ns / 1e3) == 8055
    assert big.time_ns / C.cost("all_reduce", 2**30, one_figure, "ring").time_ns == pytest.approx(6.4, abs=0.05)
    small = (C.cost("all_reduce", 2**10, GEN2, "ring").time_ns, C.cost("all_reduce", 2**10, one_figure, "ring").time_ns)
    assert [round(t / 1e3) for t in small] == [63, 429]
    assert sum(link.bandwidth for _, _, link in GEN2.levels()) == 704e9


def test_the_trn2_table_in_the_docs_is_the_one_validation_prints():
    from pathlib import Path
    docs = (Path(__file__).parent.parent / "docs" / "distributed.md").read_text()
    assert validation.markdown(validation.trn2_rows()) in docs
