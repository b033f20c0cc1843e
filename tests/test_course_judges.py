"""Every judge refuses data that is not an answer: empty, too short, too long, NaN, the wrong type.

A judge runs in the grader's process on the plain data a kernel sent back. That data is whatever the
kernel chose to send: the checker's `run` shapes it, but a notebook can publish its own payload (the
grader's hook and nonce are in the kernel), so `judge` must not trust the shape `run` would have
given. Each junk value below is sent for every case of every registered exercise; none may pass.
"""

from __future__ import annotations

import numpy as np
import pytest

from trnlab.course import exercises, plain
from trnlab.course.exercises import load_all

IDS = sorted(load_all())
SEED = 0

JUNK = {
    "empty list": [],
    "empty dict": {},
    "none": None,
    "nan": float("nan"),
    "text": "correct",
    "list of empty lists": [[], [], []],
    "list of nans": [float("nan")] * 3,
    "huge number": 1e308,
    "empty array": np.zeros((0,), dtype=np.float32),
    "true": True,
}


def _payload(ex, value) -> str:
    parts = []
    for index, spec in enumerate((ex.spec,)):
        cases = exercises.draw_cases(spec, exercises.part_seed(SEED, index))
        parts.append([{"value": value} for _ in cases])
    return plain.encode({"parts": parts})


@pytest.mark.parametrize("junk", sorted(JUNK))
@pytest.mark.parametrize("grade_id", IDS)
def test_a_judge_refuses_junk_for_every_case(grade_id, junk):
    ex = exercises.get(grade_id)
    result = exercises.judge(ex, SEED, _payload(ex, JUNK[junk]))
    assert not result.passed, f"{grade_id} accepted {junk!r} for every case"
    assert result.status == "failed", result


def test_latency_metrics_refuses_an_empty_answer_with_a_reason():
    ex = exercises.get("nb09_latency_metrics")
    result = exercises.judge(ex, SEED, _payload(ex, []))
    assert not result.passed and "three" in result.message, result.message


def test_latency_metrics_refuses_two_right_numbers_without_the_third():
    ex = exercises.get("nb09_latency_metrics")
    arrival, tokens = exercises.draw_cases(ex.spec, exercises.part_seed(SEED, 0))[0]
    ttft = tokens[0] - arrival
    tpot = (tokens[-1] - tokens[0]) / (len(tokens) - 1)
    payload = plain.encode({"parts": [[{"value": [ttft, tpot]}]]})
    assert not exercises.judge(ex, SEED, payload).passed
