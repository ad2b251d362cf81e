"""run231 (one H200 or H100; issue 36's ≤ 1.10 × cuBLAS): does a cluster of two CTAs sharing W's
tile by TMA multicast close the bf16 mainloop's gap to cuBLAS? (results/h200/NOTES.md, "The epilogue
offloaded to the producer's idle warps (run230); the mainloop itself is the gap".)

run230 left the 16-bit GEMM at 1.11 × cuBLAS's at 39 and 1.16 × at 84 and 33 with no epilogue work
on the tensor cores' path; cuBLAS runs clusters of two (`nvjet_sm90_tst_256x128_64x4_1x2`), the
engine none. run231_cluster.patch holds a standalone kernel, the engine's cooperative mainloop
(128 × 256 tiles, four stages of 64 K elements, a static persistent schedule) with CL = 1 (no
cluster) or CL = 2 (row tiles 2i, 2i + 1 of one column tile in a cluster, W's 256 rows multicast,
each CTA loading half): the bytes a CTA reads from L2 a K step fall from 48 to 32 KB.

run231b: with a TMA epilogue (store = 2: 64 × 64 boxes staged in shared memory, stored by TMA
while the warpgroup goes on), whose Y must equal the register store's bit for bit. run231c: the
package's column statistics before it (store = 3, Y bf16; store = 4, Y fp32 as the package's Z′);
their partials equal, and against the tiles' column means and M2 of the fp32 product. run231d: with
a row pass's traffic (N·M 16-bit elements read and written) streamed by the producer warpgroup's
idle warps under the mainloop, a slice a tile (the side stream): what a row pass under the mainloop
would cost.

Checks: Y of both against X·Wᵀ in fp32 (the bf16 output's rounding: one ulp, 2⁻⁸), CL = 1 and CL = 2
equal bit for bit (the same products in the same order), every element written (Y poisoned with
NaN first), at the presets and at 300 × 192 → 264 (partial tiles; an odd number of row tiles).
Then GEMM µs (profiled, three rounds) of CL = 1 and 2, with and without the store, against cuBLAS
(F.linear with bias, as the earlier runs) and the package's sums stage (its GEMM with the
statistics' epilogue), and rounds of whole calls. Writes $OUT/run231-*.csv.

    python lab/experiments/run231-cluster.py build   # write the kernel into build/run231, build it
    python lab/experiments/run231-cluster.py checks  # the small shape's checks only (a hang costs little)
    python lab/experiments/run231-cluster.py         # checks and timings
"""
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from ab import add_patch_files, eager_call, kernel_rounds, report, round_robin_rows  # noqa: E402  (lab/experiments)

OUT = Path(os.environ.get("OUT", "/tmp"))
DEST = Path("build/run231")
DECL = "void gemm(torch::Tensor x, torch::Tensor w, torch::Tensor y, torch::Tensor part, int64_t cluster, int64_t store, torch::Tensor side);"
BINDING = r'''
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include "run231_cluster.cuh"
void gemm(torch::Tensor x, torch::Tensor w, torch::Tensor y, torch::Tensor part, int64_t cluster, int64_t store,
          torch::Tensor side) {
  TORCH_CHECK(side.numel() % 16 == 0 && side.is_contiguous(), "side: two halves of 8-element multiples");
  TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && w.scalar_type() == torch::kBFloat16, "bf16 x, w");
  TORCH_CHECK(y.scalar_type() == (store == 4 ? torch::kFloat32 : torch::kBFloat16), "y: fp32 with store 4, else bf16");
  TORCH_CHECK(part.scalar_type() == torch::kFloat32 && part.numel() >= 2 * ((x.size(0) + 127) / 128) * w.size(0), "part");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && y.is_contiguous(), "contiguous x, w, y");
  const int n = x.size(0), k = x.size(1), m = w.size(0);
  const char* err = fl::launch_cluster_gemm(x.data_ptr(), w.data_ptr(), y.data_ptr(), part.data_ptr<float>(), n, k, m, (int)cluster, (int)store,
                                            side.numel() ? side.data_ptr() : nullptr, (long long)side.numel() / 2,
                                            c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == nullptr, err ? err : "");
}
'''


def write_kernel() -> None:
    """The kernel from run231_cluster.patch into build/run231 (rewritten only if it differs: a new
    file time would make ninja rebuild)."""
    tmp = DEST / "new"
    tmp.mkdir(parents=True, exist_ok=True)
    add_patch_files(tmp, HERE / "run231_cluster.patch")
    new, old = tmp / "run231_cluster.cuh", DEST / "run231_cluster.cuh"
    if not old.exists() or old.read_text() != new.read_text():
        old.write_text(new.read_text())


def build():
    from torch.utils.cpp_extension import load_inline
    from fusedlib.build import KERNEL_DIR, arch_flags
    (DEST / "ext").mkdir(parents=True, exist_ok=True)
    return load_inline(name="run231_cluster", cpp_sources=DECL, cuda_sources=BINDING, functions=["gemm"],
                       extra_cuda_cflags=["-O3", *arch_flags(torch.cuda.get_device_capability())],
                       extra_include_paths=[str(DEST.resolve()), str(KERNEL_DIR)], build_directory=str(DEST / "ext"))


