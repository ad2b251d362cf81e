"""Solutions for notebook 00 (the problem and the set-up): BatchNorm's running buffers; which roof
bounds a kernel."""
import torch


def update_buffers(running_mean: torch.Tensor, running_var: torch.Tensor, steps: int, z: torch.Tensor,
                   momentum: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The running buffers after one train-mode forward of BatchNorm on ``z`` (N×M): an
    exponential average with weight m = ``momentum`` (or, with ``momentum=None``, the cumulative
    average, m = 1/(steps + 1)) of the batch mean and of the *unbiased* batch variance, the biased
    one times N/(N − 1) (Bessel's correction)."""
    n = z.shape[0]
    m = 1.0 / (steps + 1) if momentum is None else momentum
    mean, var = z.mean(0), z.var(0, unbiased=False) * n / (n - 1)
    return (1 - m) * running_mean + m * mean, (1 - m) * running_var + m * var


def which_bound(flops: float, bytes_: float, tflops: float, gbytes_per_s: float) -> tuple[float, float, str]:
    """(arithmetic intensity, ridge point, bound) of a kernel: its FLOPs per DRAM byte; the GPU's
    FLOP rate over its bandwidth, both in FLOP/byte (TFLOP/s are 10¹² FLOP/s, GB/s 10⁹ byte/s);
    "compute" where the intensity is above the ridge point (the FLOPs take longer than the
    bytes), "memory" below it."""
    intensity = flops / bytes_
    ridge = tflops * 1e12 / (gbytes_per_s * 1e9)
    return intensity, ridge, "compute" if intensity > ridge else "memory"
