"""Checks for notebook 04: the merge order of the tile partials, and the DRAM bytes of stage sums."""
from __future__ import annotations

import functools

import torch

from fusedlib import algebra
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb04 as solutions


def _strided_chains(T: int) -> list[list[list[int]]]:
    """The known-wrong answer: each quarter's tiles dealt to the 8 chains in turn (tile t to
    chain t % 8), as threads often share work, instead of contiguous chains."""
    order = []
    for quarter in solutions.merge_order(T):
        tiles = [t for chain in quarter for t in chain]
        order.append([c for c in ([t for i, t in enumerate(tiles) if i % 8 == g] for g in range(8)) if c])
    return order


@exercise(solution=solutions.merge_order, wrong=_strided_chains,
          verified="your order is the kernels' for every T tried, and merged in it the partials give "
                   "algebra.chan_merge's bits")
def check_merge_order(merge_order) -> None:
    """``merge_order(T)`` → the row tiles 0 … T − 1 of a column as quarters of chains of tile
    indices (lists of lists of lists of ints), in the order the kernels merge them; checked
    against algebra.chan_merge's order for T from 1 to 1000, then used to merge float32
    partials, which must give algebra.chan_merge's bits (it also takes each quarter's means
    about its first tile's, and merges runs of 64 tiles within a chain: neither matters below
    64 tiles a chain)."""
    def want(T):
        return [[list(range(a, b)) for a, b in algebra._runs(qlo, qhi - qlo, algebra.MERGE_CHAINS)]
                for qlo, qhi in algebra._runs(0, T, algebra.MERGE_QUARTERS)]
    for T in (1, 2, 5, 8, 9, 31, 33, 128, 1000):
        got = merge_order(T)
        if T <= 9:
            expect(got == want(T), f"T = {T}: expected {want(T)}, got {got}")
        starts = lambda order: [[chain[0] for chain in quarter] for quarter in order]
        expect(got == want(T), f"T = {T}: the chains should start at tiles {starts(want(T))} (each chain a "
               f"contiguous run of its quarter's tiles); yours hold {str(got)[:160]}")
    g = torch.Generator().manual_seed(4)
    z = (torch.randn(33 * 16 + 5, 3, generator=g, dtype=torch.float64) * 2 + 50).float()
    n, means, m2s = algebra.tile_partials(z, 16)
    mean, var = algebra.chan_merge(n, means, m2s)
    chain = lambda ts: functools.reduce(algebra._chan_pair, [(n[t], means[t] - means[q[0][0]], m2s[t]) for t in ts])
    quarters = []
    for q in merge_order(n.shape[0]):
        qn, qmean, qm2 = functools.reduce(algebra._chan_pair, [chain(c) for c in q])
        quarters.append((qn, qmean + means[q[0][0]], qm2))
    qn, qmean, qm2 = functools.reduce(algebra._chan_pair, quarters)
    expect(torch.equal(qmean, mean) and torch.equal(qm2 / qn, var),
           "merged in your order, the partials do not give algebra.chan_merge's bits")


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