def checks(ext, rows: list, name: str, n: int, k: int, m: int) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    w = (torch.randn(m, k, device="cuda", generator=g) / k ** 0.5).bfloat16()
    ref = x.float() @ w.float().T
    ys, parts = {}, {}
    for cl, store in ((1, 1), (2, 1), (1, 2), (1, 3), (1, 4)):
        y = torch.full((n, m), float("nan"), device="cuda", dtype=torch.float32 if store == 4 else torch.bfloat16)
        part = torch.full((2 * -(-n // 128), m), float("nan"), device="cuda")
        ext.gemm(x, w, y, part, cl, store, x.new_empty(0))
        ys[cl, store], parts[store] = y, part
    # the tiles' column partials (mean_t, M2_t) from the fp32 product
    tiles = [ref[i:i + 128] for i in range(0, n, 128)]
    mean_t = torch.stack([t.mean(0) for t in tiles])
    m2_t = torch.stack([((t - t.mean(0)) ** 2).sum(0) for t in tiles])
    rel = lambda a, b: ((a - b).norm() / b.norm()).item()  # noqa: E731
    cub = torch.nn.functional.linear(x, w)
    torch.cuda.synchronize()
    err = lambda y: ((y.float() - ref).abs().max() / ref.abs().max()).item()  # noqa: E731
    rows.append(dict(shape=name, n=n, k=k, m=m, cl1_err=err(ys[1, 1]), cl2_err=err(ys[2, 1]), cuBLAS_err=err(cub),
                     nan=any(bool(y.isnan().any()) for y in ys.values()), cl1_equals_cl2=torch.equal(ys[1, 1], ys[2, 1]),
                     tma_store_equals=torch.equal(ys[1, 1], ys[1, 2]) and torch.equal(ys[1, 1], ys[1, 3]),
                     fp32_store_err=((ys[1, 4] - ref).abs().max() / ref.abs().max()).item(),
                     partials_equal=torch.equal(parts[3], parts[4]), mean_t_rel=rel(parts[4][0::2], mean_t),
                     m2_t_rel=rel(parts[4][1::2], m2_t)))
    print(rows[-1], flush=True)


@torch.no_grad()
def main() -> None:
    from fusedlib.build import load_stage
    from fusedlib.modules import from_reference
    from fusedlib.reference import PRESETS, make_reference
    torch.backends.cuda.matmul.allow_tf32 = False
    ext, sums = build(), load_stage("sums")
    check_rows, krows, rrows = [], [], []
    checks(ext, check_rows, "300x192->264", 300, 192, 264)
    for problem in ("39", "84", "33"):
        sh = PRESETS[problem]
        checks(ext, check_rows, problem, sh.batch, sh.in_features, sh.out_features)
    for problem in ("39", "84", "33"):
        sh = PRESETS[problem]
        ref = make_reference(problem, sh.in_features, sh.out_features, seed=0)
        mod = from_reference(ref, stage="sums", precision="tf32").cuda().train().to(torch.bfloat16)
        x = torch.randn(sh.batch, sh.in_features, device="cuda", dtype=torch.bfloat16)
        w, b = ref.gemm.weight.cuda().bfloat16(), ref.gemm.bias.cuda().bfloat16()
        y = torch.empty(sh.batch, sh.out_features, device="cuda", dtype=torch.bfloat16)
        y32 = torch.empty(sh.batch, sh.out_features, device="cuda")
        part = torch.empty(2 * -(-sh.batch // 128), sh.out_features, device="cuda")

        side = torch.zeros(2 * sh.batch * sh.out_features, device="cuda", dtype=torch.bfloat16)

        def proto(cl, store, stream=False):
            out, sd = (y32 if store == 4 else y), (side if stream else side[:0])
            return lambda x: (ext.gemm(x, w, out, part, cl, store, sd), out)[1]
        variants = {"package sums": eager_call(sums, mod, "tf32"), "cl1": proto(1, 1), "cl1 TMA store": proto(1, 2),
                    "cl1 stats + TMA bf16": proto(1, 3), "cl1 stats + TMA fp32": proto(1, 4), "cl1 no store": proto(1, 0),
                    "cl1 stats + TMA bf16 + side": proto(1, 3, True), "cl1 no store + side": proto(1, 0, True),
                    "cuBLAS": lambda x, w=w, b=b: torch.nn.functional.linear(x, w, b)}
        krows += kernel_rounds(variants, x, problem=problem)
        rrows += round_robin_rows({v: variants[v] for v in ("cl1 stats + TMA bf16", "cl1 stats + TMA bf16 + side",
                                                            "cuBLAS")}, x, 100 if problem == "39" else 200,
                                  problem=problem)
    report("run231", OUT, check_rows, krows, rrows)


if __name__ == "__main__":
    if sys.argv[1:] == ["build"]:
        write_kernel()
        build()
    elif sys.argv[1:] == ["checks"]:
        rows = []
        checks(build(), rows, "300x192->264", 300, 192, 264)
        checks(build(), rows, "v0", 128, 1024, 512)
    else:
        main()
