"""Solutions for notebook 03 (stage fold)."""
import torch


def tracked_moments(kind: str, mean: torch.Tensor, var: torch.Tensor, scale: torch.Tensor):
    """The batch mean and biased variance that BatchNorm's running buffers average, from those of
    Z (the kernel's statistics). 84 (scalar s after BatchNorm): BatchNorm sees Z itself, so (μ, σ²).
    33 (vector s before BatchNorm): it sees Z∘s, whose mean is sμ and variance s²σ², so (sμ, s²σ²).
    BatchNorm then applies Bessel's N/(N − 1) to the variance itself."""
    if kind == "84":
        return mean, var
    return scale * mean, scale * scale * var


def full_tensor_passes() -> dict:
    """Full N×M tensors read and written by each stage in train mode, problem 84, as
    {stage: (reads, writes)}. naive: the GEMM writes Z; mean and variance read it; normalize
    reads and writes it; the scale kernel reads and writes it; row max, row Σexp and the
    softmax's normalize read it, and the last writes Y: 7 reads, 4 writes. fold: the GEMM
    writes Z; mean and variance read it; one row pass reads it and writes Y: 3 reads, 2 writes."""
    return {"naive": (7, 4), "fold": (3, 2)}
