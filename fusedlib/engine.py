"""The GEMM engine under every stage: which hardware path (mainloop) runs a precision.

Every stage (naive, fold, sums, fused) calls the same GEMM for a given GPU, precision and
shape; the stages differ only in the epilogue they give it and the passes around it
(docs/design.md §8). Three mainloops, one CUDA header each in ``fusedlib/kernels``:

============  ==========================  ===========================  ===================
path          header                      GPUs (compute capability)    precisions
============  ==========================  ===========================  ===================
``simt``      ``gemm_simt.cuh``           every GPU (7.5 and later)    fp32 (FFMA)
``mma``       ``gemm_mma.cuh``            8.0 and later                tf32, 3xtf32
``wgmma``     ``gemm_wgmma.cuh``          9.0 (sm_90a: H100, H200)     tf32, 3xtf32
============  ==========================  ===========================  ===================

``mma`` is ``mma.sync.m16n8k8`` TF32 with a ``cp.async`` pipeline; ``wgmma`` is the Hopper
warpgroup MMA fed by TMA bulk tensor copies, warp-specialized. The default is the fastest
path the device has: ``wgmma`` on sm_90 for tf32/3xtf32 when TMA can address the operands
(K a multiple of 4, 16-byte aligned X and W), else ``mma``; fp32 always runs ``simt``.
On a GPU without TF32 tensor cores (compute capability below 8.0) tf32 and 3xtf32 raise
:class:`UnsupportedPrecision` (no emulation).

bf16 and fp16 operands (a module in that dtype, docs/design.md §15) run the same two tensor-core
paths with 16-bit instructions (``mma.sync.m16n8k16``, ``wgmma`` m64n256k16: exact products,
fp32 sums), whatever the module's precision, where :func:`sixteen_bit_kernels` holds (compute
capability 8.0 or later, K a multiple of 8); elsewhere the modules convert them to float32.

The environment variable ``FUSEDLIB_GEMM_PATH`` (``auto``, ``simt``, ``mma`` or ``wgmma``)
forces a path, so that every path can be validated on one GPU: on an H100,
``FUSEDLIB_GEMM_PATH=mma`` runs tf32/3xtf32 on the Ampere mainloop. A forced path that
cannot run the precision or the shape on this device raises :class:`UnsupportedPrecision`;
``simt`` forced with tf32/3xtf32 raises too (fp32 is the only precision it has).
"""
from __future__ import annotations

import contextlib
import os

__all__ = ["PATHS", "PATH_CODE", "ENV_VAR", "W_PASS_ROW_TILES", "SWAP_MIN_TILES", "W_SPLIT_VAR", "UnsupportedPrecision",
           "cublas_precision", "forced_path", "select_path", "sixteen_bit_kernels", "w_parts_pass", "x_parts_pass"]

#: Hardware paths (mainloops), in the order of the codes the kernels use (``fl::GemmPath``).
PATHS = ("simt", "mma", "wgmma")
PATH_CODE = {p: i for i, p in enumerate(PATHS)}
#: The switch that forces a path.
ENV_VAR = "FUSEDLIB_GEMM_PATH"
#: Precisions of each path and the lowest compute capability it runs on.
PATH_PRECISIONS = {"simt": ("fp32",), "mma": ("tf32", "3xtf32"), "wgmma": ("tf32", "3xtf32")}
PATH_MIN_CAPABILITY = {"simt": (7, 5), "mma": (8, 0), "wgmma": (9, 0)}


class UnsupportedPrecision(RuntimeError):
    """The precision (or a forced path) cannot run on this GPU or shape."""


def sixteen_bit_kernels(capability: tuple[int, int], k: int) -> bool:
    """Whether bf16/fp16 operands run the 16-bit tensor-core kernels on a device of compute
    capability ``capability`` at in_features ``k``: 8.0 or later (bf16 and fp16 ``mma.sync``),
    and K a multiple of 8 (rows of 16-byte multiples: the 16-byte copies of ``cp.async`` and
    TMA). Where it does not hold, the modules run the float32 kernels on converted operands
    (exact too: docs/design.md §15)."""
    return tuple(capability) >= (8, 0) and k % 8 == 0


