"""run145: an independent CUDA C reference for the SIMT ceiling. siboehm's SGEMM_CUDA (github.com/siboehm/
SGEMM_CUDA, commit 60cba6f; not part of this project: its checkout is carried to the device in
$SGEMM_CUDA, .cache/sgemm_cuda) reaches ~94 % of cuBLAS on an A6000 with kernel 10 (warp tiling,
float4 loads, register blocking). Here on the H100, in one process with the harness's protocol
(fusedlib.lab.bench.time_round_robin: L2 flush, CUDA events): kernel 10 in its A6000 and A100
configurations (runner.cu's), against cuBLAS SGEMM on the same row-major operands (torch.mm, NN)
and on X Wᵀ (the bench's GEMM-only, TN), at 84's and 39's GEMM and 4096³. C = A·B with A (M×K),
B (K×N) row-major (B = Wᵀ made contiguous once, outside the timing). Prints ptxas's report, the
normwise error against float64 and a table."""
import os
import sys

import torch
from torch.utils.cpp_extension import load_inline

from fusedlib.lab import bench

KDIR = os.path.join(os.environ.get("SGEMM_CUDA", ".cache/sgemm_cuda"), "src", "kernels")
binding = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include "10_kernel_warptiling.cuh"

template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, int TN, int NT>
void launch(const float* a, const float* b, float* c, int M, int N, int K, cudaStream_t st) {
  dim3 grid(CEIL_DIV(N, BN), CEIL_DIV(M, BM));
  sgemmWarptiling<BM, BN, BK, WM, WN, WNITER, TM, TN, NT><<<grid, NT, 0, st>>>(
      M, N, K, 1.f, const_cast<float*>(a), const_cast<float*>(b), 0.f, c);
}

torch::Tensor k10(torch::Tensor a, torch::Tensor b, torch::Tensor c, int64_t config) {
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && c.is_contiguous(), "contiguous operands");
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  TORCH_CHECK(M % 128 == 0 && N % 128 == 0 && K % 16 == 0, "kernel 10 has no edge handling");
  cudaStream_t st = c10::cuda::getCurrentCUDAStream();
  if (config == 0) launch<128, 128, 16, 64, 64, 4, 8, 4, 128>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K, st);
  else launch<64, 128, 16, 32, 64, 1, 4, 4, 128>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K, st);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "launch");
  return c;
}
"""
ext = load_inline("run145_k10", cpp_sources="torch::Tensor k10(torch::Tensor a, torch::Tensor b, torch::Tensor c, int64_t config);",
                  cuda_sources=binding, functions=["k10"], extra_include_paths=[KDIR],
                  extra_cuda_cflags=["-O3", "-Xptxas=-v", "-std=c++17"], verbose=False)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
rows = []
for m, k, n in [(1024, 8192, 8192), (16384, 4096, 4096), (4096, 4096, 4096)]:
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(m, k, generator=g).to(dev)
    w = (torch.randn(n, k, generator=g) / k ** 0.5).to(dev)
    b = w.t().contiguous()
    c = torch.zeros(m, n, device=dev)
    want = a.double() @ b.double()
    errs = {}
    for name, y in (("cuBLAS", a @ b), ("k10 A6000", ext.k10(a, b, c, 0).clone()), ("k10 A100", ext.k10(a, b, c, 1).clone())):
        errs[name] = ((y.double() - want).norm() / want.norm()).item()
    fns = {"cuBLAS NN": (lambda a: torch.mm(a, b), "fp32"), "cuBLAS TN (X Wᵀ)": (lambda a: a @ w.t(), "fp32"),
           "k10 A6000": (lambda a: ext.k10(a, b, c, 0), None), "k10 A100": (lambda a: ext.k10(a, b, c, 1), None)}
    t = bench.time_round_robin(fns, a, iters=50, rounds=10)
    ms = {name: t[name][0] for name in fns}
    print(f"{m}x{k}->{n}: " + "  ".join(f"{nm} {v:.3f} ms ({2 * m * k * n / v / 1e9:.1f} TFLOP/s)" for nm, v in ms.items())
          + "  errors " + " ".join(f"{nm} {e:.2e}" for nm, e in errs.items()), flush=True)
    rows.append((f"{m}x{k}->{n}", ms))
print("\n| GEMM | cuBLAS NN ms | cuBLAS TN ms | k10 A6000 ms (× cuBLAS NN's speed) | k10 A100 ms (×) |")
print("|---|---|---|---|---|")
for shape, ms in rows:
    c0 = ms["cuBLAS NN"]
    print(f"| {shape} | {c0:.3f} | {ms['cuBLAS TN (X Wᵀ)']:.3f} | {ms['k10 A6000']:.3f} ({c0 / ms['k10 A6000']:.2f}) | "
          f"{ms['k10 A100']:.3f} ({c0 / ms['k10 A100']:.2f}) |")
sys.exit(0)
