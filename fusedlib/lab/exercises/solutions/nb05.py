"""Solutions for notebook 05 (the fused stage): the online softmax, the ring of stages, and the
row pass's share of the time in tf32 and bf16."""
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


def ring_stages(bn: int, three_x: bool, bm: int = 128, bk: int = 32, budget: int = 192 * 1024,
                cap: int = 6) -> int:
    """Stages of the wgmma GEMM's load ring: as many whole stages as fit in ``budget`` bytes of
    shared memory, at most ``cap`` (the kernel's ``WgTile::kStages`` caps the ring at six, which
    only the narrow tf32 tile, BN = 64, would exceed: eight fit). A stage holds X's bm×bk
    slice and W's bn×bk slice in fp32, and in 3xTF32 a second copy of W's slice (W_small beside
    W_big)."""
    stage = 4 * bk * (bm + (2 if three_x else 1) * bn)
    return min(budget // stage, cap)


def row_pass_share(n: int, k: int, m: int, element_bytes: int, tflops: float, gbytes_per_s: float) -> float:
    """The % of the fused stage's predicted time (train mode) spent in its row pass. The GEMM
    pass reads X (n×k) and W (m×k) and writes Z′ (n×m), each at ``element_bytes`` an element (the
    fused stage keeps Z′ in the module's dtype); the row pass reads Z′ and writes Y (n×m), both at
    ``element_bytes``. Each pass takes max(FLOPs / rate, bytes / bandwidth); the row pass is
    memory-bound, so its bytes decide. The small vectors (bias, coefficients, statistics partials)
    are left out."""
    gemm = max(2 * n * k * m / (tflops * 1e12), (n * k + m * k + n * m) * element_bytes / (gbytes_per_s * 1e9))
    row = 2 * element_bytes * n * m / (gbytes_per_s * 1e9)
    return 100 * row / (gemm + row)
