"""Checks for notebook 03: what the running buffers track, and the full-tensor passes fold removes."""
from __future__ import annotations

import torch

from fusedlib import algebra
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb03 as solutions


def _moments_of_z(kind, mean, var, scale):
    """The known-wrong answer: the buffers fed Z's own moments for both problems (33's scale,
    which BatchNorm sees, forgotten)."""
    return mean, var


@exercise(solution=solutions.tracked_moments, wrong=_moments_of_z,
          verified="fed to BatchNorm's update, your moments give nn.BatchNorm1d's running buffers for 84 and 33")
def check_tracked_moments(tracked) -> None:
    """``tracked(kind, mean, var, scale)`` → the (mean, biased variance) that BatchNorm's running
    buffers average, from the batch mean and biased variance of Z ((M,) float64 tensors; ``scale``
    one element for 84, (M,) for 33); fed to the update of :func:`fusedlib.algebra.update_running_stats`
    they must give the buffers of the KernelBench module's own nn.BatchNorm1d after a train step."""
    g = torch.Generator().manual_seed(3)
    n, m = 64, 12
    for kind in ("84", "33"):
        z = torch.randn(n, m, generator=g, dtype=torch.float64) * 3 + 2
        scale = (torch.rand(1 if kind == "84" else m, generator=g, dtype=torch.float64) * 2 - 0.5)
        bn = torch.nn.BatchNorm1d(m).double().train()
        with torch.no_grad():
            bn(z if kind == "84" else z * scale)  # 84: BatchNorm, then the scale; 33: the scale first
        mean, var = algebra.column_stats_two_pass(z)
        tm, tv = tracked(kind, mean, var, scale)
        state = algebra.BNState(bn.weight.detach(), bn.bias.detach(), torch.zeros(m, dtype=torch.float64),
                                torch.ones(m, dtype=torch.float64), torch.zeros((), dtype=torch.long),
                                bn.momentum, bn.eps)
        algebra.update_running_stats(state, tm, tv, n)
        expect(torch.allclose(state.running_mean, bn.running_mean, rtol=1e-12, atol=1e-15) and
               torch.allclose(state.running_var, bn.running_var, rtol=1e-12, atol=1e-15),
               f"problem {kind}: the running buffers differ from nn.BatchNorm1d's; what does BatchNorm see in "
               f"problem {kind}: Z, or Z scaled column by column?")


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
