def ring_all_reduce_us(nbytes, ranks, link_GBps, hop_us):
    # mistake: as if the whole buffer went over the link twice, and the hops cost nothing
    return 2 * nbytes / (link_GBps * 1e9) * 1e6
