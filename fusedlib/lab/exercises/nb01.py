"""Checks for notebook 01 (the algebra): derive the folded coefficients; write Chan's merge."""
from __future__ import annotations

import torch

from fusedlib import algebra
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb01 as solutions
from fusedlib.reference import make_reference


def _fold_forgets_the_scaled_variance(problem, mean, var, gamma, beta, scale, eps):
    """The known-wrong answer: 33/39 folded as if the scale came after BatchNorm (σ² not scaled)."""
    a = scale * gamma / torch.sqrt(var + eps)
    return a, (beta - a * mean) if problem != "84" else (scale * beta - a * mean)


@exercise(solution=solutions.fold, wrong=_fold_forgets_the_scaled_variance,
          verified="a∘Z' + c equals the reference module's train-mode output before softmax (84) and "
                   "BatchNorm's output (33), zero, negative and tiny scales included")
def check_fold(fold) -> None:
    """``fold(problem, mean, var, gamma, beta, scale, eps)`` → (a, c), all float64 tensors of
    shape (M,) (``scale``: (1,) for 84, (M,) for 33), ``mean`` and ``var`` the batch statistics
    of Z' = XWᵀ (no bias). Compared with the reference modules in float64."""
    g = torch.Generator().manual_seed(7)
    n, k, m = 50, 12, 9
    x = torch.rand(n, k, generator=g, dtype=torch.float64)
    for problem in ("84", "33"):
        ref = make_reference(problem, k, m, seed=3).double()
        with torch.no_grad():
            ref.bn.weight.copy_(1 + 0.3 * torch.randn(m, generator=g, dtype=torch.float64))
            ref.bn.bias.copy_(0.3 * torch.randn(m, generator=g, dtype=torch.float64))
            if problem == "84":
                ref.scale.fill_(1.7)
            else:
                ref.scale.copy_(torch.randn(m, generator=g, dtype=torch.float64))
                ref.scale[:3] = torch.tensor([0.0, -2.5, 1e-4], dtype=torch.float64)
        zp = x @ ref.gemm.weight.detach().T
        mean, var = algebra.column_stats_two_pass(zp)
        a, c = fold(problem, mean, var, ref.bn.weight.detach(), ref.bn.bias.detach(), ref.scale.detach(), ref.bn.eps)
        expect(a.shape == (m,) and c.shape == (m,), f"problem {problem}: a and c must have shape ({m},), got "
                                                    f"{tuple(a.shape)} and {tuple(c.shape)}")
        with torch.no_grad():
            z = ref.gemm(x)
            want = ref.scale * ref.bn(z) if problem == "84" else ref.bn(z * ref.scale)
        err = ((a * zp + c - want).norm() / want.norm()).item()
        expect(err < 1e-10, f"problem {problem}: a∘Z' + c differs from the module by {err:.1e} (relative); "
                            + ("where does the scale act on the variance?" if problem == "33" else
                               "check where s multiplies"))


def _merge_without_the_shift(a, b):
    """The known-wrong answer: the M2 of the parts added, their means' difference forgotten."""
    na, ma, m2a = a
    nb, mb, m2b = b
    n = na + nb
    return n, (na * ma + nb * mb) / n, m2a + m2b


@exercise(solution=solutions.merge, wrong=_merge_without_the_shift,
          verified="merged in a chain and as a tree, uneven tiles give the two-pass mean and variance, "
                   "also in float32 at |μ|/σ = 1000")
def check_merge(merge) -> None:
    """``merge((n_a, mean_a, M2_a), (n_b, mean_b, M2_b))`` → (n, mean, M2) for tensors of
    column partials (n: a scalar tensor; mean, M2: (M,)). Checked by merging the partials
    of uneven row tiles in a chain and as a balanced tree."""
    g = torch.Generator().manual_seed(11)
    for dtype, offset, tol in ((torch.float64, 3.0, 1e-12), (torch.float32, 1000.0, 1e-3)):
        z = offset + torch.randn(203, 6, generator=g, dtype=torch.float64)
        z = z.to(dtype)
        exact_mean, exact_var = algebra.column_stats_two_pass(z.double())
        bounds = [0, 1, 17, 64, 65, 130, 203]
        parts = []
        for lo, hi in zip(bounds, bounds[1:]):
            t = z[lo:hi]
            mu = t.mean(0)
            parts.append((torch.tensor(float(hi - lo), dtype=dtype), mu, ((t - mu) ** 2).sum(0)))
        chain = parts[0]
        for p in parts[1:]:
            chain = merge(chain, p)
        level = parts
        while len(level) > 1:
            level = [merge(level[i], level[i + 1]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
        for name, (n, mean, m2) in (("chain", chain), ("tree", level[0])):
            expect(float(n) == z.shape[0], f"{name}: the merged count is {float(n)}, not {z.shape[0]}")
            mean_err = ((mean.double() - exact_mean).abs() / exact_var.sqrt()).max().item()
            var_err = ((m2.double() / z.shape[0] - exact_var).abs() / exact_var).max().item()
            expect(mean_err < tol and var_err < tol,
                   f"{name} of {len(parts)} tiles in {dtype}: mean off by {mean_err:.1e} σ, variance by "
                   f"{var_err:.1e} (relative); the tolerance is {tol:.0e}")
