"""Solutions for notebook 02 (the naive stage): its DRAM bytes from the shapes; waves."""
import math


def naive_bytes(problem: str, n: int, k: int, m: int) -> float:
    """DRAM bytes (read + written, float32) of the naive stage's train-mode forward, vectors of
    length N or M left out. The GEMM reads X (N×K) and W (M×K) and writes Z (N×M); after it,
    84 reads an N×M tensor 7 times and writes one 3 times (normalize, scale, softmax), 33/39
    read one 4 times and write one twice (scale, normalize)."""
    gemm = n * k + m * k + n * m
    after = (7 + 3) * n * m if problem == "84" else (4 + 2) * n * m
    return 4.0 * (gemm + after)


def waves(tiles: int, sms: int, blocks_per_sm: int) -> tuple[int, float]:
    """(waves, share of the block slots busy): the GPU runs sms·blocks_per_sm blocks at once, so
    a grid of ``tiles`` blocks needs ceil(tiles / slots) waves, and the slots are busy
    tiles / (waves·slots) of the time."""
    slots = sms * blocks_per_sm
    w = math.ceil(tiles / slots)
    return w, tiles / (w * slots)


def fuse_scale(kernels):
    """Problem 33's scale moved into the naive stage's GEMM epilogue, in the copy of the kernel
    sources in folder ``kernels`` (a pathlib.Path): the SIMT and mma.sync epilogues' store
    multiplies each column by s_j after adding the bias (epilogue.cuh, store_tile), and the naive
    forward drops its scale pass where the GEMM ran that store, BatchNorm reading Z∘s where the
    GEMM left it (01_naive.cu); the wgmma GEMM stores from its registers
    (epilogue_from_fragments), so on its path the pass stays."""
    scale_in_epilogue(kernels)
    naive = kernels / "01_naive.cu"
    text = naive.read_text()
    scale_pass = """  if (p.kind != 84 && p.sync_phase != 1) {
    scale_kernel<<<ew_blocks, ew_threads, 0, st>>>(p.z, p.scale, p.scale_len, p.y, p.n, p.m);
    FL_CHECK_LAUNCH();
    t = p.y;
  }
"""
    if scale_pass not in text:
        raise ValueError(f"{naive}: the scale pass this solution removes is not there (the kernel sources changed)")
    naive.write_text(text.replace(scale_pass, scale_pass.replace("p.sync_phase != 1", "p.sync_phase != 1 && p.path == PATH_WGMMA")))


def scale_in_epilogue(kernels):
    """The epilogue half of :func:`fuse_scale`: store_tile multiplies column j by s_j after the bias
    (problem 33)."""
    epilogue = kernels / "epilogue.cuh"
    bias = "      if (S == Store::kBias && !p.z0) v += vec_at<OP>(p.bias, j);  // (Z − Z₀ of the first-row shift has none)\n"
    if bias not in epilogue.read_text():
        raise ValueError(f"{epilogue}: the bias line this solution extends is not there (the kernel sources changed)")
    epilogue.write_text(epilogue.read_text().replace(
        bias, bias + "      if (S == Store::kBias && p.kind != 84) v *= scale_at<OP>(p, j);  // Z∘s\n"))
