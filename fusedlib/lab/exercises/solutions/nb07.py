"""Solutions for notebook 07 (eval mode and state derived from parameters)."""
import torch

from fusedlib import algebra


class FreshSplit:
    """W's 3xTF32 parts, right whatever wrote W: nothing is kept, W is split as it is now."""

    def __call__(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return algebra.tf32_split(w.detach())


def running_update(running_mean: torch.Tensor, running_var: torch.Tensor, z: torch.Tensor, momentum: float):
    """BatchNorm1d's train-mode buffer update from a batch ``z`` (N, M): the running mean moves
    toward the batch mean, the running variance toward the batch's *unbiased* variance
    (Bessel's factor N/(N−1)); returns the new (running_mean, running_var)."""
    n = z.shape[0]
    mean, var = z.mean(0), z.var(0, unbiased=False)
    return ((1 - momentum) * running_mean + momentum * mean,
            (1 - momentum) * running_var + momentum * var * n / (n - 1))


def fold_eval(problem: str, ref) -> tuple[torch.Tensor, torch.Tensor]:
    """The eval-mode model ``ref`` (problem "84" or "33") as one Linear layer: (W', b') with
    V = X W'ᵀ + b' (84: Y = softmax(V); 33: Y = V)."""
    bn, s = ref.bn, ref.scale.detach()
    inv = 1 / torch.sqrt(bn.running_var + bn.eps)
    if problem == "84":                  # V = s(γ (Z − r_μ)/√(r_σ² + ε) + β)
        a = s * bn.weight * inv
        c = s * bn.bias - a * bn.running_mean
    else:                                # Y = γ (Z∘s − r_μ)/√(r_σ² + ε) + β: the buffers track Z∘s
        a = bn.weight * s * inv
        c = bn.bias - bn.weight * bn.running_mean * inv
    w, b = ref.gemm.weight, ref.gemm.bias
    return (a[:, None] * w).detach(), (a * b + c).detach()
