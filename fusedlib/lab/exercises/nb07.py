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
