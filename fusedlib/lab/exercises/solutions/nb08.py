"""Solutions for notebook 08 (the backward)."""
import torch


def column_sums(dy: torch.Tensor, y: torch.Tensor, zc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Problem 84's column sums of the fused backward, from dY, Y and Z' − μ (each (N, M)):
    G = dV = Y∘(dY − r) with r_i = Σ_j dY_ij Y_ij (the softmax's backward), then
    S1 = Σ_i G (M,) and S2 = Σ_i G∘(Z' − μ) (M,)."""
    r = (dy * y).sum(dim=1, keepdim=True)
    g = y * (dy - r)
    return g.sum(dim=0), (g * zc).sum(dim=0)


def parameter_grads(s1: torch.Tensor, s2: torch.Tensor, var: torch.Tensor, scale: torch.Tensor,
                    gamma: torch.Tensor, beta: torch.Tensor, eps: float):
    """Problem 84's (dγ, dβ, ds) from the column sums: with σ̂ = √(σ² + ε),
    dβ = s·S1, dγ = s·S2/σ̂ and ds = Σ_j (γ_j S2_j/σ̂_j + β_j S1_j) (scale's shape)."""
    sig = torch.sqrt(var + eps)
    dgamma = scale * s2 / sig
    dbeta = scale * s1
    dscale = (gamma * s2 / sig + beta * s1).sum().reshape(scale.shape)
    return dgamma, dbeta, dscale
