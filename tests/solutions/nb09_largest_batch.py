def largest_batch(tpot_us: dict[int, float], target_us: float) -> int:
    meeting = [batch for batch, tpot in tpot_us.items() if tpot <= target_us]
    return max(meeting, default=0)