def widened_precision(precision: str, capability: tuple[int, int]) -> str:
    """The GEMM precision of a bf16/fp16 module's float32 kernels, where its operands are converted
    to float32 (no 16-bit kernels here, or across a process group: docs/design.md §15): ``"tf32"``
    on a device of compute capability 8.0 or later, else the module's ``precision``. A bf16 or
    fp16 value is a TF32 value (8 and 11 significant bits against TF32's 11), so every precision
    multiplies the converted operands exactly and sums in float32; TF32's tensor cores do it at
    several times the fp32 SIMT GEMM's rate, and 3xTF32 would add two products of zero parts."""
    return "tf32" if tuple(capability) >= PATH_MIN_CAPABILITY["mma"] else precision


def forced_path() -> str:
    """The path ``$FUSEDLIB_GEMM_PATH`` asks for, or ``"auto"`` (unset or empty).

    Raises:
        ValueError: the variable holds something else than auto, simt, mma or wgmma.
    """
    value = os.environ.get(ENV_VAR, "").strip().lower() or "auto"
    if value != "auto" and value not in PATHS:
        raise ValueError(f"{ENV_VAR}: expected one of auto, {', '.join(PATHS)}, got {value!r}")
    return value


def select_path(precision: str, capability: tuple[int, int], k: int | None = None,
                aligned: bool = True, forced: str | None = None, sixteen_bit: bool = False) -> str:
    """The GEMM path that runs ``precision`` on a device of compute capability ``capability``.

    Args:
        precision: "fp32", "tf32" or "3xtf32".
        capability: (major, minor), e.g. (9, 0) for an H100.
        k: in_features; the ``wgmma`` path needs K % 4 == 0 (TMA rows of 16-byte multiples).
            None: not known yet (assume it fits).
        aligned: X and W start on 16-byte boundaries (TMA needs it).
        forced: "auto", "simt", "mma" or "wgmma"; None reads :func:`forced_path`.
        sixteen_bit: X and W in bf16/fp16 (``precision`` then does not apply: their products
            are exact): ``wgmma`` on sm_90, else ``mma`` (``aligned`` does not matter: the
            operator copies a misaligned 16-bit operand); the caller has checked
            :func:`sixteen_bit_kernels`.

    Returns:
        "simt", "mma" or "wgmma".

    Raises:
        ValueError: unknown precision or forced path.
        UnsupportedPrecision: no path of this GPU runs the precision (tf32/3xtf32 below
            compute capability 8.0), or the forced path cannot run it here.
    """
    if precision not in ("fp32", "tf32", "3xtf32"):
        raise ValueError(f"precision: expected one of ('fp32', 'tf32', '3xtf32'), got {precision!r}")
    forced = forced_path() if forced is None else forced
    if forced != "auto" and forced not in PATHS:
        raise ValueError(f"{ENV_VAR}: expected one of auto, {', '.join(PATHS)}, got {forced!r}")
    cap = tuple(capability)
    if sixteen_bit:
        if not sixteen_bit_kernels(cap, 8 if k is None else k):
            raise UnsupportedPrecision(
                f"bf16/fp16 operands need compute capability 8.0 or later and in_features % 8 == 0, "
                f"this GPU has {cap[0]}.{cap[1]} (in_features={k})")
        if forced == "simt" or (forced == "wgmma" and cap != (9, 0)):
            raise UnsupportedPrecision(
                f"{ENV_VAR}={forced}: bf16/fp16 operands run on mma (8.0 or later) or wgmma (9.0 exactly, "
                f"sm_90a); this GPU has {cap[0]}.{cap[1]}")
        return forced if forced != "auto" else "wgmma" if cap == (9, 0) else "mma"
    tma_ok = (k is None or k % 4 == 0) and aligned
    if forced != "auto":
        if precision not in PATH_PRECISIONS[forced]:
            raise UnsupportedPrecision(
                f"{ENV_VAR}={forced}: the {forced} GEMM runs {'/'.join(PATH_PRECISIONS[forced])} only, "
                f"not {precision}")
        if cap < PATH_MIN_CAPABILITY[forced] or (forced == "wgmma" and cap != (9, 0)):
            need = PATH_MIN_CAPABILITY[forced]
            raise UnsupportedPrecision(
                f"{ENV_VAR}={forced}: needs compute capability {need[0]}.{need[1]}"
                f"{' exactly (sm_90a)' if forced == 'wgmma' else ' or later'}, this GPU has {cap[0]}.{cap[1]}")
        if forced == "wgmma" and not tma_ok:
            raise UnsupportedPrecision(
                f"{ENV_VAR}=wgmma: TMA needs in_features % 4 == 0 and 16-byte aligned x and weight "
                f"(got in_features={k}, aligned={aligned})")
        return forced
    if precision == "fp32":
        return "simt"
    if cap < (8, 0):
        raise UnsupportedPrecision(
            f"precision {precision!r} needs TF32 tensor cores (compute capability 8.0 or later); "
            f"this GPU has {cap[0]}.{cap[1]}: use precision='fp32'")
    return "wgmma" if cap == (9, 0) and tma_ok else "mma"


