def ring_all_reduce_us(nbytes, ranks, link_GBps, hop_us):
    p = ranks
    steps = 2 * (p - 1)  # reduce-scatter, then all-gather: p - 1 steps each
    sent = 2 * (p - 1) / p * nbytes  # bytes each rank sends
    return steps * hop_us + sent / (link_GBps * 1e9) * 1e6
