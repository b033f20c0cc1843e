def largest_batch(tpot_us: dict[int, float], target_us: float) -> int:
    # mistake: walks up the batch sizes and stops at the first one that misses the target
    best = 0
    for batch in sorted(tpot_us):
        if tpot_us[batch] > target_us:
            break
        best = batch
    return best
