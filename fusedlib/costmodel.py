"""Cost model: FLOPs and compulsory DRAM bytes of every stage and peer, pass by pass.

Each implementation is a list of passes (one kernel, or one logical step of a library
call); a pass moves the bytes it must read and write at least once (fp32, 4 bytes an
element) and does its arithmetic. Arithmetic intensity = FLOPs / bytes (FLOP/byte), the
x axis of the roofline (Williams, Waterman & Patterson 2009). Counts are analytic: caches
that turn a second read into an L2 hit are not credited, which is what "compulsory" means.

Shapes: X (N×K), W (M×K), Z and Y (N×M), vectors of M. GEMM FLOPs 2NKM; the useful FLOPs
are the same for every precision (3xTF32 issues three tensor-core products for them).
Softmax counts 5 FLOPs an element (max, subtract, exp, sum, scale), normalize + affine 4,
a column-statistics pass 3, a plain affine 2.
"""
from __future__ import annotations

from dataclasses import dataclass, field

IMPLS = ("naive", "fold", "sums", "fused", "eager", "compile", "compile_max_autotune", "gemm_only")
F32 = 4
#: Rows per statistics tile (the GEMM's block height) in the sums and fused kernels.
TILE_ROWS = {"sums": 64, "fused": 128}


@dataclass
class Pass:
    """One kernel or library step: its name, DRAM bytes moved and FLOPs."""

    name: str
    bytes: float
    flops: float


@dataclass
class Cost:
    """Totals of an implementation: FLOPs, compulsory DRAM bytes, intensity (FLOP/byte) and
    the passes they add up from."""

    impl: str
    passes: list[Pass] = field(default_factory=list)

    @property
    def flops(self) -> float:
        return sum(p.flops for p in self.passes)

    @property
    def bytes(self) -> float:
        return sum(p.bytes for p in self.passes)

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    def time_ms(self, tflops: float, gbytes_per_s: float) -> float:
        """Predicted time in ms: each pass is a separate kernel bound by its own roof,
        max(FLOPs / rate, bytes / bandwidth), and the passes add up (no overlap between
        kernels). ``tflops`` in TFLOP/s for the GEMM's precision, ``gbytes_per_s`` in GB/s."""
        return sum(max(p.flops / (tflops * 1e12), p.bytes / (gbytes_per_s * 1e9)) for p in self.passes) * 1e3


def cost(kind: str, impl: str, n: int, k: int, m: int, mode: str = "train", precision: str = "fp32") -> Cost:
    """Passes of ``impl`` for problem family ``kind`` ("84" or "33"), shape N×K→M, ``mode``
    train or eval, GEMM ``precision``. See the module docstring for the conventions.

    Raises:
        ValueError: unknown kind, impl or mode.
    """
    if kind not in ("84", "33"):
        raise ValueError(f"kind: expected '84' or '33', got {kind!r}")
    if impl not in IMPLS:
        raise ValueError(f"impl: expected one of {IMPLS}, got {impl!r}")
    if mode not in ("train", "eval"):
        raise ValueError(f"mode: expected 'train' or 'eval', got {mode!r}")
    nk, mk, nm = n * k, m * k, n * m
    train = mode == "train"
    gemm_flops = 2.0 * n * k * m
    out = Cost(impl)
    add = lambda name, elems, flops: out.passes.append(Pass(name, F32 * elems, flops))  # noqa: E731

    def gemm(name="GEMM + bias", extra=0, w_elems=mk, x_elems=nk):
        add(name, x_elems + w_elems + nm + m + extra, gemm_flops + nm)

    def softmax_3pass(write_to_y=True):
        add("row max", nm, nm)
        add("row sum of exp", nm + n, 3 * nm)
        add("normalize", nm + 2 * n + nm, nm)

    if impl == "gemm_only":
        gemm("GEMM + bias (cuBLAS)")
        return out
    if impl in ("eager", "compile", "compile_max_autotune"):
        gemm("GEMM + bias (cuBLAS)")
        if impl == "eager":
            if kind == "33":
                add("x * scale", 2 * nm + m, nm)
            if train:
                add("BN statistics", nm + 2 * m, 3 * nm)
            add("BN normalize", 2 * nm + 4 * m, 4 * nm)
            if kind == "84":
                add("scale * x", 2 * nm, nm)
                add("softmax", 2 * nm, 5 * nm)
        else:  # torch.compile (inductor): one reduction over Z, one fused pointwise/softmax pass
            if train:
                add("fused statistics", nm + 2 * m, 3 * nm)
            add("fused normalize" + (" + softmax" if kind == "84" else ""), 2 * nm + 4 * m,
                (9 if kind == "84" else 4) * nm)
        return out
    if impl == "naive":
        gemm()
        if kind == "33":
            add("scale", 2 * nm + m, nm)
        if train:
            add("column mean", nm + m, nm)
            add("column variance", nm + 2 * m, 3 * nm)
        add("normalize + affine", 2 * nm + 4 * m, 4 * nm)
        if kind == "84":
            add("scale", 2 * nm, nm)
            softmax_3pass()
        if train:
            add("running buffers", 6 * m, 6 * m)
        return out
    if impl == "fold":
        gemm()
        if train:
            add("column mean", nm + m, nm)
            add("column variance", nm + 2 * m, 3 * nm)
        add("coefficients (+ running buffers)", 10 * m if train else 8 * m, 10 * m)
        if kind == "84":
            add("V = a∘Z + c, row softmax", 2 * nm + 2 * m, 7 * nm)
        else:
            add("Y = a∘Z + c", 2 * nm + 2 * m, 2 * nm)
        return out
    # sums and fused
    split = impl == "fused" and precision == "3xtf32"
    if not train:
        if split:
            add("split X into TF32 parts", 3 * nk, 2 * nk)
        gemm("GEMM with folded W', b'", w_elems=(2 * mk if split else mk), x_elems=(2 * nk if split else nk))
        if kind == "84":
            add("row softmax", 2 * nm, 5 * nm)
        return out
    tiles = -(-n // TILE_ROWS[impl])
    partials = 2 * tiles * m
    if split:
        add("split X into TF32 parts", 3 * nk, 2 * nk)
    label = "GEMM + statistics epilogue" + (" + last-block merge" if impl == "fused" else "")
    add(label, (2 if split else 1) * (nk + mk) + nm + partials, gemm_flops + 3 * nm)
    if impl == "sums":
        add("finalize (Chan merge, coefficients, running buffers)", partials + 10 * m, 12 * tiles * m)
    else:
        out.passes[-1].bytes += F32 * (partials + 10 * m)  # the last blocks read the partials back
    if kind == "84":
        add("V = a∘Z' + c, row softmax" + (" (online)" if impl == "fused" else ""), 2 * nm + 2 * m, 7 * nm)
    else:
        add("Y = a∘Z' + c", 2 * nm + 2 * m, 2 * nm)
    return out
