"""Checks for notebook 03: the folded coefficients, and the full-tensor passes fold removes."""
from __future__ import annotations

import torch

from fusedlib import algebra
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb03 as solutions


def _forgot_the_scale(kind, mean, var, gamma, beta, scale, eps):
    """The known-wrong answer: 84's c without the scale (c = β − aμ instead of sβ − aμ)."""
    a, c = solutions.fold_coefficients(kind, mean, var, gamma, beta, scale, eps)
    return a, (beta - a * mean if kind == "84" else c)


@exercise(solution=solutions.fold_coefficients, wrong=_forgot_the_scale,
          verified="a∘Z + c equals BatchNorm, then the scale (84), and scale, then BatchNorm (33), in float64")
def check_fold_coefficients(fold) -> None:
    """``fold(kind, mean, var, gamma, beta, scale, eps)`` → (a, c), all (M,) float64 tensors
    (``scale`` a one-element tensor for 84, (M,) for 33): V = a∘Z + c must equal the modules'
    own computation on a batch Z, with its batch statistics, for both problems."""
    g = torch.Generator().manual_seed(3)
    n, m, eps = 64, 12, 1e-5
    for kind in ("84", "33"):
        z = torch.randn(n, m, generator=g, dtype=torch.float64) * 3 + 2
        gamma = torch.rand(m, generator=g, dtype=torch.float64) + 0.5
        beta = torch.randn(m, generator=g, dtype=torch.float64)
        scale = (torch.rand(1 if kind == "84" else m, generator=g, dtype=torch.float64) * 2 - 0.5)
        mean, var = algebra.column_stats_two_pass(z)
        bn = torch.nn.functional.batch_norm
        if kind == "84":
            want = bn(z, None, None, gamma, beta, training=True, eps=eps) * scale
        else:
            want = bn(z * scale, None, None, gamma, beta, training=True, eps=eps)
        a, c = fold(kind, mean, var, gamma, beta, scale, eps)
        expect(tuple(a.shape) == (m,) and tuple(c.shape) == (m,), f"problem {kind}: a and c must be (M,) vectors, "
               f"got {tuple(a.shape)} and {tuple(c.shape)}")
        err = ((a * z + c - want).abs().max() / want.abs().max()).item()
        expect(err < 1e-12, f"problem {kind}: a∘Z + c differs from the module's output (max relative error "
               f"{err:.1e}); check where the scale enters")


def _passes(stage: str) -> tuple[int, int]:
    """N×M reads and writes of ``stage`` (84, train), counted from the cost model at a shape
    where an N×M tensor outweighs everything else a pass moves (K = 1)."""
    from fusedlib.lab.costmodel import cost
    n = m = 512
    passes = cost("84", stage, n, 1, m, "train").passes
    return (sum(int(p.read_bytes // (4 * n * m)) for p in passes), sum(int(p.write_bytes // (4 * n * m)) for p in passes))


def _one_statistic_pass():
    """The known-wrong answer: fold's two statistics kernels counted as one read of Z."""
    return {"naive": (7, 4), "fold": (2, 2)}


@exercise(solution=solutions.full_tensor_passes, wrong=_one_statistic_pass,
          verified="the full N×M reads and writes of naive and fold match the cost model")
def check_full_tensor_passes(count) -> None:
    """``count()`` → {"naive": (reads, writes), "fold": (reads, writes)}: how many times each
    stage reads and writes a full N×M tensor (Z or Y) in DRAM in train mode, problem 84."""
    answer = count()
    expect(isinstance(answer, dict) and set(answer) == {"naive", "fold"},
           'answer: a dict {"naive": (reads, writes), "fold": (reads, writes)}')
    for stage in ("naive", "fold"):
        want = _passes(stage)
        expect(tuple(answer[stage]) == want, f"{stage}: {tuple(answer[stage])} (reads, writes) is not right; "
               "list its kernels and what each reads and writes")
