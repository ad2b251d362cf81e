"""Checks for notebook 07: state derived from parameters, and what a version counter misses."""
from __future__ import annotations

import torch

from fusedlib import algebra
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb07 as solutions


class _VersionKeyedSplit:
    """The known-wrong answer: parts cached under (data_ptr, version, shape)."""

    def __init__(self):
        self.key, self.parts = None, None

    def __call__(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = (w.data_ptr(), w._version, tuple(w.shape))
        if key != self.key:
            self.key, self.parts = key, algebra.tf32_split(w.detach())
        return self.parts


def _current(parts, w: torch.Tensor) -> bool:
    big, small = algebra.tf32_split(w.detach())
    return torch.equal(parts[0], big) and torch.equal(parts[1], small)


@exercise(solution=solutions.FreshSplit, wrong=_VersionKeyedSplit,
          verified="the parts match W after a fused optimizer step, a .data write and fresh tensors")
def check_fresh_split(make_split) -> None:
    """``make_split()`` gives a callable W → (w_big, w_small); every call must return the parts
    of W as it is at that call, through the three writes notebook 07 shows."""
    g = torch.Generator().manual_seed(1)
    split = make_split()
    p = torch.nn.Parameter(torch.randn(40, 24, generator=g))
    opt = torch.optim.AdamW([p], lr=1e-2, fused=True)
    expect(_current(split(p), p), "the first call did not return W's parts")
    for step in range(3):
        p.grad = torch.randn(40, 24, generator=g)
        opt.step()
        expect(_current(split(p), p), f"after fused AdamW step {step + 1} the parts are those of an older W")
    p.data.mul_(0.9)
    expect(_current(split(p), p), "after a write through .data the parts are those of the W before it")
    for _ in range(3):
        w = torch.randn(40, 24, generator=g)
        expect(_current(split(w), w), "a fresh tensor at the same address got another tensor's parts")
        del w


def _forgetful_update(running_mean, running_var, z, momentum):
    """The known-wrong answer: the batch's biased variance goes into the running variance."""
    mean, var = z.mean(0), z.var(0, unbiased=False)
    return (1 - momentum) * running_mean + momentum * mean, (1 - momentum) * running_var + momentum * var


@exercise(solution=solutions.running_update, wrong=_forgetful_update,
          verified="the running buffers match nn.BatchNorm1d's after batches of 2, 5, 64 and 1024 rows")
def check_running_update(update) -> None:
    """``update(running_mean, running_var, z, momentum)`` must return BatchNorm1d's buffers after
    a train-mode forward on ``z`` (N, M), for small and large N, in float64."""
    g = torch.Generator().manual_seed(3)
    bn = torch.nn.BatchNorm1d(6, momentum=0.2).double()
    mean, var = bn.running_mean.clone(), bn.running_var.clone()
    for n in (2, 5, 64, 1024):
        z = torch.rand(n, 6, generator=g, dtype=torch.float64) * 3 + 1
        bn(z)
        mean, var = update(mean, var, z, bn.momentum)
        expect(torch.allclose(mean, bn.running_mean, rtol=1e-12, atol=0),
               f"after a batch of {n} rows the running mean differs from BatchNorm1d's")
        expect(torch.allclose(var, bn.running_var, rtol=1e-12, atol=0),
               f"after a batch of {n} rows the running variance differs from BatchNorm1d's by "
               f"{(var / bn.running_var - 1).abs().max().item():.1e} (relative): which variance does BatchNorm store?")


def _fold_without_scale(problem, ref):
    """The known-wrong answer: the scale left out of the folded coefficients."""
    bn = ref.bn
    inv = 1 / torch.sqrt(bn.running_var + bn.eps)
    a = bn.weight * inv
    c = bn.bias - a * bn.running_mean
    return (a[:, None] * ref.gemm.weight).detach(), (a * ref.gemm.bias + c).detach()


@exercise(solution=solutions.fold_eval, wrong=_fold_without_scale,
          verified="one Linear layer (W', b') reproduces the eval-mode model of 84 and 33, with trained buffers")
def check_fold_eval(fold) -> None:
    """``fold(problem, ref)`` must return (W', b') such that X W'ᵀ + b' (then the row softmax for
    84) is ``ref``'s eval-mode output, after train steps have moved the running buffers and with
    γ, β and the scale away from their initial values."""
    from fusedlib.reference import make_reference
    g = torch.Generator().manual_seed(4)
    for problem in ("84", "33"):
        ref = make_reference(problem, 12, 10, seed=0).double()
        with torch.no_grad():
            ref.bn.weight.uniform_(0.5, 1.5, generator=g)
            ref.bn.bias.uniform_(-0.5, 0.5, generator=g)
            ref.scale.uniform_(-2.0, 2.0, generator=g)
            for _ in range(3):
                ref(torch.rand(16, 12, generator=g, dtype=torch.float64) * 2 + 1)
        ref.eval()
        x = torch.rand(8, 12, generator=g, dtype=torch.float64)
        with torch.no_grad():
            w2, b2 = fold(problem, ref)
            expect(tuple(w2.shape) == (10, 12) and tuple(b2.shape) == (10,),
                   f"{problem}: expected W' of shape (10, 12) and b' of (10,), got {tuple(w2.shape)}, {tuple(b2.shape)}")
            v = x @ w2.T + b2
            got = torch.softmax(v, dim=1) if problem == "84" else v
            want = ref(x)
        expect(torch.allclose(got, want, rtol=1e-9, atol=1e-12),
               f"{problem}: X W'ᵀ + b' is not the eval-mode output (largest difference "
               f"{(got - want).abs().max().item():.1e})")
