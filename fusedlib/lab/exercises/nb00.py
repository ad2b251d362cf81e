"""Checks for notebook 00 (the problem and the set-up): what train-mode BatchNorm computes; whether
a kernel is bound by memory or by compute."""
from __future__ import annotations

import math

import torch

from fusedlib.lab.costmodel import cost
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb00 as solutions


def _batchnorm_with_the_unbiased_variance(z, gamma, beta, eps):
    """The known-wrong answer: normalising with the unbiased variance (divided by N − 1), the one
    the running buffer keeps."""
    return gamma * (z - z.mean(0)) / torch.sqrt(z.var(0, unbiased=True) + eps) + beta


@exercise(solution=solutions.batchnorm_train, wrong=_batchnorm_with_the_unbiased_variance,
          verified="train-mode BatchNorm's output matches nn.BatchNorm1d's at batches of 2, 5 and 64 rows")
def check_batchnorm_train(batchnorm_train) -> None:
    """``batchnorm_train(z, gamma, beta, eps)`` → BatchNorm1d's train-mode output for ``z`` (N×M
    float64), against ``torch.nn.BatchNorm1d`` in train mode with the same γ, β and ε, for
    batches of 2, 5 and 64 rows."""
    g = torch.Generator().manual_seed(5)
    m = 6
    for n in (2, 5, 64):
        bn = torch.nn.BatchNorm1d(m, eps=1e-3).double().train()
        with torch.no_grad():
            bn.weight.copy_(1 + torch.rand(m, generator=g, dtype=torch.float64))
            bn.bias.copy_(torch.randn(m, generator=g, dtype=torch.float64))
            z = 3 + 2 * torch.randn(n, m, generator=g, dtype=torch.float64)
            want = bn(z)
        got = batchnorm_train(z, bn.weight.detach(), bn.bias.detach(), bn.eps)
        expect(torch.is_tensor(got) and got.shape == (n, m),
               f"return a tensor of z's shape ({n}, {m}), got {type(got).__name__} "
               f"{tuple(got.shape) if torch.is_tensor(got) else ''}")
        err = ((got - want).norm() / want.norm()).item()
        expect(err < 1e-12, f"a batch of {n} rows: your output differs from nn.BatchNorm1d's by {err:.1e} (relative); "
                            "which variance does train mode normalise with, divided by N or by N − 1?")


def _ridge_without_the_units(flops, bytes_, tflops, gbytes_per_s):
    """The known-wrong answer: the ridge point as TFLOP/s over GB/s, its units not converted."""
    intensity, ridge = flops / bytes_, tflops / gbytes_per_s
    return intensity, ridge, "compute" if intensity > ridge else "memory"


#: GPU ceilings the check prices the kernels at: (TFLOP/s, GB/s), about an H200's measured fp32
#: and tf32 GEMM rates and copy bandwidth, and an older GPU's.
CEILINGS = ((51.0, 4150.0), (425.0, 4150.0), (15.0, 900.0))


@exercise(solution=solutions.which_bound, wrong=_ridge_without_the_units,
          verified="intensity, ridge point and bound right for every kernel of the naive stage of 84 and 39")
def check_which_bound(which_bound) -> None:
    """``which_bound(flops, bytes_, tflops, gbytes_per_s)`` → (FLOP/byte, ridge point in FLOP/byte,
    "memory" or "compute") for every pass of the cost model's naive stage (notebook 02) of 84 at
    1024×8192→8192 and 39 at 16384×4096→4096, at each of :data:`CEILINGS`."""
    for kind, problem, (n, k, m) in (("84", "84", (1024, 8192, 8192)), ("33", "39", (16384, 4096, 4096))):
        for p in cost(kind, "naive", n, k, m, "train").passes:
            for tflops, gbps in CEILINGS:
                got = which_bound(p.flops, p.bytes, tflops, gbps)
                expect(isinstance(got, tuple) and len(got) == 3,
                       "return three values: (intensity, ridge point, 'memory' or 'compute')")
                intensity, ridge, side = got
                want_ridge = tflops * 1e12 / (gbps * 1e9)
                want_side = "compute" if p.intensity > want_ridge else "memory"
                where = f"problem {problem}, {p.name}, at {tflops:g} TFLOP/s and {gbps:g} GB/s"
                expect(math.isclose(float(intensity), p.intensity, rel_tol=1e-9, abs_tol=1e-12),
                       f"{where}: intensity {float(intensity):.4g} FLOP/byte, expected {p.intensity:.4g} (FLOPs per byte)")
                expect(math.isclose(float(ridge), want_ridge, rel_tol=1e-9),
                       f"{where}: ridge point {float(ridge):.4g} FLOP/byte, expected {want_ridge:.4g} "
                       "(a TFLOP is 10¹² FLOPs, a GB 10⁹ bytes)")
                expect(side == want_side, f"{where}: {p.intensity:.3g} FLOP/byte against a ridge point of "
                                          f"{want_ridge:.3g}: bound by {want_side}, not {side!r}")
