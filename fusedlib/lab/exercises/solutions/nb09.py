"""Solutions for notebook 09 (data parallelism)."""
import torch


def merge_ranks(moments: torch.Tensor):
    """Every rank's (n, mean, M2) of each column, (R, 3, M), merged with Chan's formula in rank
    order, passing over ranks with no rows → (mean (M,), biased variance (M,), N)."""
    acc = None
    for n, mean, m2 in moments:
        if n[0] == 0:
            continue
        if acc is None:
            acc = (n, mean, m2)
            continue
        na, ma, m2a = acc
        total = na + n
        delta = mean - ma
        acc = (total, ma + delta * (n / total), m2a + m2 + delta * delta * (na * n / total))
    n, mean, m2 = acc
    return mean, m2 / n, int(n[0])


def sync_floats(m: int, k: int) -> tuple[int, int]:
    """Floats one rank puts into the collectives of one train step of a fused module with
    out_features m and in_features k: the forward's all-gather of its column moments
    [n; mean; M2] (3·m), and the backward's all-reduce of [S1; S2; Σx; N] (2·m + k + 1)."""
    return 3 * m, 2 * m + k + 1