#: 3xTF32 on the wgmma path: from this many row tiles of 128 on, W's TF32 parts come from one
#: pass over W at each call (``kWPassRowTiles``, ``wg_w_pass`` in gemm_wgmma.cuh) instead of the
#: split in shared memory that every row tile's CTA repeats on the same W tile.
W_PASS_ROW_TILES = 32
#: The switch that forces one of the ways ("smem" or "pass": the same bits; "swap": :func:`x_parts_pass`).
W_SPLIT_VAR = "FUSEDLIB_WGMMA_WSPLIT"


def w_parts_pass(precision: str, path: str, n: int) -> bool:
    """Whether a forward of batch ``n`` makes W's TF32 parts in a pass over W (read M·K floats,
    write 2·M·K, which the GEMM then reads instead of W) rather than splitting each W tile in
    shared memory: 3xtf32 on the ``wgmma`` path with at least :data:`W_PASS_ROW_TILES` row tiles
    of 128, unless ``$FUSEDLIB_WGMMA_WSPLIT`` says ``smem`` or ``pass``. The kernels' rule
    (gemm_wgmma.cuh ``wg_w_pass``), for the cost model."""
    if precision != "3xtf32" or path != "wgmma":
        return False
    forced = os.environ.get(W_SPLIT_VAR, "")
    if forced:
        return forced == "pass"
    return -(-n // 128) >= W_PASS_ROW_TILES


#: 3xTF32 on the wgmma path swaps the operands (Zᵀ = W Xᵀ in 128 × 128 tiles) where the batch is at
#: most a quarter of out_features and the tiles number at least this many (``kSwapMinTiles``).
SWAP_MIN_TILES = 264


def x_parts_pass(precision: str, path: str, n: int, m: int) -> bool:
    """Whether a forward of batch ``n`` and ``m`` out_features runs 3xtf32's swapped GEMM (gemm_wgmma.cuh
    ``wg_swap``): W split on the chip, X's TF32 parts made by a pass over X (read N·K floats, write
    2·N·K, which the GEMM reads instead of X). 3xtf32 on ``wgmma`` where 4·n ≤ m, the 128 × 128
    tiles number at least :data:`SWAP_MIN_TILES` and W's parts take no pass; ``$FUSEDLIB_WGMMA_WSPLIT=swap``
    forces it, ``smem`` or ``pass`` the unswapped GEMM. The kernels' rule, for the cost model."""
    if precision != "3xtf32" or path != "wgmma":
        return False
    forced = os.environ.get(W_SPLIT_VAR, "")
    if forced:
        return forced == "swap"
    tiles = -(-n // 128) * -(-m // 128)
    return 4 * n <= m and tiles >= SWAP_MIN_TILES and not w_parts_pass(precision, path, n)


@contextlib.contextmanager
def cublas_precision(precision: str):
    """Scoped TF32 switch for cuBLAS: TF32 on for "tf32", off (IEEE fp32) otherwise, restored on
    exit, also after an exception. Used by the benchmark's PyTorch peers and by the fused
    backward's GEMMs. Through the API the process already uses: the legacy flags
    (``torch.backends.cuda.matmul.allow_tf32`` and ``torch.backends.cudnn.allow_tf32``), or, once
    the program has set an ``fp32_precision`` attribute (which makes PyTorch refuse to read the
    legacy flags), ``torch.backends.cuda.matmul.fp32_precision``. These are process-wide
    settings: another thread's float32 matmuls inside the scope see them too."""
    import torch
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    flag = precision == "tf32"
    try:
        saved = (matmul.allow_tf32, cudnn.allow_tf32)
    except RuntimeError:  # the new API is in use: PyTorch refuses to mix the two
        saved_precision = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if flag else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = saved_precision
        return
    matmul.allow_tf32 = flag
    cudnn.allow_tf32 = flag
    try:
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved
