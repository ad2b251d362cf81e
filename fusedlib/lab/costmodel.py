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
both in registers): more instructions, no extra bytes. The Hopper path has two exceptions,
each one pass that makes an operand's parts (read it, write twice its floats) before the GEMM,
which then reads both parts instead of the operand: with many row tiles (at least
:data:`fusedlib.engine.W_PASS_ROW_TILES` of 128), where every CTA of a column would split the
same W tile again, W's parts (:func:`fusedlib.engine.w_parts_pass`); with a batch small beside
out_features, where the GEMM computes Zᵀ = W Xᵀ and splits W in its registers, X's parts
(:func:`fusedlib.engine.x_parts_pass`). The peers run cuBLAS, whatever the precision (they have
no 3xtf32).
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

16-bit precisions (``bf16``, ``fp16``: :data:`PRECISIONS_16`) name the dtype of a module and
its input (``module.to(torch.bfloat16)``), not a GEMM mode: the stages are built with the GEMM
precision of :func:`fusedlib.kernelbench.gemm_precision` (tf32, exact for 16-bit operands, so
the tensor-core row tiles of 128), the peers run cuBLAS and PyTorch in the dtype. The bytes
follow where each tensor is stored: X, W and Y (the module's input, weight and output) at 2
bytes an element in every implementation; sums and fused keep Z' in the dtype in train mode
(:data:`fusedlib.algebra.Z16_STAGES`: rounded once in the GEMM's epilogue, after the
statistics took the float32 sums), while naive and fold keep their intermediate N×M tensors (Z,
V) and every stage its statistics partials in float32 (docs/design.md §15); the peers store Z
and every N×M tensor in the dtype, as eager PyTorch and Inductor do. Vectors of M and N (bias, scale, BatchNorm's parameters and buffers, row
statistics) stay counted at 4 bytes: a few M against N·M. These are the compulsory bytes of
the 16-bit route, where the kernels read the vectors in their dtype and write Y in it; the CUDA
modules' conversions where the 16-bit kernels do not run (X, W and the vectors to float32, Y
back: docs/design.md §15) are passes this model does not charge. The GEMM's FLOPs do not
change; its rate does: :func:`gemm_tflops` takes cuBLAS's bf16 rate (env.json
``gemm_bf16_tflops``), twice the tf32 rate where that was not measured. What the model then
predicts: with a GEMM twice as fast and X and W half the bytes, the GEMM's time halves while
naive's non-GEMM passes over float32 Z do not, so the passes that fusion removes (naive →
fused: the extra reads and writes of Z) are a larger share of the time than at tf32: fusion
saves more against the naive stage. Against eager, which keeps its Z in the 16-bit dtype, the
fused stage keeps its lead because its Z' is in the dtype too (:func:`fusedlib.lab.course.pass_share_table`
gives both at the KernelBench shapes).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..algebra import PRECISIONS, STAGES, tile_rows
from ..engine import w_parts_pass, x_parts_pass

#: The eval-mode GEMM of sums and fused: BatchNorm's coefficients computed in its epilogue.
EVAL_GEMM = "GEMM + eval epilogue a∘(XWᵀ) + a∘b + c"
#: Every implementation the benchmark times: the four stages, then the peers.
IMPLS = ("naive", "fold", "sums", "fused", "eager", "compile", "compile_max_autotune", "gemm_only")
KINDS = ("84", "33")
MODES = ("train", "eval")
F32 = 4
#: The 16-bit precisions: the dtype of the module and its input (bf16 or fp16), every other
#: tensor as described in the module docstring.
PRECISIONS_16 = ("bf16", "fp16")
#: Every precision a benchmark row may name: the GEMM precisions of float32 modules, then the
#: 16-bit dtypes.
ALL_PRECISIONS = PRECISIONS + PRECISIONS_16
#: Bytes an element of X, W and Y at each precision.
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "3xtf32": 4, "bf16": 2, "fp16": 2}

__all__ = ["IMPLS", "KINDS", "MODES", "PRECISIONS", "PRECISIONS_16", "ALL_PRECISIONS", "ELEMENT_BYTES", "Pass",
           "Cost", "cost", "stage_precision", "gemm_tflops"]


def stage_precision(precision: str) -> str:
    """The GEMM precision of the stages at a benchmark ``precision`` (one of
    :data:`ALL_PRECISIONS`): the precision itself for fp32, tf32 and 3xtf32; for bf16 and fp16
    :func:`fusedlib.kernelbench.gemm_precision`'s (tf32, exact for 16-bit operands).

    Raises:
        ValueError: unknown precision.
    """
    from ..kernelbench import gemm_precision
    if precision in PRECISIONS:
        return precision
    if precision in PRECISIONS_16:
        return gemm_precision(precision)
    raise ValueError(f"precision: expected one of {ALL_PRECISIONS}, got {precision!r}")


