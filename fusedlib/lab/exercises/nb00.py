"""Checks for notebook 00 (the problem and the set-up): what a train step does to BatchNorm's
running buffers; whether a kernel is bound by memory or by compute."""
from __future__ import annotations

import math

import torch

from fusedlib.lab.costmodel import cost
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb00 as solutions


def _buffers_with_the_biased_variance(running_mean, running_var, steps, z, momentum):
    """The known-wrong answer: the running variance averages the biased variance, the one BatchNorm
    normalises with."""
    m = 1.0 / (steps + 1) if momentum is None else momentum
    return (1 - m) * running_mean + m * z.mean(0), (1 - m) * running_var + m * z.var(0, unbiased=False)


@exercise(solution=solutions.update_buffers, wrong=_buffers_with_the_biased_variance,
          verified="the running buffers match nn.BatchNorm1d's over three train steps, at momentum 0.1, 0.5 and None")
def check_update_buffers(update_buffers) -> None:
    """``update_buffers(running_mean, running_var, steps, z, momentum)`` → (running_mean,
    running_var) after one train-mode forward on ``z`` (N×M float64), ``steps`` the forwards before
    it, against ``torch.nn.BatchNorm1d`` over three steps of batches of 2, 5 and 64 rows."""
    g = torch.Generator().manual_seed(5)
    m = 6
    for momentum in (0.1, 0.5, None):
        bn = torch.nn.BatchNorm1d(m, momentum=momentum).double().train()
        mean, var = torch.zeros(m, dtype=torch.float64), torch.ones(m, dtype=torch.float64)
        for steps, n in enumerate((2, 5, 64)):
            z = 3 + 2 * torch.randn(n, m, generator=g, dtype=torch.float64)
            with torch.no_grad():
                bn(z)
            mean, var = update_buffers(mean, var, steps, z, momentum)
            for name, got, want in (("running_mean", mean, bn.running_mean), ("running_var", var, bn.running_var)):
                expect(torch.is_tensor(got) and got.shape == (m,),
                       f"{name} must be a tensor of shape ({m},), got {type(got).__name__} "
                       f"{tuple(got.shape) if torch.is_tensor(got) else ''}")
                err = ((got - want).abs() / want.abs()).max().item()
                expect(err < 1e-10, f"momentum={momentum}, step {steps + 1} (a batch of {n} rows): {name} differs from "
                                    f"nn.BatchNorm1d's by {err:.1e} (relative)"
                       + ("; which variance does the buffer average, the one BatchNorm normalises with?"
                          if name == "running_var" else ""))


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
