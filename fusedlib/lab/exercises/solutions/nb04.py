"""Solutions for notebook 04 (stage sums)."""


def merge_order(T: int) -> list[list[list[int]]]:
    """The kernels' merge order of a column's T row-tile partials (common.cuh merge_quarter,
    algebra.chan_merge): the tiles cut into 4 contiguous quarters, quarter q of T from
    ⌊qT/4⌋ to ⌊(q+1)T/4⌋; each quarter of Q tiles from lo into 8 contiguous chains, chain g from
    lo + ⌊gQ/8⌋ to lo + ⌊(g+1)Q/8⌋; empty chains and quarters left out."""
    def runs(lo: int, count: int, parts: int) -> list[tuple[int, int]]:
        bounds = [lo + count * g // parts for g in range(parts + 1)]
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if a < b]
    return [[list(range(a, b)) for a, b in runs(qlo, qhi - qlo, 8)] for qlo, qhi in runs(0, T, 4)]


def sums_bytes(n: int, k: int, m: int, tile_rows: int) -> int:
    """DRAM bytes of stage sums in train mode, problem 84 (fp32, 4 bytes an element):
    the GEMM reads X and W, writes Z' and the partials (2·T·M, T = ceil(N / tile_rows)); the
    finalize reads the partials, γ, β, b and the two running buffers (5 M-vectors) and s (one
    number) and writes a, c and the two buffers (4 M-vectors); the row softmax reads Z', a
    and c and writes Y."""
    tiles = -(-n // tile_rows)
    partials = 2 * tiles * m
    gemm = n * k + m * k + n * m + partials
    finalize = partials + 5 * m + 1 + 4 * m
    rows = n * m + 2 * m + n * m
    return 4 * (gemm + finalize + rows)
