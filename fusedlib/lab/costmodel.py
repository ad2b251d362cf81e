"""Cost model: FLOPs and compulsory DRAM bytes of every stage and peer, pass by pass.

Each implementation is a list of passes, one per kernel (or per logical step of a library
call), in launch order. A pass is charged the bytes it must read and write at least once
(fp32, 4 bytes an element) and the arithmetic it executes. Totals give the arithmetic
intensity, FLOPs / bytes (FLOP/byte), the x axis of the roofline (Williams, Waterman &
Patterson 2009). "Compulsory" is counted per kernel: a kernel pays once for each distinct
element it reads or writes (a re-read inside the kernel, served from shared memory or L2,
is not charged), and every kernel pays for its own traffic (an L2 hit on data a previous
kernel touched is not credited). So fusing two passes into one kernel is what saves bytes.

Shapes: X (N×K), W (M×K), Z, Z' and Y (N×M), vectors of M (μ, σ², γ, β, s, a, c, running
buffers), vectors of N (softmax row max and sum). Per-(row tile, column) partials: the GEMM
epilogues of ``sums`` and ``fused`` store two floats (mean_t, M2_t) per tile and column;
the tile count n_t is implicit (rows per tile, last tile shorter), so T·M·2 floats with
T = ceil(N / tile rows). Every stage runs the same GEMM (:mod:`fusedlib.engine`), so the
tile rows depend on the precision and the shape only (:func:`fusedlib.algebra.tile_rows`):
128, 64 or 32 on the SIMT path (fp32: the largest whose square tiles number at least 132),
128 on the tensor-core paths (tf32, 3xtf32).

Precision barely changes the GEMM's DRAM traffic: every precision reads X and W once. 3xtf32
splits both into their TF32 parts at every call, on the chip (the Hopper path splits X in the
consumers' registers and W in shared memory after each tile lands; the mma.sync path splits
both in registers): more instructions, no extra bytes. The exception is the Hopper path with
many row tiles (``path="wgmma"``, at least :data:`fusedlib.engine.W_PASS_ROW_TILES` of 128),
where every CTA of a column would split the same W tile again: there one pass makes W's parts
(read M·K, write 2·M·K floats) and the GEMM reads both parts instead of W. The peers run cuBLAS, whatever the
precision (they have no 3xtf32).
At small shapes (KernelBench v0: wgmma tiles for fewer than half the SMs, SIMT 32×32 tiles
fewer than 132) the wgmma and SIMT GEMMs split K (split-K): each split's partial tile is written
and re-read by the same kernel, from L2; like the in-kernel re-reads below, it is not charged.

FLOP conventions, per element of an N×M tensor, one FLOP for each add, multiply, compare,
divide, square root or exponential the kernel executes:

* GEMM 2NKM, whatever the precision (3xTF32 issues three tensor-core products for the same
  useful FLOPs; they are not counted three times). Bias add 1.
* column mean 1; column variance 3 (subtract, square, add); both in a GEMM epilogue 4.
* normalize + affine 6 as the naive kernel executes it (ε add, square root, subtract,
  divide, multiply, add); PyTorch's (z − μ)·invstd·γ + β 4; V = a∘Z + c 2; scale 1.
* softmax: row max 1, Σexp 3 (subtract, exp, add), normalize 3 (subtract, exp, scale):
  7 in all; the online softmax 9 (2 more for rescaling the running sum).

Single-kernel softmaxes (``fold``, ``sums``: ``affine_softmax_rows_kernel``; ``fused``:
the online softmax; PyTorch's softmax kernel) read each row of Z once: they hold it in
shared memory (rows up to 200 KiB, M ≤ 51200, in this project's kernels) and otherwise
re-read it from L2, which the per-kernel count above does not charge.

Nothing derived from the parameters is kept between calls: in eval mode the GEMM's epilogue
computes BatchNorm's coefficients (a, c) from the running statistics, γ, β, s and b at each
call and writes a∘(XWᵀ) + (a∘b + c) (no folded weight exists; of the M-vectors it reads only
the bias is charged, the others are a few M floats against N·M), and 3xtf32 splits W inside
the GEMM, so every call's bytes are charged to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..algebra import PRECISIONS, STAGES, tile_rows
from ..engine import w_parts_pass

#: The eval-mode GEMM of sums and fused: BatchNorm's coefficients computed in its epilogue.
EVAL_GEMM = "GEMM + eval epilogue a∘(XWᵀ) + a∘b + c"
#: Every implementation the benchmark times: the four stages, then the peers.
IMPLS = ("naive", "fold", "sums", "fused", "eager", "compile", "compile_max_autotune", "gemm_only")
KINDS = ("84", "33")
MODES = ("train", "eval")
F32 = 4

__all__ = ["IMPLS", "KINDS", "MODES", "PRECISIONS", "Pass", "Cost", "cost"]


@dataclass(frozen=True)
class Pass:
    """One kernel or library step: name, DRAM bytes read and written, FLOPs executed."""

    name: str
    read_bytes: float
    write_bytes: float
    flops: float

    @property
    def bytes(self) -> float:
        """Bytes moved, read + written."""
        return self.read_bytes + self.write_bytes

    @property
    def intensity(self) -> float:
        """FLOP per byte of this pass."""
        return self.flops / self.bytes if self.bytes else float("inf")


@dataclass
class Cost:
    """Cost of one implementation at one shape: its passes and their totals.

    ``flops`` (FLOP), ``bytes`` (compulsory DRAM bytes), ``intensity`` (FLOP/byte).
    """

    kind: str
    impl: str
    n: int
    k: int
    m: int
    mode: str
    precision: str
    passes: list[Pass] = field(default_factory=list)

    @property
    def flops(self) -> float:
        """Total FLOPs over all passes."""
        return float(sum(p.flops for p in self.passes))

    @property
    def bytes(self) -> float:
        """Total compulsory DRAM bytes (read + written) over all passes."""
        return float(sum(p.bytes for p in self.passes))

    @property
    def intensity(self) -> float:
        """Arithmetic intensity of the whole implementation, FLOP/byte."""
        return self.flops / self.bytes

    def time_ms(self, tflops: float, gbytes_per_s: float) -> float:
        """Predicted time in ms: each pass is a separate kernel bound by its own roof,
        max(FLOPs / rate, bytes / bandwidth), and the passes add up (kernels do not overlap).

        Args:
            tflops: compute rate in TFLOP/s (the GEMM's rate at its precision).
            gbytes_per_s: DRAM bandwidth in GB/s (read + written).
        """
        return sum(max(p.flops / (tflops * 1e12), p.bytes / (gbytes_per_s * 1e9)) for p in self.passes) * 1e3

    def table(self) -> list[dict]:
        """One dict a pass, for teaching tables: pass, MB read, MB written, MB, GFLOP, FLOP/byte."""
        return [{"pass": p.name, "MB read": p.read_bytes / 1e6, "MB written": p.write_bytes / 1e6,
                 "MB": p.bytes / 1e6, "GFLOP": p.flops / 1e9, "FLOP/byte": p.intensity} for p in self.passes]

    def as_dict(self) -> dict:
        """Totals and passes as plain data: kind, impl, n, k, m, mode, precision, flops,
        bytes, intensity and ``passes`` (list of dicts name, read_bytes, write_bytes, flops)."""
        return {"kind": self.kind, "impl": self.impl, "n": self.n, "k": self.k, "m": self.m,
                "mode": self.mode, "precision": self.precision, "flops": self.flops, "bytes": self.bytes,
                "intensity": self.intensity,
                "passes": [{"name": p.name, "read_bytes": p.read_bytes, "write_bytes": p.write_bytes,
                            "flops": p.flops} for p in self.passes]}


class _Builder:
    """Collects passes; sizes are given in fp32 elements."""

    def __init__(self, kind: str, n: int, k: int, m: int, train: bool, precision: str = "fp32",
                 path: str = "wgmma"):
        self.kind, self.n, self.k, self.m, self.train = kind, n, k, m, train
        self.nk, self.mk, self.nm = n * k, m * k, n * m
        self.s = 1 if kind == "84" else m  # elements of the scale parameter
        self.passes: list[Pass] = []
        # W read once (3xtf32 splits it on the chip), or its two parts made by a pass and read
        self.w_pass = w_parts_pass(precision, path, n)
        self.w_reads = 2 * self.mk if self.w_pass else self.mk
        # Row tiles of the GEMM (and of its statistics partials).
        self.tiles = -(-n // tile_rows(n, m, precision))

    def add(self, name: str, reads: float, writes: float, flops: float) -> None:
        self.passes.append(Pass(name, F32 * reads, F32 * writes, float(flops)))

    # Passes shared by several implementations.
    def gemm_bias(self, name: str = "GEMM + bias") -> None:
        """The engine's GEMM with the bias epilogue: reads X, W and b, writes Z."""
        self.add(name, self.nk + self.w_reads + self.m, self.nm, 2 * self.nk * self.m + self.nm)

    def cublas_gemm_bias(self, name: str) -> None:
        """The peers' cuBLAS GEMM with the bias: reads X, W, b once, writes Z."""
        self.add(name, self.nk + self.mk + self.m, self.nm, 2 * self.nk * self.m + self.nm)

    def column_stats_two_kernels(self) -> None:
        self.add("column mean", self.nm, self.m, self.nm)
        self.add("column variance", self.nm + self.m, self.m, 3 * self.nm)

    def row_softmax_one_kernel(self, name: str, affine: bool) -> None:
        """affine_softmax_rows_kernel: V = a∘Z + c (or V = Z), max, Σexp, normalize."""
        self.add(name, self.nm + (2 * self.m if affine else 0), self.nm, (9 if affine else 7) * self.nm)

    def online_softmax(self, name: str, affine: bool) -> None:
        """online_softmax_rows_kernel: one read of the row, (max, Σexp) partials merged."""
        self.add(name, self.nm + (2 * self.m if affine else 0), self.nm, (11 if affine else 9) * self.nm)

    def affine(self, name: str) -> None:
        self.add(name, self.nm + 2 * self.m, self.nm, 2 * self.nm)


def _naive(b: _Builder) -> None:
    """Naive: one kernel per operator, each reading and writing a full tensor.

    GEMM + bias reads X, W, b and writes Z. 33/39: the scale kernel reads and rewrites Z
    before the statistics (BatchNorm sees Z∘s). Train mode: the column-mean kernel reads Z
    and writes μ; the column-variance kernel reads Z again (and μ) and writes σ². The
    normalize + affine kernel reads Z, μ, σ², γ, β and writes Z back (84, in place) or Y
    (33). 84 continues with the scale kernel (read Z, write Z) and a three-kernel softmax:
    row max (read Z, write N maxima), row Σexp (read Z and the maxima, write N sums),
    normalize (read Z, maxima and sums, write Y). Train mode ends with the running-buffer
    update (reads μ, σ² and both buffers, writes the buffers).
    N×M traffic in train mode: 84 writes Z 3 times (GEMM, normalize, scale), reads it 7
    times (mean, variance, normalize, scale, max, Σexp, softmax normalize) and writes Y;
    33 writes Z twice (GEMM, scale), reads it 4 times and writes Y.
    """
    nm, m, s = b.nm, b.m, b.s
    b.gemm_bias()
    if b.kind == "33":
        b.add("scale", nm + s, nm, nm)
    if b.train:
        b.column_stats_two_kernels()
    b.add("normalize + affine", nm + 4 * m, nm, 6 * nm)
    if b.kind == "84":
        b.add("scale", nm + 1, nm, nm)
        b.add("row max", nm, b.n, nm)
        b.add("row sum of exp", nm + b.n, b.n, 3 * nm)
        b.add("softmax normalize", nm + 2 * b.n, nm, 3 * nm)
    if b.train:
        b.add("running buffers", 4 * m, 2 * m, 6 * m)


def _fold(b: _Builder) -> None:
    """Fold: the scale folded into BatchNorm's per-column coefficients, V = a∘Z + c.

    GEMM + bias (read X, W, b; write Z); train: mean and variance kernels as in naive (two
    reads of Z); a tiny coefficient kernel on M-vectors (train: reads μ, σ², s, γ, β and
    the running buffers, writes a, c and the buffers; eval: reads the running buffers,
    s, γ, β, writes a, c); then one row pass: 33 reads Z, a, c and writes Y; 84 is a single
    row-softmax kernel that holds the row on chip, so it reads Z once and writes Y once.
    Full-tensor passes (train): GEMM write, 2 reads for the statistics, 1 read + 1 write of
    the row pass.
    """
    m, s = b.m, b.s
    b.gemm_bias()
    if b.train:
        b.column_stats_two_kernels()
        b.add("coefficients + running buffers", 4 * m + s + 2 * m, 4 * m, 10 * m)
    else:
        b.add("coefficients", 4 * m + s, 2 * m, 5 * m)
    if b.kind == "84":
        b.row_softmax_one_kernel("V = a∘Z + c, row softmax", affine=True)
    else:
        b.affine("Y = a∘Z + c")


def _sums(b: _Builder) -> None:
    """Sums: the batch statistics come out of the GEMM's epilogue.

    Train: the GEMM (no bias: it cancels) reads X and W and writes Z' plus its row tiles'
    partials (mean_t, M2_t): 2·T·M floats, T = ceil(N / tile rows). A finalize kernel reads
    the partials (merging them with Chan's formula in a fixed order), s, γ, β, b and the running
    buffers, and writes a, c and the buffers. One row pass reads Z' once and writes Y
    (84: the single-kernel row softmax, row kept in shared memory; 33: the affine).
    Full-tensor passes (train): GEMM write, 1 read + 1 write. Eval: the GEMM with the eval
    epilogue, a∘(XWᵀ) + (a∘b + c), (a, c) computed in the epilogue from the running
    statistics, writing V (84, then the row softmax: 1 read, 1 write) or Y (33).
    """
    if not b.train:
        b.gemm_bias(EVAL_GEMM)
        if b.kind == "84":
            b.row_softmax_one_kernel("row softmax", affine=False)
        return
    m, s, tiles = b.m, b.s, b.tiles
    partials = 2 * tiles * m
    b.add("GEMM + statistics epilogue", b.nk + b.w_reads, b.nm + partials, 2 * b.nk * m + 4 * b.nm)
    b.add("finalize (Chan merge, coefficients, running buffers)", partials + 5 * m + s, 4 * m,
          8 * tiles * m + 10 * m)
    if b.kind == "84":
        b.row_softmax_one_kernel("V = a∘Z' + c, row softmax", affine=True)
    else:
        b.affine("Y = a∘Z' + c")


def _fused(b: _Builder) -> None:
    """Fused: one GEMM whose last block per column block finalizes the statistics.

    Train: the GEMM reads X and W and writes Z' and its row tiles' partials (2·T·M floats,
    T = ceil(N / tile rows)); the last block of each column block reads the partials back
    and writes a, c and the running buffers (reading s, γ, β, b and the buffers) — all inside
    the GEMM kernel. One row pass reads Z' once and writes Y: 84 the online softmax (row on
    chip), 33 the affine. Full-tensor passes: GEMM write, 1 read + 1 write: the floor of
    docs/design.md §3. Eval: the GEMM with the eval epilogue, a∘(XWᵀ) + (a∘b + c), then
    (84) the online softmax.
    """
    if not b.train:
        b.gemm_bias(EVAL_GEMM)
        if b.kind == "84":
            b.online_softmax("row softmax (online)", affine=False)
        return
    m, s, tiles = b.m, b.s, b.tiles
    partials = 2 * tiles * m
    b.add("GEMM + statistics epilogue + last-block merge", b.nk + b.w_reads + partials + 5 * m + s,
          b.nm + partials + 4 * m, 2 * b.nk * m + 4 * b.nm + 8 * tiles * m + 10 * m)
    if b.kind == "84":
        b.online_softmax("V = a∘Z' + c, online row softmax", affine=True)
    else:
        b.affine("Y = a∘Z' + c")


def _eager(b: _Builder) -> None:
    """PyTorch eager, the reference module: one library kernel per operator.

    cuBLAS GEMM with the bias in its epilogue (read X, W, b; write Z). 33: ``x * scale``
    (read Z, s; write). BatchNorm: train mode one statistics kernel (read Z once, Welford;
    write mean and invstd, update the running buffers), then the elementwise kernel (read Z,
    mean, invstd, γ, β; write). 84: ``scale * x`` (read, write) and the softmax (one read of
    each row held in shared memory, one write).
    """
    nm, m, s = b.nm, b.m, b.s
    b.cublas_gemm_bias("GEMM + bias (cuBLAS)")
    if b.kind == "33":
        b.add("x * scale", nm + s, nm, nm)
    if b.train:
        b.add("BN statistics + running buffers", nm + 2 * m, 4 * m, 3 * nm + 6 * m)
    b.add("BN normalize", nm + 4 * m, nm, 4 * nm)
    if b.kind == "84":
        b.add("scale * x", nm + 1, nm, nm)
        b.add("softmax", nm, nm, 7 * nm)


def _compiled(b: _Builder) -> None:
    """torch.compile (Inductor), default and max-autotune alike: the GEMM stays a library
    call (cuBLAS, or a Triton template under max-autotune) writing Z; in train mode one
    column-reduction kernel reads Z once (Welford; 33 multiplies by s on the fly) and
    updates the running buffers; then one fused kernel reads Z once and writes Y (33: scale
    and BatchNorm; 84: BatchNorm, scale and the softmax, the row kept on chip).
    """
    nm, m, s = b.nm, b.m, b.s
    b.cublas_gemm_bias("GEMM + bias")
    if b.train:
        b.add("fused statistics + running buffers", nm + s + 2 * m, 4 * m,
              (4 if b.kind == "33" else 3) * nm + 6 * m)
    if b.kind == "84":
        b.add("fused normalize + scale + softmax", nm + 4 * m + 1, nm, 12 * nm)
    else:
        b.add("fused scale + normalize", nm + 4 * m + s, nm, 5 * nm)


def cost(kind: str, impl: str, n: int, k: int, m: int, mode: str = "train", precision: str = "fp32",
         path: str = "wgmma") -> Cost:
    """FLOPs and compulsory DRAM bytes of ``impl`` for one call, pass by pass.

    Args:
        kind: problem family, "84" (softmax(s·BN(Z))) or "33" (BN(Z∘s), problems 33 and 39).
        impl: one of :data:`IMPLS`.
        n, k, m: batch N, in_features K, out_features M (all ≥ 1).
        mode: "train" (batch statistics, running buffers updated) or "eval".
        precision: "fp32", "tf32" or "3xtf32". Stages: the GEMM's row tiles (hence the
            statistics partials of sums and fused); the bytes are the same at every
            precision (3xtf32 splits X and W on the chip) but for 3xtf32's pass over W
            (:func:`fusedlib.engine.w_parts_pass`). Peers: unchanged (cuBLAS reads X and W
            once at any precision; PyTorch has no 3xtf32).
        path: the stages' GEMM path, "wgmma" (the H100's, the default) or "mma"/"simt": where
            3xtf32 makes W's parts by a pass.

    Returns:
        :class:`Cost` with ``flops``, ``bytes``, ``intensity`` and ``passes``. The reasoning
        for each implementation is in the docstrings of ``_naive``, ``_fold``, ``_sums``,
        ``_fused``, ``_eager`` and ``_compiled``; GEMM-only is the GEMM + bias pass alone.

    Raises:
        ValueError: unknown kind, impl, mode or precision, or a dimension < 1.
    """
    if kind not in KINDS:
        raise ValueError(f"kind: expected '84' or '33', got {kind!r}")
    if impl not in IMPLS:
        raise ValueError(f"impl: expected one of {IMPLS}, got {impl!r}")
    if mode not in MODES:
        raise ValueError(f"mode: expected 'train' or 'eval', got {mode!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    if min(n, k, m) < 1:
        raise ValueError(f"shape: every dimension must be >= 1, got {n}x{k}->{m}")
    b = _Builder(kind, n, k, m, mode == "train", precision, path)
    if b.w_pass and impl in STAGES:
        b.add("W's TF32 parts (3xtf32 pass)", b.mk, 2 * b.mk, 0)
    if impl == "gemm_only":
        b.cublas_gemm_bias("GEMM + bias (cuBLAS)")
    elif impl == "naive":
        _naive(b)
    elif impl == "fold":
        _fold(b)
    elif impl == "sums":
        _sums(b)
    elif impl == "fused":
        _fused(b)
    elif impl == "eager":
        _eager(b)
    else:
        _compiled(b)
    return Cost(kind, impl, n, k, m, mode, precision, b.passes)
