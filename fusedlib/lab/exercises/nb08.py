"""Checks for notebook 08: the fused backward's column sums, and the parameter gradients from them."""
from __future__ import annotations

import torch

from fusedlib import algebra
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb08 as solutions


def _case(seed: int = 5, n: int = 37, k: int = 12, m: int = 10):
    """Problem 84 in float64 at N×K→M, γ, β and the scale away from their initial values, one
    forward and backward: (model, dY, Y, Z' − μ, σ²); the gradients sit in the parameters."""
    from fusedlib.reference import make_reference
    g = torch.Generator().manual_seed(seed)
    ref = make_reference("84", k, m, seed=0).double()
    with torch.no_grad():
        ref.bn.weight.uniform_(0.5, 1.5, generator=g)
        ref.bn.bias.uniform_(-0.5, 0.5, generator=g)
        ref.scale.fill_(1.7)
    x = torch.rand(n, k, generator=g, dtype=torch.float64)
    y = ref(x)
    dy = torch.randn(n, m, generator=g, dtype=torch.float64)
    y.backward(dy)
    with torch.no_grad():
        z = x @ ref.gemm.weight.T
        return ref, dy, y.detach(), z - z.mean(0), z.var(0, unbiased=False)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return tuple(a.shape) == tuple(b.shape) and torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def _sums_without_r(dy, y, zc):
    """The known-wrong answer: G = Y∘dY, the softmax's row term r forgotten."""
    g = y * dy
    return g.sum(dim=0), (g * zc).sum(dim=0)


@exercise(solution=solutions.column_sums, wrong=_sums_without_r,
          verified="S1 and S2 match the kernels' specification, and s·S1, s·S2/σ̂ are autograd's dβ and dγ")
def check_column_sums(column_sums) -> None:
    """``column_sums(dy, y, zc)`` must return problem 84's (S1, S2), each (M,): the sums over
    the batch of G = Y∘(dY − r) and of G∘(Z' − μ)."""
    ref, dy, y, zc, var = _case()
    s1, s2 = column_sums(dy, y, zc)
    _, p1, p2 = algebra.backward_tile_partials("84", dy, y, zc, tile_rows=8)
    expect(_close(s1, p1.sum(0)), "S1 is not Σ_i G over the batch (G = Y∘(dY − r), r_i = Σ_j dY_ij Y_ij)")
    expect(_close(s2, p2.sum(0)), "S2 is not Σ_i G∘(Z' − μ) over the batch")
    s, sig = ref.scale.detach(), torch.sqrt(var + ref.bn.eps)
    expect(_close(s * s1, ref.bn.bias.grad), "s·S1 is not autograd's dβ")
    expect(_close(s * s2 / sig, ref.bn.weight.grad), "s·S2/σ̂ is not autograd's dγ")


def _grads_without_sigma(s1, s2, var, scale, gamma, beta, eps):
    """The known-wrong answer: dγ without the division by σ̂ (S2 sums G against Z' − μ, not x̂)."""
    dgamma = scale * s2
    return dgamma, scale * s1, (gamma * s2 + beta * s1).sum().reshape(scale.shape)


@exercise(solution=solutions.parameter_grads, wrong=_grads_without_sigma,
          verified="dγ, dβ and ds from S1 and S2 match autograd's on problem 84")
def check_parameter_grads(parameter_grads) -> None:
    """``parameter_grads(s1, s2, var, scale, gamma, beta, eps)`` must return problem 84's
    (dγ (M,), dβ (M,), ds (scale's shape (1,))) as autograd computes them."""
    ref, dy, y, zc, var = _case(seed=6)
    s1, s2 = solutions.column_sums(dy, y, zc)
    dgamma, dbeta, dscale = parameter_grads(s1, s2, var, ref.scale.detach(), ref.bn.weight.detach(),
                                            ref.bn.bias.detach(), ref.bn.eps)
    expect(_close(dbeta, ref.bn.bias.grad), "dβ differs from autograd's (β enters U = γx̂ + β, then V = sU)")
    expect(_close(dgamma, ref.bn.weight.grad), "dγ differs from autograd's (dγ = Σ_i dU∘x̂, x̂ = (Z' − μ)/σ̂)")
    expect(_close(dscale, ref.scale.grad),
           "ds differs from autograd's (ds = Σ_ij dV∘U: one number, the scale is a scalar parameter)")
