"""Checks for notebook 04: the merge order of the tile partials, and the DRAM bytes of stage sums."""
from __future__ import annotations

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
          verified="your order is the kernels' (algebra.merge_order) for every T tried")
def check_merge_order(merge_order) -> None:
    """``merge_order(T)`` → the row tiles 0 … T − 1 of a column as quarters of chains of tile
    indices (lists of lists of lists of ints), in the order the kernels merge them; checked
    against :func:`fusedlib.algebra.merge_order` for T from 1 to 1000."""
    starts = lambda order: [[chain[0] for chain in quarter] for quarter in order]  # noqa: E731
    for T in (1, 2, 5, 8, 9, 31, 33, 128, 1000):
        got, want = merge_order(T), algebra.merge_order(T)
        expect(got == want, f"T = {T}: expected {want}, got {got}" if T <= 9 else
               f"T = {T}: the chains should start at tiles {starts(want)} (each chain a contiguous run of its "
               f"quarter's tiles); yours hold {str(got)[:160]}")


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
