"""Solutions for notebook 05 (the fused stage): the online softmax, and the ring of stages."""
import math


def online_max_sum(chunks):
    """One sweep over a row given as chunks (1-D tensors): the running maximum m and the
    running sum ℓ = Σ exp(v − m), ℓ rescaled by exp(m_old − m_new) whenever m rises.
    Returns (m, ℓ) as Python floats."""
    m, l = -math.inf, 0.0
    for part in chunks:
        m_new = max(m, float(part.max()))
        l = l * math.exp(m - m_new) + float((part.double() - m_new).exp().sum())
        m = m_new
    return m, l


def ring_stages(bn: int, three_x: bool, bm: int = 128, bk: int = 32, budget: int = 192 * 1024) -> int:
    """Stages of the wgmma GEMM's load ring that fit in ``budget`` bytes of shared memory: a
    stage holds X's bm×bk slice and W's bn×bk slice in fp32, and in 3xTF32 a second copy of
    W's slice (W_small beside W_big)."""
    stage = 4 * bk * (bm + (2 if three_x else 1) * bn)
    return budget // stage
