"""Every stage's forward in plain torch ops: the CPU fallback and the executable
specification of the CUDA kernels (``fusedlib/kernels/*.cu``).

Each function below computes what the kernels compute, with the same decomposition:
the same GEMM (:func:`matmul_nt` at the module's precision, in every stage), the same
passes, the same per-tile partial statistics (tile heights :func:`tile_rows`), the same
merge operators applied in the same fixed order. Nothing here calls
``nn.BatchNorm1d`` or ``F.batch_norm``; the reference modules in :mod:`fusedlib.reference`
are only used to check the results.

Notation (docs/design.md §3): X (N×K), W (M×K), b (M), Z' = X Wᵀ, Z = Z' + b; γ = bn.weight,
β = bn.bias; s = scale; μ, σ² are batch column mean and biased variance.
Problem family ``"84"``: Y = softmax_row(s·BN(Z)). Family ``"33"`` (33 and 39): Y = BN(Z∘s).

Works in float32 and float64 (the dtype of ``x``); accumulations are in that dtype.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "STAGES", "PRECISIONS", "SIMT_TILES", "TC_TILE_ROWS", "MIN_GRID", "tile_rows", "SOFTMAX_TILE_COLS",
    "check_stage_precision", "BNState", "round_tf32", "truncate_tf32", "matmul_nt", "column_stats_two_pass",
    "tile_partials", "chan_merge", "column_stats_chan", "column_stats_textbook", "train_coefficients",
    "eval_coefficients", "fold_linear", "update_running_stats", "tracked_stats", "softmax_three_pass",
    "softmax_online", "stage_forward", "train_backward", "eval_backward", "backward_tile_partials",
    "train_backward_fused", "shifted_matmul_nt", "SHIFTED_PRECISIONS", "train_gemm", "column_moments",
    "merge_ranks", "shifted_rank_moments", "LOW_PRECISION", "Z16_STAGES",
]

#: The four optimisation stages, in teaching order.
STAGES = ("naive", "fold", "sums", "fused")
#: GEMM precision modes (docs/design.md §4); every stage runs every one of them.
PRECISIONS = ("fp32", "tf32", "3xtf32")
#: Square tiles of the SIMT (FFMA) GEMM that runs fp32, largest first: it takes the largest
#: whose grid has at least MIN_GRID tiles (the H100's SM count: fewer leave SMs idle, e.g. 4
#: tiles of 128 × 128 or 16 of 64 × 64 at KernelBench v0), else the smallest. Fixed numbers
#: (not the SM count of the device at hand), so that this specification picks the kernel's
#: tile on any GPU.
SIMT_TILES, MIN_GRID = (128, 64, 32), 132
#: Rows of every tile of the tensor-core GEMMs (mma.sync and wgmma) that run tf32 and 3xtf32.
TC_TILE_ROWS = 128
#: Rows a statistics tile of the fused backward's column pass (``backward.cu``, kBwdTileRows).
BACKWARD_TILE_ROWS = 128


def tile_rows(n: int, m: int, precision: str = "fp32") -> int:
    """Rows per tile of the GEMM for an N × M output, hence per tile of partial statistics
    (stages ``sums`` and ``fused`` alike: the tile depends on the precision and the shape
    only, as every stage runs the same GEMM).

    Args:
        n: batch N (rows of the output), ≥ 1.
        m: out_features M (columns of the output), ≥ 1.
        precision: "fp32" (SIMT GEMM: the largest of :data:`SIMT_TILES` whose grid
            ceil(N/t)·ceil(M/t) has at least :data:`MIN_GRID` tiles, else the smallest),
            "tf32" or "3xtf32" (tensor cores: :data:`TC_TILE_ROWS`).

    Returns:
        128, 64 or 32.

    Raises:
        ValueError: unknown precision, or n or m < 1.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    if n < 1 or m < 1:
        raise ValueError(f"n, m: expected an output of at least 1 × 1, got {n} × {m}")
    if precision != "fp32":
        return TC_TILE_ROWS
    return next((t for t in SIMT_TILES if -(-n // t) * -(-m // t) >= MIN_GRID), SIMT_TILES[-1])


#: Columns per tile of online-softmax partials in this specification. The fused row kernel
#: keeps one (max, Σexp) partial a thread over its columns and merges the 512 partials with
#: the same ⊕ in a fixed tree order; the result differs from this left-to-right order by
#: rounding only.
SOFTMAX_TILE_COLS = 1024


#: The problem families: "84" (softmax(s·BN(Z))) and "33" (BN(Z∘s), problems 33 and 39).
KINDS = ("84", "33")


def check_kind(kind: str) -> None:
    """Raises:
        ValueError: ``kind`` is not one of :data:`KINDS` (the message names the argument)."""
    if kind not in KINDS:
        raise ValueError(f"kind: expected '84' (softmax(s·BN(Z))) or '33' (BN(Z∘s), problems 33 and 39), got {kind!r}")


def check_stage_precision(stage: str, precision: str) -> None:
    """Check the names: every stage runs every precision.

    Raises:
        ValueError: ``stage`` is not one of :data:`STAGES` or ``precision`` not one of
            :data:`PRECISIONS` (the message names the argument).
    """
    if stage not in STAGES:
        raise ValueError(f"stage: expected one of {STAGES}, got {stage!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")


@dataclass
class BNState:
    """BatchNorm parameters and running buffers, as tensors shared with a module.

    ``running_mean``, ``running_var`` and ``num_batches_tracked`` are updated in place by
    train-mode forwards, exactly as ``nn.BatchNorm1d`` does (docs/design.md §2).
    """

    weight: torch.Tensor          # γ, (M,)
    bias: torch.Tensor            # β, (M,)
    running_mean: torch.Tensor    # (M,)
    running_var: torch.Tensor     # (M,)
    num_batches_tracked: torch.Tensor  # () int64
    momentum: float | None
    eps: float


# --------------------------------------------------------------------------- GEMM

def round_tf32(t: torch.Tensor) -> torch.Tensor:
    """Round a tensor to TF32 (10 explicit mantissa bits), nearest with ties away from zero,
    as ``cvt.rna.tf32.f32`` does. Returns a tensor of the input dtype."""
    f = t.to(torch.float32).contiguous()
    bits = f.view(torch.int32)
    rounded = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    finite = torch.isfinite(f)
    return torch.where(finite, rounded, f).to(t.dtype)


def tf32_split(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """t's TF32 parts for 3xTF32: (big, small) = (rna(t), rna(t − rna(t))), both exactly
    representable in TF32 and of t's shape and dtype (CUTLASS example 27)."""
    big = round_tf32(t)
    return big, round_tf32(t - big)


def truncate_tf32(t: torch.Tensor) -> torch.Tensor:
    """Keep the top 19 bits of each float32 (sign, exponent, 10 mantissa bits): what the
    tensor cores read when given float32 words in TF32 mode. Returns the input dtype."""
    f = t.to(torch.float32).contiguous()
    return (f.view(torch.int32) & ~0x1FFF).view(torch.float32).to(t.dtype)


def matmul_nt(x: torch.Tensor, w: torch.Tensor, precision: str = "fp32") -> torch.Tensor:
    """Z' = X Wᵀ for X (N×K), W (M×K) at a precision of docs/design.md §4.

    ``fp32``: plain products. ``tf32``: both operands truncated to TF32 (the kernels hand
    float32 words to the tensor cores, as cuBLAS does). ``3xtf32``: each operand split
    a = big + small, big = rna(a), small = rna(a − big) (both TF32), and
    Z' ≈ big·big + small·big + big·small, the small·small term dropped (CUTLASS example 27,
    "3xTF32"; the kernel accumulates the three products in one fp32 accumulator).
    """
    if precision == "fp32":
        return x @ w.t()
    if precision == "tf32":
        return truncate_tf32(x) @ truncate_tf32(w).t()
    if precision == "3xtf32":
        (xb, xs), (wb, ws) = tf32_split(x), tf32_split(w)
        return xs @ wb.t() + xb @ ws.t() + xb @ wb.t()
    raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")


# --------------------------------------------------------------------------- statistics

def column_stats_two_pass(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Column mean and biased variance in two passes (mean, then Σ(z−μ)²/N): the naive kernels."""
    n = z.shape[0]
    mean = z.sum(0) / n
    var = ((z - mean) ** 2).sum(0) / n
    return mean, var


def tile_partials(z: torch.Tensor, tile_rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-(row tile, column) partials (n_t, mean_t, M2_t) as a GEMM epilogue makes them from
    the accumulators of one BM-row tile: the tile's mean first, then Σ(z − mean_t)².

    Returns ``n`` (T,), ``mean`` (T, M), ``m2`` (T, M) with T = ceil(N / tile_rows).
    """
    n_rows = z.shape[0]
    counts, means, m2s = [], [], []
    for r0 in range(0, n_rows, tile_rows):
        blk = z[r0:r0 + tile_rows]
        cnt = blk.shape[0]
        mu = blk.sum(0) / cnt
        counts.append(cnt)
        means.append(mu)
        m2s.append(((blk - mu) ** 2).sum(0))
    return (torch.tensor(counts, dtype=z.dtype, device=z.device), torch.stack(means), torch.stack(m2s))


#: The partials' merge order (``kMergeQuarters``, ``kMergeChains``, ``kMergeRun`` in
#: fusedlib/kernels/common.cuh).
MERGE_QUARTERS, MERGE_CHAINS, MERGE_RUN = 4, 8, 64


def _chan_pair(a, b):
    """One Chan merge of (n, mean, M2) triples, in the kernels' expression order."""
    na, ma, m2a = a
    nb, mb, m2b = b
    n = na + nb
    delta = mb - ma
    return n, ma + delta * (nb / n), m2a + m2b + delta * delta * (na * nb / n)


def _in_order(parts):
    acc = parts[0]
    for part in parts[1:]:
        acc = _chan_pair(acc, part)
    return acc


def _runs(lo: int, count: int, parts: int) -> list[tuple[int, int]]:
    """``count`` items from ``lo`` cut into ``parts`` contiguous runs; the non-empty ones."""
    bounds = [lo + count * g // parts for g in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if a < b]


def chan_merge(n: torch.Tensor, mean: torch.Tensor, m2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge T tile partials with Chan's formula (Chan, Golub & LeVeque 1983):
    n = n_a + n_b, δ = m_b − m_a, m = m_a + δ·n_b/n, M2 = M2_a + M2_b + δ²·n_a·n_b/n.

    n: (T,) row counts; mean, m2: (T, M) partials (:func:`tile_partials`). The order is the
    kernels' (deterministic): the tiles cut into ``MERGE_QUARTERS`` contiguous quarters, each
    quarter into ``MERGE_CHAINS`` contiguous chains; each chain cut into runs of ``MERGE_RUN``
    tiles from its start, each run merged left to right and the chain's runs left to right
    (blocked: a chain of thousands of tiles would otherwise add each tile's small M2 to a large
    sum thousands of times, a bias of the variance in fp32), a quarter's chains left to right
    (the quarter's means taken about its first tile's mean, so that each step rounds at the
    scale of the means' spread, not of |mean|), then the quarters left to right. On the GPU a thread
    advances a quarter's chains side by side (independent dependency chains and loads in
    flight) and four threads can take a column's quarters at once. Returns the column mean
    and the biased variance M2/N, both (M,).
    """
    cn, mean, m2 = _chan_merge_moments(n, mean, m2)
    return mean, m2 / cn


def merge_order(T: int) -> list[list[list[int]]]:
    """The row tiles 0 … T − 1 of a column in :func:`chan_merge`'s order: ``MERGE_QUARTERS``
    contiguous quarters, each of ``MERGE_CHAINS`` contiguous chains of tile indices (quarter q from
    ⌊qT/4⌋ to ⌊(q+1)T/4⌋, chain g of a quarter of Q tiles from ⌊gQ/8⌋ to ⌊(g+1)Q/8⌋ within it);
    empty chains and quarters left out. The order of ``merge_quarter`` in
    fusedlib/kernels/common.cuh."""
    return [[list(range(a, b)) for a, b in _runs(qlo, qhi - qlo, MERGE_CHAINS)]
            for qlo, qhi in _runs(0, T, MERGE_QUARTERS)]


def _chan_merge_moments(n, mean, m2):
    """:func:`chan_merge`'s order, returning the merged (n, mean, M2)."""
    quarters = []
    for quarter in merge_order(n.shape[0]):
        ref = mean[quarter[0][0]]  # the quarter's means about its first: rounding at the spread, not at |mean|
        chains = [_in_order([_in_order([(n[t], mean[t] - ref, m2[t]) for t in chain[r:r + MERGE_RUN]])
                             for r in range(0, len(chain), MERGE_RUN)])
                  for chain in quarter]
        cn, cmean, cm2 = _in_order(chains)
        quarters.append((cn, cmean + ref, cm2))
    return _in_order(quarters)


def column_stats_chan(z: torch.Tensor, tile_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One-pass column mean and biased variance: :func:`tile_partials` merged by :func:`chan_merge`."""
    return chan_merge(*tile_partials(z, tile_rows))


def column_stats_textbook(z: torch.Tensor, tile_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The textbook one pass, kept for teaching: per-tile S1 = Σz and S2 = Σz², summed,
    then σ² = S2/N − (S1/N)². Loses about log10(κ²) digits, κ² = 1 + μ²/σ²
    (Chan, Golub & LeVeque 1983); catastrophic when |μ|/σ ≳ 100."""
    n = z.shape[0]
    s1 = z.new_zeros(z.shape[1])
    s2 = z.new_zeros(z.shape[1])
    for r0 in range(0, n, tile_rows):
        blk = z[r0:r0 + tile_rows]
        s1 = s1 + blk.sum(0)
        s2 = s2 + (blk * blk).sum(0)
    mean = s1 / n
    return mean, s2 / n - mean * mean


# --------------------------------------------------------------------------- coefficients

# --------------------------------------------------------------------------- data parallel (SyncBN)
# docs/design.md §14: in train mode under data parallelism every rank forms its columns' moments
# (n, mean, M2) from its own rows, exactly as one process does, and one collective gathers them;
# every rank then merges the R triples with Chan's formula in rank order, so all ranks hold the
# same batch statistics, bit for bit, for any world size and uneven per-rank batches.

def column_moments(z: torch.Tensor, tile_rows: int | None = None) -> torch.Tensor:
    """One rank's column moments, what it sends: a (3, M) tensor [n; mean; M2] (n repeated in
    every column), M2 = Σ(z − mean)². With ``tile_rows`` (sums, fused): the tile partials
    merged in the kernels' order (:func:`chan_merge`); without (naive, fold): two passes. A
    rank with no rows sends n = 0 (and zeros)."""
    rows, m = z.shape
    if rows == 0:
        return z.new_zeros(3, m)
    if tile_rows is None:
        mean = z.sum(0) / rows
        m2 = ((z - mean) ** 2).sum(0)
        n = z.new_full((m,), float(rows))
    else:
        n, mean, m2 = _chan_merge_moments(*tile_partials(z, tile_rows))
        n = z.new_full((m,), float(n))
    return torch.stack([n, mean, m2])


def shifted_rank_moments(x: torch.Tensor, weight: torch.Tensor, x0: torch.Tensor,
                         precision: str = "fp32", tile_rows: int | None = None) -> torch.Tensor:
    """One rank's message as the CUDA kernels form it under the first-row shift (docs/design.md
    §14): the :func:`column_moments` of D = (X_r − x₀)Wᵀ over this rank's rows, x₀ the global
    batch's first row (rank 0's, broadcast), so that every rank's moments share one origin and
    merge without cancellation. Rank 0's first row is x₀ itself (D's row 0 is 0); every other
    rank's GEMM takes x₀ as an external shift row and shifts all its rows, row 0 too.

    Args: x (N_r, K) this rank's rows, weight (M, K), x0 (K,), precision (as
    :func:`matmul_nt`), tile_rows (as :func:`column_moments`). Returns: (3, M).
    """
    return column_moments(matmul_nt(x - x0, weight, precision), tile_rows)


def merge_ranks(moments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Every rank's :func:`column_moments` (R, 3, M), as the collective gathered them, merged
    with Chan's formula (:func:`_chan_pair`, the kernels' expression order) in rank order;
    ranks with n = 0 are passed over. Returns the global column mean and biased variance, (M,)
    each, and the global batch size N."""
    parts = [(r[0], r[1], r[2]) for r in moments if r[0, 0] > 0]
    if not parts:
        return moments.new_zeros(moments.shape[2]), moments.new_zeros(moments.shape[2]), 0
    n, mean, m2 = _in_order(parts)
    return mean, m2 / n, int(n[0].item())


def _batch_stats(z: torch.Tensor, tile: int | None, gather) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Column mean, biased variance and N of the batch: this process's rows (``gather`` None:
    two passes, or with ``tile`` the tile partials merged), or every rank's through ``gather``
    (:func:`column_moments`, :func:`merge_ranks`). Raises ValueError for N ≤ 1 (train mode)."""
    if gather is None:
        _check_train_batch(z)
        mean, var = column_stats_two_pass(z) if tile is None else column_stats_chan(z, tile)
        return mean, var, z.shape[0]
    mean, var, n = merge_ranks(gather(column_moments(z, tile)))
    if n <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got a global batch of {n}")
    return mean, var, n


def _scale_vector(scale: torch.Tensor, m: int, dtype) -> torch.Tensor:
    s = scale.to(dtype).reshape(-1)  # (any shape of 1 or m elements: (1,), (1, 1), (m,), (1, m))
    return s.expand(m) if s.numel() == 1 else s.reshape(m)


def train_coefficients(kind: str, mean: torch.Tensor, var: torch.Tensor, bn: BNState,
                       scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column (a, c) with the stage's pre-activation V = a∘Z + c, from the batch
    statistics (mean, biased var) of the Z the stage holds (with or without bias).

    Family 84 (scalar s after BN): a = sγ/√(σ²+ε), c = sβ − a μ.
    Family 33 (vector s before BN): a = γ s/√(s²σ²+ε), c = β − a μ; s_j = 0 gives a_j = 0,
    c_j = β_j exactly, and s_j < 0 flips the sign as BN(Z∘s) does (docs/design.md §3).
    """
    dt = mean.dtype
    s = _scale_vector(scale, mean.shape[0], dt)
    g, b = bn.weight.to(dt), bn.bias.to(dt)
    if kind == "84":
        a = s * g / torch.sqrt(var + bn.eps)
        return a, s * b - a * mean
    a = g * s / torch.sqrt(s * s * var + bn.eps)
    return a, b - a * mean


def eval_coefficients(kind: str, bn: BNState, scale: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column (a, c) with V = a∘Z + c for Z = X Wᵀ + b, from the running buffers.

    84: a = sγ/√(r_σ²+ε), c = sβ − a r_μ. 33 (running stats track Z∘s):
    a = γ s/√(r_σ²+ε), c = β − γ r_μ/√(r_σ²+ε).
    """
    m = bn.weight.shape[0]
    s = _scale_vector(scale, m, dtype)
    g, b = bn.weight.to(dtype), bn.bias.to(dtype)
    rm, rv = bn.running_mean.to(dtype), bn.running_var.to(dtype)
    inv = 1.0 / torch.sqrt(rv + bn.eps)
    if kind == "84":
        a = s * g * inv
        return a, s * b - a * rm
    return g * s * inv, b - g * rm * inv


def fold_linear(weight: torch.Tensor, bias: torch.Tensor, a: torch.Tensor, c: torch.Tensor):
    """Fold V = a∘(X Wᵀ + b) + c into one Linear: W' = diag(a) W, b' = a∘b + c
    (``torch.nn.utils.fusion.fuse_linear_bn_eval`` semantics). Returns (W', b')."""
    return weight * a[:, None], a * bias + c


def update_running_stats(bn: BNState, mean: torch.Tensor, var: torch.Tensor, n: int) -> None:
    """Update ``bn``'s running buffers in place as ``nn.BatchNorm1d`` does in train mode.

    ``mean``/``var`` are the batch mean and biased variance of the tensor BatchNorm sees
    (Z = X Wᵀ + b for 84, Z∘s for 33: see :func:`tracked_stats`). The variance is stored
    unbiased (×N/(N−1)); momentum ``None`` uses the cumulative average 1/num_batches_tracked.
    """
    with torch.no_grad():
        bn.num_batches_tracked.add_(1)
        m = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked.item())
        dt = bn.running_mean.dtype
        bn.running_mean.mul_(1 - m).add_(mean.to(dt), alpha=m)
        bn.running_var.mul_(1 - m).add_((var * (n / (n - 1))).to(dt), alpha=m)


def tracked_stats(kind: str, mean: torch.Tensor, var: torch.Tensor, scale: torch.Tensor):
    """Statistics of what BatchNorm sees, from those of Z: unchanged for 84, (s∘μ, s²∘σ²) for 33."""
    if kind == "84":
        return mean, var
    s = _scale_vector(scale, mean.shape[0], mean.dtype)
    return s * mean, s * s * var


# --------------------------------------------------------------------------- softmax

def softmax_three_pass(v: torch.Tensor) -> torch.Tensor:
    """Row softmax as three passes: row max m, l = Σ exp(v − m), then exp(v − m)/l."""
    m = v.max(dim=1, keepdim=True).values
    e = torch.exp(v - m)
    return e / e.sum(dim=1, keepdim=True)


def softmax_online(v: torch.Tensor, tile_cols: int = SOFTMAX_TILE_COLS) -> torch.Tensor:
    """Row softmax from per-column-tile partials (m_t, l_t) merged left to right:
    (m, l) ⊕ (m', l') = (M, l·e^{m−M} + l'·e^{m'−M}), M = max(m, m')
    (Milakov & Gimelshein 2018), then Y = exp(v − M)/L. One read of the row yields both the
    maximum and the sum (see :data:`SOFTMAX_TILE_COLS` for how the kernel partitions it)."""
    m_run = l_run = None
    for c0 in range(0, v.shape[1], tile_cols):
        blk = v[:, c0:c0 + tile_cols]
        m_t = blk.max(dim=1, keepdim=True).values
        l_t = torch.exp(blk - m_t).sum(dim=1, keepdim=True)
        if m_run is None:
            m_run, l_run = m_t, l_t
        else:
            m_new = torch.maximum(m_run, m_t)
            l_run = l_run * torch.exp(m_run - m_new) + l_t * torch.exp(m_t - m_new)
            m_run = m_new
    return torch.exp(v - m_run) / l_run


# --------------------------------------------------------------------------- stages

def _naive(kind, x, weight, bias, scale, bn: BNState, training, precision, gather=None, store=None):
    # One operator at a time, each reading and writing a full tensor.
    z = _stored(matmul_nt(x, weight, precision) + bias, store)  # GEMM + bias
    dt = z.dtype
    s = _scale_vector(scale, z.shape[1], dt)
    n = x.shape[0]
    if training and gather is not None and kind == "33":
        # across ranks the moments of Z travel (those of every stage), then scale: Z∘s has s∘μ, s²σ²
        mean, var, n = _batch_stats(z, None, gather)
        mean, var = s * mean, s * s * var
    if kind == "33":
        z = z * s                                   # scale
    if training and (gather is None or kind == "84"):
        mean, var, n = _batch_stats(z, None, gather)  # mean pass, variance pass (and the ranks' merge)
    elif not training:
        mean, var = bn.running_mean.to(dt), bn.running_var.to(dt)
    u = (z - mean) / torch.sqrt(var + bn.eps)       # normalize
    y = bn.weight.to(dt) * u + bn.bias.to(dt)       # affine
    if kind == "84":
        y = softmax_three_pass(s * y)               # scale, softmax (max, sum, normalize)
    if training:                                    # stats were taken on what BN sees
        update_running_stats(bn, mean, var, n)
    return y


def _finish(kind, v):
    return softmax_three_pass(v) if kind == "84" else v


def _check_train_batch(x: torch.Tensor) -> None:
    """BatchNorm's batch statistics need N ≥ 2: the message PyTorch's BatchNorm raises."""
    if x.shape[0] <= 1:
        raise ValueError(
            f"Expected more than 1 value per channel when training, got input size {tuple(x.shape)}")


#: Storage dtypes of the mixed-precision modules (docs/design.md §15): their GEMM multiplies
#: these exactly into float32 sums, and everything after it runs in float32.
LOW_PRECISION = (torch.bfloat16, torch.float16)

#: The stages that keep a 16-bit module's Z' in the module's dtype in train mode on CUDA
#: (docs/design.md §15): their GEMM epilogue rounds Z' once, after the batch statistics took the
#: float32 sums, as eager PyTorch's Linear rounds its output; their row pass and backward read
#: it. naive and fold keep Z in float32 (on the CPU every stage keeps x's dtype).
Z16_STAGES = ("sums", "fused")


def _stored(t: torch.Tensor, dtype) -> torch.Tensor:
    """``t`` as a kernel leaves it in memory of ``dtype`` (None: as it is), back in t's dtype."""
    return t if dtype is None else t.to(dtype).to(t.dtype)


def _low_precision_forward(kind, stage, x, weight, bias, scale, bn: BNState, training, gather):
    """:func:`stage_forward` for bf16/fp16 operands (docs/design.md §15): the products exact in
    float32, the GEMM's output rounded once to x's dtype (naive, fold: Z; sums, fused: Z', the
    statistics here taken from that rounded Z', which the row pass and the backward read; the
    CUDA epilogue takes them from the float32 sums before it rounds: one rounding of Z' apart),
    the rest in float32; the running buffers
    updated in float32 and stored in their dtype; Y in the dtype of x promoted with the scale's
    (x's own for a module in bf16 or fp16; float32 under autocast, where the scale stays float32)."""
    f = torch.float32
    bn32 = BNState(bn.weight.to(f), bn.bias.to(f), bn.running_mean.to(f), bn.running_var.to(f),
                   bn.num_batches_tracked, bn.momentum, bn.eps)
    y = stage_forward(kind, stage, x.to(f), weight.to(f), bias.to(f), scale.to(f), bn32, training, "fp32",
                      gather, _store=x.dtype)
    if training and bn32.running_mean is not bn.running_mean:
        with torch.no_grad():
            bn.running_mean.copy_(bn32.running_mean)
            bn.running_var.copy_(bn32.running_var)
    return y.to(torch.promote_types(x.dtype, scale.dtype))


def stage_forward(kind: str, stage: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                  scale: torch.Tensor, bn: BNState, training: bool, precision: str = "fp32",
                  gather=None, _store=None) -> torch.Tensor:
    """Forward of problem family ``kind`` ("84" or "33") computed the way ``stage`` does it.

    Args:
        kind: "84" (softmax(s·BN(Z))) or "33" (BN(Z∘s), problems 33 and 39).
        stage: "naive" | "fold" | "sums" | "fused".
        x: (N, K) float32 or float64. weight: (M, K). bias, bn.weight, bn.bias: (M,).
        scale: (1,) for 84, (M,) for 33.
        bn: parameters and running buffers; updated in place when ``training``.
        training: batch statistics (True) or running statistics (False).
        precision: "fp32", "tf32" or "3xtf32": the GEMM's precision, in every stage and
            mode (see :func:`matmul_nt`).
        (x and weight in bfloat16 or float16: the mixed-precision rule of docs/design.md §15,
        :func:`_low_precision_forward`; ``precision`` then does not apply.)
        gather: data parallelism (docs/design.md §14), train mode: the collective that takes
            this rank's (3, M) :func:`column_moments` to every rank's, (R, 3, M) in rank order
            (``torch.distributed.all_gather``); the batch statistics and the running buffers
            are then the global batch's (:func:`merge_ranks`), identical on every rank.
            None: this process's batch alone.

    Returns:
        (N, M) tensor of ``x``'s dtype.

    Raises:
        ValueError: unknown kind, stage or precision, or a batch of N ≤ 1 in train mode (the
        global batch with ``gather``; the message PyTorch's BatchNorm raises).
    """
    check_kind(kind)
    check_stage_precision(stage, precision)
    if x.dtype in LOW_PRECISION:
        return _low_precision_forward(kind, stage, x, weight, bias, scale, bn, training, gather)
    if stage == "naive":
        return _naive(kind, x, weight, bias, scale, bn, training, precision, gather, _store)
    dt = x.dtype
    if not training:
        a, c = eval_coefficients(kind, bn, scale, dt)
        if stage == "fold":                           # GEMM + bias, then one affine pass
            return _finish(kind, a * _stored(matmul_nt(x, weight, precision) + bias, _store) + c)
        # sums, fused: BN, s and the bias in the GEMM's epilogue, V = a∘(X Wᵀ) + (a∘b + c)
        v = a * matmul_nt(x, weight, precision) + (a * bias.to(dt) + c)
        if stage == "fused" and kind == "84":
            return softmax_online(v)
        return _finish(kind, v)
    if stage == "fold":
        z = _stored(matmul_nt(x, weight, precision) + bias, _store)  # GEMM + bias
        mean, var, n = _batch_stats(z, None, gather)  # mean pass, variance pass (and the ranks' merge)
        a, c = train_coefficients(kind, mean, var, bn, scale)
        y = _finish(kind, a * z + c)                  # one affine (+ softmax) pass
        update_running_stats(bn, *tracked_stats(kind, mean, var, scale), n)
        return y
    # sums and fused: Z' = X Wᵀ without bias, tile partials from the GEMM epilogue,
    # Chan merge in the kernels' fixed order, bias only in the running mean.
    zp = _stored(matmul_nt(x, weight, precision), _store)  # (low precision: rounded first here; §15)
    mean_p, var, n = _batch_stats(zp, tile_rows(max(x.shape[0], 1), weight.shape[0], precision), gather)
    a, c = train_coefficients(kind, mean_p, var, bn, scale)
    v = a * zp + c
    if stage == "fused" and kind == "84":
        y = softmax_online(v)
    else:
        y = _finish(kind, v)
    update_running_stats(bn, *tracked_stats(kind, mean_p + bias.to(dt), var, scale), n)
    return y


# --------------------------------------------------------------------------- centred train forward

def centred_matmul_nt(x: torch.Tensor, weight: torch.Tensor,
                      precision: str = "fp32") -> tuple[torch.Tensor, torch.Tensor]:
    """Z' = X Wᵀ split as Zc + μ for a train-mode forward, from one GEMM over the (N + 1)×K
    operand [X − x̄; x̄] (x̄ = the column means of X): rows 0…N−1 give Zc = (X − x̄)Wᵀ, row N gives
    μ = x̄Wᵀ, the batch mean of Z'. BatchNorm needs Z' − mean(Z') = Zc − mean(Zc) and var(Zc):
    the offset |x̄| no longer cancels inside the GEMM's sums (inputs with column |mean|/std ≈ 1e3:
    error of Zc − mean(Zc) ≈ 1e-7 in fp32 and 3xTF32 against ≈ 1e-4 from X Wᵀ, see
    tests/test_algebra.py), and μ serves the running mean only. The extra row is the kernels'
    way to get μ without a separate GEMV (results/h100/NOTES.md, "What a centred forward would
    cost": a GEMV costs 39 % of the TF32 GEMM at 84).

    Args:
        x: (N, K) float32 or float64. weight: (M, K). precision: as :func:`matmul_nt`.

    Returns:
        zc: (N, M) (X − x̄)Wᵀ; mu: (M,) x̄Wᵀ; both of ``x``'s dtype.
    """
    xbar = x.mean(0)
    z = matmul_nt(torch.cat([x - xbar, xbar[None]]), weight, precision)
    return z[:-1], z[-1]


def shifted_matmul_nt(x: torch.Tensor, weight: torch.Tensor,
                      precision: str = "fp32") -> tuple[torch.Tensor, torch.Tensor]:
    """Z' = X Wᵀ split as D + z₀ (D = (X − x₀)Wᵀ, z₀ = x₀Wᵀ, x₀ the batch's first row), from one
    GEMM over the N×K operand [x₀; X[1:] − x₀]: its row 0 gives z₀, rows 1…N−1 give D (row 0 of D
    is exactly 0). The shifted-data form of :func:`centred_matmul_nt` (Chan, Golub & LeVeque
    1983: any sample removes the offset as the mean does): as close to float64 on offset
    inputs (see tests/test_algebra.py), but with no extra row (at 84's shape N + 1 rows would
    take a ninth row of 128-row tiles) and no column-mean pass over X: the kernels can subtract
    x₀ as they load X (SIMT) or split it into TF32 parts (3xTF32), or in one copy.

    Args:
        x: (N, K) float32 or float64. weight: (M, K). precision: as :func:`matmul_nt`.

    Returns:
        d: (N, M) (X − x₀)Wᵀ; z0: (M,) x₀Wᵀ; both of ``x``'s dtype.
    """
    z = matmul_nt(torch.cat([x[:1], x[1:] - x[:1]]), weight, precision)
    return torch.cat([torch.zeros_like(z[:1]), z[1:]]), z[0]


#: The operand a centred train forward runs its GEMM on (:func:`centred_train_forward`).
CENTRINGS = {"mean": centred_matmul_nt, "first_row": shifted_matmul_nt}

#: Precisions whose train-mode GEMM the CUDA kernels run shifted by the batch's first row
#: (:func:`train_gemm`): the SIMT GEMM subtracts x₀ as it loads X, the 3xTF32 ones as they split
#: X into TF32 parts; tf32's tensor cores read X as it is (TMA), and its TF32 rounding (≈ 1e-3) is far
#: above what the shift saves.
SHIFTED_PRECISIONS = ("fp32", "3xtf32")


def train_gemm(x: torch.Tensor, weight: torch.Tensor, precision: str = "fp32") -> tuple[torch.Tensor, torch.Tensor]:
    """The train-mode GEMM of every stage as the CUDA kernels compute it: (Z, z₀) with
    Z + z₀ = X Wᵀ — :func:`shifted_matmul_nt` for :data:`SHIFTED_PRECISIONS` (Z = D = (X − x₀)Wᵀ,
    whose row 0 is 0; the kernels of every stage, naive and fold too, then hold Z − Z₀ = D, in
    which the Linear's bias cancels), else (:func:`matmul_nt`, zeros). Only Z − mean(Z) enters
    BatchNorm's output and gradients; the running mean adds z₀ + b back.

    Args: x (N, K), weight (M, K), precision as :func:`matmul_nt`. Returns: Z (N, M), z₀ (M,).
    """
    if precision in SHIFTED_PRECISIONS:
        return shifted_matmul_nt(x, weight, precision)
    z = matmul_nt(x, weight, precision)
    return z, z.new_zeros(z.shape[1])


def centred_train_forward(kind: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                          scale: torch.Tensor, bn: BNState, precision: str = "fp32",
                          centre: str = "mean") -> torch.Tensor:
    """The train-mode forward of problem family ``kind`` on a centred GEMM: Z' = Zc + μ₀ with
    Zc and μ₀ from :func:`centred_matmul_nt` (``centre="mean"``: μ₀ = x̄Wᵀ) or
    :func:`shifted_matmul_nt` (``"first_row"``: μ₀ = x₀Wᵀ); then the column statistics of Zc
    (two passes), the coefficients a, c of :func:`train_coefficients` applied to Zc
    (V = a∘Zc + c), the running buffers from μ₀ + mean(Zc) + b and var(Zc). Equal to
    ``stage_forward(kind, "fused", …, training=True)`` in exact arithmetic; in fp32 and 3xTF32
    accurate on offset inputs too.

    Args: as :func:`stage_forward` (train mode only). bn: updated in place. centre: "mean" or
        "first_row".

    Returns:
        (N, M) tensor of ``x``'s dtype.

    Raises:
        ValueError: unknown precision or centre, or N = 1 (as :func:`stage_forward`).
    """
    check_stage_precision("fused", precision)
    if centre not in CENTRINGS:
        raise ValueError(f"centre: expected one of {sorted(CENTRINGS)}, got {centre!r}")
    _check_train_batch(x)
    n = x.shape[0]
    zc, mu = CENTRINGS[centre](x, weight, precision)
    mean_c, var = column_stats_two_pass(zc)
    a, c = train_coefficients(kind, mean_c, var, bn, scale)
    y = _finish(kind, a * zc + c)
    update_running_stats(bn, *tracked_stats(kind, mu + mean_c + bias.to(x.dtype), var, scale), n)
    return y


# --------------------------------------------------------------------------- backward

def _softmax_backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dV = Y∘(dY − r), r_i = Σ_j dY_ij Y_ij: the row softmax's backward."""
    return y * (dy - (dy * y).sum(dim=1, keepdim=True))


def scale_gradient(ds_cols: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The per-column ds summed to ``scale``'s shape (one element: the total)."""
    return ds_cols.sum().reshape(scale.shape) if scale.numel() == 1 else ds_cols.reshape(scale.shape)


def train_backward(kind: str, dy: torch.Tensor, y: torch.Tensor, zc: torch.Tensor, var: torch.Tensor,
                   x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, gamma: torch.Tensor,
                   beta: torch.Tensor, eps: float):
    """Gradients of a train-mode forward (batch statistics), docs/design.md §10.

    Args:
        kind: "84" (Y = softmax_row(s·BN(Z))) or "33" (Y = BN(Z∘s)).
        dy: (N, M) ∂L/∂Y. y: (N, M) the forward's output.
        zc: (N, M) Z − μ, the centred pre-BatchNorm GEMM output (the bias cancels:
            Z' − μ' is the same). var: (M,) its biased column variance σ².
        x: (N, K). weight: (M, K). scale: (1,) or (M,). gamma, beta: (M,) bn.weight, bn.bias.
        eps: BatchNorm ε.

    Returns:
        (dx (N, K), dweight (M, K), dbias (M,), dscale (scale's shape), dgamma (M,), dbeta (M,)).

    The algebra, per column j (σ̂ the standard deviation of what BatchNorm sees, x̂ its
    normalised value, dU the gradient arriving at BatchNorm's output):

    * 84: x̂ = (Z − μ)/σ̂, U = γ∘x̂ + β, V = s·U. Softmax: dV = Y∘(dY − r), r_i = Σ_j dY_ij Y_ij;
      scale: ds = Σ_ij dV∘U; dU = s·dV.
    * 33: BatchNorm sees T = Z∘s: σ̂ = √(s²σ² + ε), x̂ = s∘(Z − μ)/σ̂; dU = dY.
    * Affine: dγ = Σ_i dU∘x̂, dβ = Σ_i dU.
    * Normalisation with batch statistics (Ioffe & Szegedy 2015, §3):
      dT = (γ/σ̂)∘(dU − mean_i dU − x̂∘mean_i(dU∘x̂)). 84: dZ = dT. 33: ds = Σ_i dT∘(Z − μ),
      dZ = s∘dT.
    * GEMM: dX = dZ·W, dW = dZᵀ·X, and db = Σ_i dZ = 0 exactly: Σ_i dT = 0 because
      mean_i(x̂) = 0 — the bias cancels in the backward as in the forward, so it is returned
      as zeros (a gradient, not None, as the reference's is).
    """
    dt = dy.dtype
    m = dy.shape[1]
    s = _scale_vector(scale, m, dt)
    g, b = gamma.to(dt), beta.to(dt)
    if kind == "84":
        sig = torch.sqrt(var + eps)
        xhat = zc / sig
        u = g * xhat + b
        dv = _softmax_backward(dy, y)
        ds_cols = (dv * u).sum(dim=0)
        du = s * dv
    else:
        sig = torch.sqrt(s * s * var + eps)
        xhat = s * zc / sig
        du = dy
    dgamma = (du * xhat).sum(dim=0)
    dbeta = du.sum(dim=0)
    dt_ = (g / sig) * (du - du.mean(dim=0) - xhat * (du * xhat).mean(dim=0))
    if kind == "84":
        dz = dt_
    else:
        ds_cols = (dt_ * zc).sum(dim=0)
        dz = s * dt_
    dscale = scale_gradient(ds_cols, scale)
    dx = dz @ weight.to(dt)
    dweight = dz.t() @ x.to(dt)
    return dx, dweight, dy.new_zeros(m, dtype=dt), dscale, dgamma, dbeta


def backward_tile_partials(kind: str, dy: torch.Tensor, y: torch.Tensor | None, zc: torch.Tensor,
                           tile_rows: int) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """The fused backward's one pass over (Y, dY, Z − μ), row tile by row tile.

    Args:
        kind: "84" or "33". dy: (N, M). y: (N, M) the forward's output (84; None for 33,
            whose backward does not read it). zc: (N, M) Z − μ. tile_rows: rows a tile.

    Returns:
        (r, S1, S2): r (N,) the softmax's row terms r_i = Σ_j dY_ij Y_ij (84; None for 33),
        and per row tile t the column partials S1[t] = Σ_{i∈t} G_ij, S2[t] = Σ_{i∈t} G_ij·zc_ij,
        (T, M) each, of G = dV = Y∘(dY − r) (84) or G = dY (33): everything the batch
        statistics' backward needs from the N×M tensors (:func:`train_backward_fused`).

    The CUDA kernels (``kernels/backward.cu``) differ in two ways that leave the sums the
    same in exact arithmetic: r comes from a pass of its own (``row_dot_kernel``; a block of
    the partials kernel holds 32 columns of a tile, not whole rows), and they read Z, not
    Z − μ (μ is not known before the merge): each tile keeps its own mean_t and M2_t and
    C_t = Σ_{i∈t} G_ij (Z_ij − mean_t), and the merge, in tile order (deterministic, no float
    atomics), gives μ and σ² by Chan's rule and S2 = Σ_t C_t + S1[t]·(mean_t − μ).
    """
    if kind == "84":
        r = (dy * y).sum(dim=1)
        g = y * (dy - r[:, None])
    else:
        r, g = None, dy
    n = dy.shape[0]
    s1 = [g[i:i + tile_rows].sum(dim=0) for i in range(0, n, tile_rows)]
    s2 = [(g[i:i + tile_rows] * zc[i:i + tile_rows]).sum(dim=0) for i in range(0, n, tile_rows)]
    if not s1:  # no rows (a rank of none under data parallelism)
        return r, dy.new_zeros(0, dy.shape[1]), dy.new_zeros(0, dy.shape[1])
    return r, torch.stack(s1), torch.stack(s2)


def train_backward_fused(kind: str, dy: torch.Tensor, y: torch.Tensor, zc: torch.Tensor, var: torch.Tensor,
                         x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, gamma: torch.Tensor,
                         beta: torch.Tensor, eps: float, tile_rows: int = BACKWARD_TILE_ROWS, reduce=None):
    """:func:`train_backward` as the fused backward computes it: one pass over the N×M
    tensors for the column partials (:func:`backward_tile_partials`), their in-order merge into
    per-column coefficients, one elementwise dZ' = a₁∘G + a₂∘(Z − μ) + a₀, the two GEMMs.

    Args and returns: as :func:`train_backward`, plus ``tile_rows`` (rows a tile of the pass)
    and ``reduce``: data parallelism (docs/design.md §14), the collective that sums a tensor
    over the ranks (``torch.distributed.all_reduce``), or None. With it, ``zc`` and ``var`` are
    the global batch's (:func:`stage_forward` with ``gather``), and one call sums
    [S1; S2; Σ_i X; N] (2M + K + 1 floats): dZ' takes the global S1, S2 and N, dW is centred
    on the global x̄ (Σ over the ranks of dZ'_rᵀ(X_r − x̄) is then Σ dZ'ᵀX, since Σ dZ' = 0 over the
    global batch only), and dγ, dβ, ds are this rank's part, from its own rows (33's ds from
    its S2, Σ zc and Σ zc², the sums the global form above drops) — what ``nn.SyncBatchNorm``
    returns, for DistributedDataParallel to sum.

    With S1 = Σ_i G, S2 = Σ_i G∘zc merged over the tiles (G = dV for 84, dY for 33) and σ̂ the
    standard deviation BatchNorm divides by (84: √(σ²+ε); 33: √(s²σ²+ε)), per column:

    * 84 (dU = s·G, x̂ = zc/σ̂): dβ = s·S1, dγ = s·S2/σ̂, ds = Σ_j (γ·S2/σ̂ + β·S1);
      a₁ = sγ/σ̂, a₀ = −sγ·S1/(Nσ̂), a₂ = −sγ·S2/(Nσ̂³).
    * 33 (dU = G = dY, x̂ = s·zc/σ̂): dβ = S1, dγ = s·S2/σ̂, and ds = γ·S2·ε/σ̂³ (from
      Σ_i dT∘zc with Σ_i x̂∘zc = sNσ²/σ̂ and σ̂² − s²σ² = ε: no cancellation);
      a₁ = sγ/σ̂, a₀ = −sγ·S1/(Nσ̂), a₂ = −s³γ·S2/(Nσ̂³).

    So the backward reads Z' (and Y for 84) twice and dY twice, and writes dZ' once, before
    the GEMMs (the CUDA kernels read Y and dY once more for 84: r's row pass first); what it
    saves from the forward is Z' (33) or Z' and Y (84).

    dW = dZ'ᵀ(X − x̄), x̄ the column mean of X: equal to dZ'ᵀX since Σ_i dZ' = 0 (every column
    of dZ' sums to zero in train mode), but without the cancellation of dZ'ᵀX when X's
    columns sit far from zero (|x̄| ≫ their spread): the rounding of dZ' no longer meets
    |x̄| (offset inputs: 33 at 7×33→65 fp32, dW 2.4e-2 → 1.7e-5 against float64).
    """
    dt = dy.dtype
    n, m = dy.shape
    s = _scale_vector(scale, m, dt)
    g, b = gamma.to(dt), beta.to(dt)
    r, s1, s2 = backward_tile_partials(kind, dy, y, zc, tile_rows)
    s1, s2 = s1.sum(dim=0), s2.sum(dim=0)  # the tiles in order (a kernel: one thread a column)
    xd = x.to(dt)
    xbar = xd.mean(dim=0)
    g1, g2 = s1, s2  # the sums dZ' needs: the global batch's
    if reduce is not None:
        k = x.shape[1]
        total = reduce(torch.cat([s1, s2, xd.sum(dim=0), s1.new_full((1,), float(n))]))
        g1, g2, n = total[:m], total[m:2 * m], int(total[-1].item())
        xbar = total[2 * m:2 * m + k] / n
    if kind == "84":
        sig = torch.sqrt(var + eps)
        dbeta, dgamma = s * s1, s * s2 / sig
        ds_cols = g * s2 / sig + b * s1
        a2 = -s * g * g2 / (n * sig ** 3)
        grad = y * (dy - r[:, None])
    else:
        sig = torch.sqrt(s * s * var + eps)
        dbeta, dgamma = s1, s * s2 / sig
        if reduce is None:
            ds_cols = g * s2 * eps / sig ** 3
        else:  # this rank's Σ_i dT∘zc: Σ zc = 0 and Σ zc² = Nσ² hold over the global batch only
            ds_cols = (g / sig) * (s2 - g1 * zc.sum(dim=0) / n - s * s * g2 * (zc * zc).sum(dim=0) / (n * sig ** 2))
        a2 = -s ** 3 * g * g2 / (n * sig ** 3)
        grad = dy
    a1, a0 = s * g / sig, -s * g * g1 / (n * sig)
    dz = a1 * grad + a2 * zc + a0
    dscale = scale_gradient(ds_cols, scale)
    xc = xd - xbar
    return (dz @ weight.to(dt), dz.t() @ xc, dy.new_zeros(m, dtype=dt), dscale, dgamma, dbeta)


def eval_backward(kind: str, dy: torch.Tensor, y: torch.Tensor, z: torch.Tensor, x: torch.Tensor,
                  weight: torch.Tensor, scale: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                  running_mean: torch.Tensor, running_var: torch.Tensor, eps: float):
    """Gradients of an eval-mode forward (running statistics: constants), docs/design.md §10.

    Args:
        kind, dy, y, x, weight, scale, gamma, beta, eps: as :func:`train_backward`.
        z: (N, M) Z = X Wᵀ + b, the GEMM output with the bias.
        running_mean, running_var: (M,) the buffers the forward used.

    Returns:
        (dx, dweight, dbias, dscale, dgamma, dbeta), shapes as :func:`train_backward`.

    With r = 1/√(r_σ² + ε): 84: U = γ∘r∘(Z − r_μ) + β, V = s·U, dV from the softmax, ds = Σ dV∘U,
    dU = s·dV, dZ = γ∘r∘dU. 33 (running statistics of T = Z∘s): Y = γ∘r∘(T − r_μ) + β, dU = dY,
    dT = γ∘r∘dU, ds = Σ_i dT∘Z, dZ = s∘dT. Both: dγ = Σ_i dU∘r∘(· − r_μ), dβ = Σ_i dU, and the
    bias now matters: db = Σ_i dZ.
    """
    dt = dy.dtype
    m = dy.shape[1]
    s = _scale_vector(scale, m, dt)
    g, b = gamma.to(dt), beta.to(dt)
    r = 1.0 / torch.sqrt(running_var.to(dt) + eps)
    rm = running_mean.to(dt)
    if kind == "84":
        xhat = (z - rm) * r
        dv = _softmax_backward(dy, y)
        ds_cols = (dv * (g * xhat + b)).sum(dim=0)
        du = s * dv
        dz = g * r * du
    else:
        xhat = (z * s - rm) * r
        du = dy
        dtt = g * r * du
        ds_cols = (dtt * z).sum(dim=0)
        dz = s * dtt
    dscale = scale_gradient(ds_cols, scale)
    return (dz @ weight.to(dt), dz.t() @ x.to(dt), dz.sum(dim=0), dscale, (du * xhat).sum(dim=0),
            du.sum(dim=0))