def gemm_tflops(precision: str, ceil: dict) -> tuple[float, str]:
    """(TFLOP/s, source): the rate a GEMM of ``precision`` can reach, from ``ceil``, the
    ceilings in :func:`fusedlib.lab.course.ceilings`'s form (TFLOP/s under the keys ``fp32``,
    ``tf32`` and, where measured, ``bf16``). fp32 and tf32: their rates; 3xtf32: a third of
    tf32's (three TF32 products); bf16 and fp16: ``ceil["bf16"]`` (cuBLAS's bf16 rate; on the
    H100 fp16 has the same dense rate) with source "bf16", else twice the tf32 rate with source
    "2 × tf32" (the 16-bit tensor-core rate is twice TF32's on Ampere and Hopper), so the caller
    can tell which was used. For the other precisions the source is the key read ("fp32",
    "tf32", "tf32 / 3").

    Raises:
        ValueError: unknown precision.
        KeyError: ``ceil`` lacks the rate needed.
    """
    if precision == "fp32":
        return ceil["fp32"], "fp32"
    if precision == "tf32":
        return ceil["tf32"], "tf32"
    if precision == "3xtf32":
        return ceil["tf32"] / 3, "tf32 / 3"
    if precision in PRECISIONS_16:
        if ceil.get("bf16") is not None:
            return ceil["bf16"], "bf16"
        return 2 * ceil["tf32"], "2 × tf32"
    raise ValueError(f"precision: expected one of {ALL_PRECISIONS}, got {precision!r}")


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
    """Collects passes; sizes are given in fp32 elements (4 bytes): a 16-bit tensor of e
    elements counts e / 2. ``x``, ``w`` and ``y`` are X's, W's and Y's sizes so counted, ``z``
    that of an intermediate N×M tensor (float32 in the stages, the dtype in the peers); ``nk``,
    ``mk`` and ``nm`` are plain element counts (FLOPs)."""

    def __init__(self, kind: str, n: int, k: int, m: int, train: bool, precision: str = "fp32",
                 path: str = "wgmma", peer: bool = False):
        self.kind, self.n, self.k, self.m, self.train = kind, n, k, m, train
        self.nk, self.mk, self.nm = n * k, m * k, n * m
        self.io = io = ELEMENT_BYTES[precision] / F32  # X, W, Y: the module's dtype
        self.x, self.w, self.y = io * self.nk, io * self.mk, io * self.nm
        self.z = io * self.nm if peer else self.nm
        self.s = 1 if kind == "84" else m  # elements of the scale parameter
        self.passes: list[Pass] = []
        gemm = stage_precision(precision)
        # W read once (3xtf32 splits it on the chip), or its two parts made by a pass and read;
        # likewise X, whose parts the swapped 3xtf32 GEMM makes by a pass
        self.w_pass = w_parts_pass(gemm, path, n)
        self.x_pass = not peer and x_parts_pass(gemm, path, n, m)
        self.w_reads = 2 * self.mk if self.w_pass else self.w
        self.x_reads = 2 * self.nk if self.x_pass else self.x
        # Row tiles of the GEMM (and of its statistics partials).
        self.tiles = -(-n // tile_rows(n, m, gemm))

    def add(self, name: str, reads: float, writes: float, flops: float) -> None:
        self.passes.append(Pass(name, F32 * reads, F32 * writes, float(flops)))

    # Passes shared by several implementations.
    def gemm_bias(self, name: str = "GEMM + bias", out: float | None = None) -> None:
        """The engine's GEMM with the bias epilogue: reads X, W and b, writes Z (or ``out``
        elements: Y where the GEMM's output is the module's)."""
        self.add(name, self.x_reads + self.w_reads + self.m, self.z if out is None else out,
                 2 * self.nk * self.m + self.nm)

    def cublas_gemm_bias(self, name: str) -> None:
        """The peers' cuBLAS GEMM with the bias: reads X, W, b once, writes Z."""
        self.add(name, self.x + self.w + self.m, self.z, 2 * self.nk * self.m + self.nm)

    def column_stats_two_kernels(self) -> None:
        self.add("column mean", self.z, self.m, self.nm)
        self.add("column variance", self.z + self.m, self.m, 3 * self.nm)

    def row_softmax_one_kernel(self, name: str, affine: bool) -> None:
        """affine_softmax_rows_kernel: V = a∘Z + c (or V = Z), max, Σexp, normalize; writes Y."""
        self.add(name, self.z + (2 * self.m if affine else 0), self.y, (9 if affine else 7) * self.nm)

    def online_softmax(self, name: str, affine: bool) -> None:
        """online_softmax_rows_kernel: one read of the row, (max, Σexp) partials merged; writes Y."""
        self.add(name, self.z + (2 * self.m if affine else 0), self.y, (11 if affine else 9) * self.nm)

    def affine(self, name: str) -> None:
        """Y = a∘Z + c: reads Z, a, c; writes Y."""
        self.add(name, self.z + 2 * self.m, self.y, 2 * self.nm)


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
    nm, m, s, z = b.nm, b.m, b.s, b.z
    b.gemm_bias()
    if b.kind == "33":
        b.add("scale", z + s, z, nm)
    if b.train:
        b.column_stats_two_kernels()
    b.add("normalize + affine", z + 4 * m, z if b.kind == "84" else b.y, 6 * nm)
    if b.kind == "84":
        b.add("scale", z + 1, z, nm)
        b.add("row max", z, b.n, nm)
        b.add("row sum of exp", z + b.n, b.n, 3 * nm)
        b.add("softmax normalize", z + 2 * b.n, b.y, 3 * nm)
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
        b.gemm_bias(EVAL_GEMM, b.z if b.kind == "84" else b.y)
        if b.kind == "84":
            b.row_softmax_one_kernel("row softmax", affine=False)
        return
    m, s, tiles = b.m, b.s, b.tiles
    b.z = b.io * b.nm  # Z' in the module's dtype (algebra.Z16_STAGES; float32 modules: 4 bytes)
    partials = 2 * tiles * m
    b.add("GEMM + statistics epilogue", b.x_reads + b.w_reads, b.z + partials, 2 * b.nk * m + 4 * b.nm)
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
        b.gemm_bias(EVAL_GEMM, b.z if b.kind == "84" else b.y)
        if b.kind == "84":
            b.online_softmax("row softmax (online)", affine=False)
        return
    m, s, tiles = b.m, b.s, b.tiles
    b.z = b.io * b.nm  # Z' in the module's dtype, as sums
    partials = 2 * tiles * m
    b.add("GEMM + statistics epilogue + last-block merge", b.x_reads + b.w_reads + partials + 5 * m + s,
          b.z + partials + 4 * m, 2 * b.nk * m + 4 * b.nm + 8 * tiles * m + 10 * m)
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
    nm, m, s, z = b.nm, b.m, b.s, b.z
    b.cublas_gemm_bias("GEMM + bias (cuBLAS)")
    if b.kind == "33":
        b.add("x * scale", z + s, z, nm)
    if b.train:
        b.add("BN statistics + running buffers", z + 2 * m, 4 * m, 3 * nm + 6 * m)
    b.add("BN normalize", z + 4 * m, z if b.kind == "84" else b.y, 4 * nm)
    if b.kind == "84":
        b.add("scale * x", z + 1, z, nm)
        b.add("softmax", z, b.y, 7 * nm)


def _compiled(b: _Builder) -> None:
    """torch.compile (Inductor), default and max-autotune alike: the GEMM stays a library
    call (cuBLAS, or a Triton template under max-autotune) writing Z; in train mode one
    column-reduction kernel reads Z once (Welford; 33 multiplies by s on the fly) and
    updates the running buffers; then one fused kernel reads Z once and writes Y (33: scale
    and BatchNorm; 84: BatchNorm, scale and the softmax, the row kept on chip).
    """
    nm, m, s, z = b.nm, b.m, b.s, b.z
    b.cublas_gemm_bias("GEMM + bias")
    if b.train:
        b.add("fused statistics + running buffers", z + s + 2 * m, 4 * m,
              (4 if b.kind == "33" else 3) * nm + 6 * m)
    if b.kind == "84":
        b.add("fused normalize + scale + softmax", z + 4 * m + 1, b.y, 12 * nm)
    else:
        b.add("fused scale + normalize", z + 4 * m + s, b.y, 5 * nm)


def cost(kind: str, impl: str, n: int, k: int, m: int, mode: str = "train", precision: str = "fp32",
         path: str = "wgmma") -> Cost:
    """FLOPs and compulsory DRAM bytes of ``impl`` for one call, pass by pass.

    Args:
        kind: problem family, "84" (softmax(s·BN(Z))) or "33" (BN(Z∘s), problems 33 and 39).
        impl: one of :data:`IMPLS`.
        n, k, m: batch N, in_features K, out_features M (all ≥ 1).
        mode: "train" (batch statistics, running buffers updated) or "eval".
        precision: "fp32", "tf32" or "3xtf32" (float32 modules), or "bf16" or "fp16" (the
            module and its input in that dtype). Stages: the GEMM's row tiles (hence the
            statistics partials of sums and fused; bf16/fp16 at :func:`stage_precision`'s,
            tf32); the bytes are the same at every float32 precision (3xtf32 splits X and W
            on the chip) but for 3xtf32's pass over W or over X (:func:`fusedlib.engine.w_parts_pass`,
            :func:`fusedlib.engine.x_parts_pass`).
            Peers: unchanged at fp32, tf32 and 3xtf32 (cuBLAS reads X and W once at any
            precision; PyTorch has no 3xtf32). bf16/fp16: X, W and Y at 2 bytes an element
            in every implementation, the peers' intermediate N×M tensors too (the module
            docstring); the FLOPs do not change.
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
    if precision not in ALL_PRECISIONS:
        raise ValueError(f"precision: expected one of {ALL_PRECISIONS}, got {precision!r}")
    if min(n, k, m) < 1:
        raise ValueError(f"shape: every dimension must be >= 1, got {n}x{k}->{m}")
    b = _Builder(kind, n, k, m, mode == "train", precision, path, peer=impl not in STAGES)
    if b.w_pass and impl in STAGES:
        b.add("W's TF32 parts (3xtf32 pass)", b.mk, 2 * b.mk, 0)
    if b.x_pass:
        b.add("X's TF32 parts (3xtf32 pass)", b.nk, 2 * b.nk, 0)
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
