"""Helpers of the nki instruction-family tests."""
import pytest


def _records(run) -> list:
    """Every timeline record's fields (as the golden check hashes them)."""
    tl = run.timeline
    return [(r.engine, r.opcode, r.start_ns, r.end_ns, r.ready_ns, r.flops, r.hbm_bytes, r.sbuf_bytes,
             r.psum_bytes, r.waited_for) for r in (tl[i] for i in range(len(tl)))]


@pytest.fixture
def records():
    return _records
