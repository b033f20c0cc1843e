def decode_batch(tpot_budget_us: float) -> int:
    # mistake: a straight line through the two measured steps (126.6 µs for 1 sequence, 573.5 µs for 16),
    # as if every batch size had its own program: the buckets' padding is ignored
    per_sequence_us = (573.5 - 126.6) / 15
    return max(0, min(16, 1 + int((tpot_budget_us - 126.6) // per_sequence_us)))
