"""Solutions for notebook 00 (the problem and the set-up): train-mode BatchNorm's output; which roof
bounds a kernel."""
import torch


def batchnorm_train(z: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float) -> torch.Tensor:
    """Train-mode BatchNorm1d of ``z`` (N×M): each column normalised by its batch mean and its
    *biased* batch variance (divided by N), then scaled by γ and shifted by β (Ioffe & Szegedy
    2015, algorithm 1)."""
    mean, var = z.mean(0), z.var(0, unbiased=False)
    return gamma * (z - mean) / torch.sqrt(var + eps) + beta


def which_bound(flops: float, bytes_: float, tflops: float, gbytes_per_s: float) -> tuple[float, float, str]:
    """(arithmetic intensity, ridge point, bound) of a kernel: its FLOPs per DRAM byte; the GPU's
    FLOP rate over its bandwidth, both in FLOP/byte (TFLOP/s are 10¹² FLOP/s, GB/s 10⁹ byte/s);
    "compute" where the intensity is above the ridge point (the FLOPs take longer than the
    bytes), "memory" below it."""
    intensity = flops / bytes_
    ridge = tflops * 1e12 / (gbytes_per_s * 1e9)
    return intensity, ridge, "compute" if intensity > ridge else "memory"
