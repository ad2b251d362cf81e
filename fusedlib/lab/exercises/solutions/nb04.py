"""Solutions for notebook 04 (stage sums)."""
import torch


def chan_merge(a, b):
    """Merge two partials (n, mean, M2) of the same columns (Chan, Golub & LeVeque 1983):
    n = n_a + n_b, δ = mean_b − mean_a, mean = mean_a + δ·n_b/n, M2 = M2_a + M2_b + δ²·n_a·n_b/n."""
    na, ma, m2a = a
    nb, mb, m2b = b
    n = na + nb
    delta = mb - ma
    return n, ma + delta * (nb / n), m2a + m2b + delta * delta * (na * nb / n)


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
