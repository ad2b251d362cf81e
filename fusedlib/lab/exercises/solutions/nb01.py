"""Solutions for notebook 01 (the algebra): the folded coefficients and Chan's merge."""
import torch


def fold(problem: str, mean: torch.Tensor, var: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
         scale: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, c) with V = a∘Z' + c: problem 84 (scalar s after BatchNorm) a = sγ/√(σ²+ε),
    c = sβ − aμ'; problems 33/39 (s_j before BatchNorm) a = γs/√(s²σ²+ε), c = β − aμ'."""
    if problem == "84":
        a = scale * gamma / torch.sqrt(var + eps)
        return a, scale * beta - a * mean
    a = gamma * scale / torch.sqrt(scale ** 2 * var + eps)
    return a, beta - a * mean


def merge(a: tuple, b: tuple) -> tuple:
    """Chan's merge of two (count, mean, M2) partials: n = n_a + n_b, δ = mean_b − mean_a,
    mean = mean_a + δ·n_b/n, M2 = M2_a + M2_b + δ²·n_a·n_b/n."""
    na, ma, m2a = a
    nb, mb, m2b = b
    n = na + nb
    delta = mb - ma
    return n, ma + delta * nb / n, m2a + m2b + delta * delta * na * nb / n
