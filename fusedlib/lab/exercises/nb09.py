"""Checks for notebook 09: merging the ranks' column moments, and what a rank sends a step."""
from __future__ import annotations

import torch

from fusedlib import algebra
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb09 as solutions


def _unweighted(moments):
    """The known-wrong answer: the ranks' means and variances averaged as if every rank held
    the same number of rows, and the spread between their means forgotten."""
    live = moments[moments[:, 0, 0] > 0]
    return live[:, 1].mean(0), (live[:, 2] / live[:, 0]).mean(0), int(live[:, 0, 0].sum())


@exercise(solution=solutions.merge_ranks, wrong=_unweighted,
          verified="the merged ranks give the mean, variance and size of the whole batch, for uneven ranks too")
def check_merge_ranks(merge) -> None:
    """``merge(moments)`` with moments (R, 3, M) float64, rank r's [n; mean; M2] (n repeated in
    each column, 0 for a rank with no rows) → (mean (M,), biased variance (M,), N): those of the
    rows of all ranks together, checked against two passes over the concatenated batch."""
    g = torch.Generator().manual_seed(9)
    for shards in ((50, 50), (97, 1, 30), (10, 0, 7, 200)):
        z = torch.randn(sum(shards), 4, generator=g, dtype=torch.float64) * 3 + 20
        parts, lo = [], 0
        for rows in shards:
            parts.append(algebra.column_moments(z[lo:lo + rows]))
            lo += rows
        mean, var, n = merge(torch.stack(parts))
        want_mean, want_var = algebra.column_stats_two_pass(z)
        expect(int(n) == sum(shards), f"ranks of {shards} rows: N = {int(n)}, expected {sum(shards)}")
        expect(torch.allclose(mean, want_mean, rtol=1e-12, atol=0),
               f"ranks of {shards} rows: the mean is not the whole batch's (are the ranks weighted by their rows?)")
        expect(torch.allclose(var, want_var, rtol=1e-10, atol=0),
               f"ranks of {shards} rows: the variance is not the whole batch's (what does the spread between the "
               "ranks' means add?)")


def _no_centre(m, k):
    """The known-wrong answer: the backward's sums without Σx, the centre dW needs."""
    return 3 * m, 2 * m + 1


@exercise(solution=solutions.sync_floats, wrong=_no_centre,
          verified="your counts are the floats the specification's collectives carry, at every shape tried")
def check_sync_floats(count) -> None:
    """``count(m, k)`` → (floats a rank sends in the forward's collective, floats in the
    backward's) for out_features m and in_features k; checked against what
    :func:`fusedlib.algebra.stage_forward` (``gather``) and
    :func:`fusedlib.algebra.train_backward_fused` (``reduce``) hand to their collectives."""
    g = torch.Generator().manual_seed(10)
    for m, k in ((6, 5), (48, 40), (3, 64)):
        x = torch.randn(12, k, generator=g, dtype=torch.float64)
        w = torch.randn(m, k, generator=g, dtype=torch.float64)
        bn = algebra.BNState(torch.ones(m, dtype=torch.float64), torch.zeros(m, dtype=torch.float64),
                             torch.zeros(m, dtype=torch.float64), torch.ones(m, dtype=torch.float64),
                             torch.tensor(0), 0.1, 1e-5)
        sent = []
        gather = lambda t: sent.append(t.numel()) or t[None]  # noqa: E731  one rank: itself
        y = algebra.stage_forward("33", "fused", x, w, torch.zeros(m, dtype=torch.float64),
                                  torch.ones(m, dtype=torch.float64), bn, True, gather=gather)
        z = x @ w.t()
        zc = z - z.mean(0)
        algebra.train_backward_fused("33", torch.ones_like(y), None, zc, zc.pow(2).mean(0), x, w,
                                     torch.ones(m, dtype=torch.float64), bn.weight, bn.bias, bn.eps,
                                     reduce=lambda t: sent.append(t.numel()) or t)
        got = tuple(int(v) for v in count(m, k))
        expect(got == tuple(sent), f"at out_features {m}, in_features {k}: {got}, the collectives carry {tuple(sent)} "
               "floats")
