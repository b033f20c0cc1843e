def matmul_instructions(M: int, N: int, K: int) -> dict:
    def tiles(size, tile):  # the sizes of the tiles along one dimension; the last holds what is left
        return [min(tile, size - start) for start in range(0, size, tile)]

    counts = {}
    for m in tiles(M, 128):
        for n in tiles(N, 512):
            for k in tiles(K, 128):
                counts[(k, m, n)] = counts.get((k, m, n), 0) + 1
    return counts
