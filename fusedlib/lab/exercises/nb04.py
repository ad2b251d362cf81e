"""Checks for notebook 04: Chan's merge of two partials, and the DRAM bytes of stage sums."""
from __future__ import annotations

import torch

from fusedlib import algebra
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb04 as solutions


def _no_correction(a, b):
    """The known-wrong answer: the means merged right, the M2 of the two parts simply added
    (the term δ²·n_a·n_b/n, the spread between the two means, forgotten)."""
    n, mean, _ = solutions.chan_merge(a, b)
    return n, mean, a[2] + b[2]


@exercise(solution=solutions.chan_merge, wrong=_no_correction,
          verified="merging tile partials gives the two-pass mean and variance, whatever the split")
def check_chan_merge(merge) -> None:
    """``merge(a, b)`` with a = (n_a, mean_a, M2_a), b likewise (n a float64 scalar tensor, mean
    and M2 (M,) float64 tensors) → the partials of the rows of both; merging the partials of
    uneven row tiles in order must give the column mean and M2 = N·σ² of the whole."""
    g = torch.Generator().manual_seed(4)
    for rows, tile in ((100, 7), (64, 32), (5, 1)):
        z = torch.randn(rows, 6, generator=g, dtype=torch.float64) * 2 + 50
        n, means, m2s = algebra.tile_partials(z, tile)
        acc = (n[0], means[0], m2s[0])
        for t in range(1, n.shape[0]):
            acc = merge(acc, (n[t], means[t], m2s[t]))
        mean, var = algebra.column_stats_two_pass(z)
        expect(float(acc[0]) == rows, f"the merged count is {float(acc[0])}, expected {rows}")
        expect(torch.allclose(acc[1], mean, rtol=1e-12, atol=0), "the merged mean is not the column mean")
        expect(torch.allclose(acc[2] / rows, var, rtol=1e-10, atol=0),
               "the merged M2 / N is not the column variance: what does the spread between the two means add?")


def _no_partials(n, k, m, tile_rows):
    """The known-wrong answer: the partials' traffic forgotten (GEMM, finalize and row pass
    without them)."""
    tiles = -(-n // tile_rows)
    return solutions.sums_bytes(n, k, m, tile_rows) - 4 * 2 * (2 * tiles * m)


@exercise(solution=solutions.sums_bytes, wrong=_no_partials,
          verified="your byte count equals the cost model's for stage sums at every shape tried")
def check_sums_bytes(predict) -> None:
    """``predict(n, k, m, tile_rows)`` → the DRAM bytes (an int or float) stage sums moves in
    train mode for problem 84 at batch n, in_features k, out_features m, with row tiles of
    ``tile_rows`` rows; checked exactly against :func:`fusedlib.lab.costmodel.cost`."""
    from fusedlib.lab.costmodel import cost
    for n, k, m in ((1024, 8192, 8192), (16384, 4096, 4096), (300, 64, 96), (7, 33, 65)):
        rows = algebra.tile_rows(n, m, "fp32")
        want = cost("84", "sums", n, k, m, "train", "fp32").bytes
        got = float(predict(n, k, m, rows))
        expect(got == want, f"at {n}x{k}->{m} (tiles of {rows} rows): {got:.0f} bytes, the cost model counts "
               f"{want:.0f} ({got - want:+.0f})")
