"""run158 (one H100, prepared): the pieces a bf16/fp16 wgmma mainloop needs, checked alone before
they go into the engine (results/h100/NOTES.md, "bf16 and fp16 on the tensor cores": a plan).

A minimal kernel built from gemm_wgmma.cuh's helpers: Z (N×M, fp32) = X Wᵀ with X (N×K) and W
(M×K) in bf16 or fp16, one CTA a 128×256 tile (not persistent), a producer warp issuing TMA
copies of 128-byte K slices (64 elements) with 128-byte swizzle into a 4-stage ring, two
consumer warpgroups issuing four wgmma m64n256k16 (.f32.bf16.bf16 or .f32.f16.f16, both
operands from shared memory by descriptor, no transpose) a stage, fp32 accumulation, the
accumulator stored from registers. What changes against the engine's tf32 path: the tensor
maps' data type and box (64 elements), the instruction and its two transpose immediates, K per
stage. What does not: the descriptors (rows of 128 bytes, 8-row atoms 1024 bytes apart, a
32-byte step an instruction), the barriers, the accumulator's layout.

Checks, each dtype: the odd and KernelBench shapes (K a multiple of 8: TMA's 16-byte rows)
against float64 of the same 16-bit operands, within fp32 accumulation's bound
(2·K·u32·Σ|x||w| elementwise, u32 = 2⁻²⁴), NaN never passing (the output is poisoned first).
Timing: the kernel against cuBLAS (torch.mm in the same dtype, fp32 accumulation, 16-bit out)
and against F.linear in fp32 with TF32 at 84's shape (1024 × 8192 → 8192): medians of the lab's
timing (fusedlib.lab.timing.time_cuda, an L2 flush before each call).

Usage: python lab/experiments/run158-bf16-wgmma.py [--emit FILE] (FILE: the CUDA source only,
for a compile check without a GPU).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "fusedlib" / "kernels"

#: (name, PTX type, CUtensorMapDataType, torch dtype name)
DTYPES = (("bf16", "bf16", "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "bfloat16"),
          ("f16", "f16", "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "float16"))


def _wgmma(name: str, ptx: str) -> str:
    """D(64×256, fp32) (+)= A(64×16) · B(16×256), both from shared memory, in PTX type ``ptx``."""
    regs = ", ".join(f"%{i}" for i in range(128))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(128))
    return f'''
__device__ __forceinline__ void wgmma_{name}(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %130, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.{ptx}.{ptx} "
      "{{{regs}}}, "
      "%128, %129, p, 1, 1, 0, 0;\\n"
      "}}\\n"
      : {outs}
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}}
'''


def source() -> str:
    """The prototype's CUDA source (host functions gemm_bf16, gemm_f16 for load_inline)."""
    parts = ['#include <torch/extension.h>\n#include <c10/cuda/CUDAStream.h>\n#include "gemm_wgmma.cuh"\n'
             "namespace proto {\nusing namespace fl;\n"
             "constexpr int BM = 128, BN = 256, BK = 64, ST = 4;  // BK: 64 16-bit elements, one 128-byte row\n"
             "constexpr uint32_t A_BYTES = BM * 128, B_BYTES = BN * 128, STAGE = A_BYTES + B_BYTES;\n"
             "constexpr size_t SMEM = 1024 + ST * STAGE + 2 * ST * sizeof(uint64_t);\n"]
    parts += [_wgmma(name, ptx) for name, ptx, _, _ in DTYPES]
    parts.append(r'''
template <int DT>  // 0: bf16, 1: f16
__global__ void __launch_bounds__(384, 1)
gemm16_kernel(int n, int m, int k, float* out, const __grid_constant__ CUtensorMap map_x,
              const __grid_constant__ CUtensorMap map_w) {
#if FL_WGMMA_ENABLED
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + ST * STAGE);
  uint64_t* empty = full + ST;
  const int col_tiles = (m + BN - 1) / BN, m0 = (blockIdx.x / col_tiles) * BM, n0 = (blockIdx.x % col_tiles) * BN;
  const int KT = (k + BK - 1) / BK, wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < ST; ++s) mbar_init(full + s, 1), mbar_init(empty + s, 2);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();
  if (wg == 0) {  // producer: thread 0 issues the copies
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0)
      for (int kt = 0; kt < KT; ++kt) {
        const int s = kt % ST;
        if (kt >= ST) mbar_wait(empty + s, ((kt / ST) - 1) & 1);
        uint8_t* st = smem + s * STAGE;
        mbar_expect_tx(full + s, STAGE);
        tma_load_2d(st, &map_x, full + s, kt * BK, m0);
        tma_load_2d(st + A_BYTES, &map_w, full + s, kt * BK, n0);
      }
  } else {  // consumers: warpgroup 1 rows 0..63 of the tile, 2 rows 64..127
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wg - 1;
    const bool leader = threadIdx.x % 128 == 0;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    for (int kt = 0; kt < KT; ++kt) {
      const int s = kt % ST;
      mbar_wait(full + s, (kt / ST) & 1);
      const uint8_t* a = smem + s * STAGE + cw * 64 * 128;
      const uint8_t* b = smem + s * STAGE + A_BYTES;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {  // 16 elements = 32 bytes along K an instruction
        if constexpr (DT == 0) wgmma_bf16(d, smem_desc_sw128(a + kk * 32), smem_desc_sw128(b + kk * 32), kt + kk > 0);
        else wgmma_f16(d, smem_desc_sw128(a + kk * 32), smem_desc_sw128(b + kk * 32), kt + kk > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the step before is done: its stage goes back
      if (leader && kt > 0) mbar_arrive(empty + (kt - 1) % ST);
    }
    wgmma_wait<0>();
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4, g = lane / 4, t = lane % 4;
    const int r0 = m0 + 64 * cw + 16 * warp + g;
#pragma unroll
    for (int j = 0; j < 32; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = r0 + (q >= 2 ? 8 : 0), c = n0 + 8 * j + 2 * t + (q & 1);
        if (r < n && c < m) out[(size_t)r * m + c] = d[4 * j + q];
      }
  }
#endif
}

static void encode16(CUtensorMap* map, const void* base, int rows, int k, int box_rows, CUtensorMapDataType type) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  if (!encode) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    TORCH_CHECK(fn && q == cudaDriverEntryPointSuccess, "cuTensorMapEncodeTiled is not available");
    encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }
  const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)k * 2};
  const cuuint32_t box[2] = {(cuuint32_t)BK, (cuuint32_t)box_rows}, elem[2] = {1, 1};
  TORCH_CHECK(encode(map, type, 2, const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS, "cuTensorMapEncodeTiled rejected a map");
}

template <int DT>
at::Tensor gemm16(const at::Tensor& x, const at::Tensor& w, at::Tensor out) {
  const auto want = DT == 0 ? at::kBFloat16 : at::kHalf;
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == want && w.scalar_type() == want && x.is_contiguous() &&
              w.is_contiguous() && x.size(1) == w.size(1) && x.size(1) % 8 == 0, "x, weight: contiguous, K % 8 == 0");
  const int n = x.size(0), k = x.size(1), m = w.size(0);
  const auto type = DT == 0 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUtensorMap mx, mw;
  encode16(&mx, x.data_ptr(), n, k, BM, type);
  encode16(&mw, w.data_ptr(), m, k, BN, type);
  auto kernel = gemm16_kernel<DT>;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
  const int tiles = ((n + BM - 1) / BM) * ((m + BN - 1) / BN);
  kernel<<<tiles, 384, SMEM, c10::cuda::getCurrentCUDAStream().stream()>>>(n, m, k, out.data_ptr<float>(), mx, mw);
  C10_CUDA_CHECK(cudaGetLastError());
  return out;
}
}  // namespace proto

at::Tensor gemm_bf16(const at::Tensor& x, const at::Tensor& w, at::Tensor out) { return proto::gemm16<0>(x, w, out); }
at::Tensor gemm_f16(const at::Tensor& x, const at::Tensor& w, at::Tensor out) { return proto::gemm16<1>(x, w, out); }
''')
    return "".join(parts)


DECL = ("at::Tensor gemm_bf16(const at::Tensor& x, const at::Tensor& w, at::Tensor out);\n"
        "at::Tensor gemm_f16(const at::Tensor& x, const at::Tensor& w, at::Tensor out);\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emit", type=Path, help="write the CUDA source here and stop")
    args = parser.parse_args(argv)
    if args.emit:
        args.emit.write_text(source())
        return 0
    import torch
    import torch.nn.functional as F
    from torch.utils.cpp_extension import load_inline

    sys.path.insert(0, str(ROOT))
    from fusedlib.lab.timing import time_cuda
    build = Path(os.environ.get("FUSEDLIB_CACHE", "/tmp")) / "run158"
    build.mkdir(parents=True, exist_ok=True)
    ext = load_inline("run158_gemm16", cpp_sources=DECL, cuda_sources=source(), functions=["gemm_bf16", "gemm_f16"],
                      extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"],
                      extra_include_paths=[str(KERNELS)], build_directory=str(build))
    dev = torch.device("cuda")
    shapes = [(1000, 200, 300), (257, 72, 520), (128, 1024, 512), (1024, 8192, 8192), (16384, 4096, 4096)]
    worst, failed = 0.0, []
    print("dtype shape (N x K -> M) | max error / bound | NaN")
    for name, _, _, tname in DTYPES:
        dtype, fn = getattr(torch, tname), getattr(ext, f"gemm_{name}")
        for n, k, m in shapes:
            g = torch.Generator(device=dev).manual_seed(n + k + m)
            x = (torch.randn(n, k, device=dev, generator=g) + 0.5).to(dtype)  # (offset: no lucky cancellation)
            w = (torch.randn(m, k, device=dev, generator=g) / k ** 0.5).to(dtype)
            out = torch.full((n, m), float("nan"), device=dev)
            z = fn(x, w, out)
            ref = x.double() @ w.double().t()
            bound = 2 * k * 2.0 ** -24 * (x.double().abs() @ w.double().abs().t()) + 1e-30
            ratio = ((z.double() - ref).abs() / bound).max().item()
            nan = bool(torch.isnan(z).any())
            worst = max(worst, ratio)
            if nan or not ratio <= 1:
                failed.append(f"{name} {n}x{k}->{m}")
            print(f"{name:4s} {n}x{k}->{m} | {ratio:.3f} | {nan}")
    print()
    print("dtype shape | prototype ms | cuBLAS 16-bit ms | F.linear fp32 (TF32) ms | prototype TFLOP/s")
    torch.backends.cuda.matmul.allow_tf32 = True
    for name, _, _, tname in DTYPES:
        dtype, fn = getattr(torch, tname), getattr(ext, f"gemm_{name}")
        for n, k, m in ((1024, 8192, 8192), (16384, 4096, 4096), (128, 1024, 512)):
            x, w = torch.randn(n, k, device=dev, dtype=dtype), torch.randn(m, k, device=dev, dtype=dtype)
            out = torch.empty(n, m, device=dev)
            x32, w32 = x.float(), w.float()
            t_p = time_cuda(lambda x: fn(x, w, out), x)[0]
            t_c = time_cuda(lambda x: torch.mm(x, w.t()), x)[0]
            t_f = time_cuda(lambda x: F.linear(x, w32), x32)[0]
            print(f"{name:4s} {n}x{k}->{m} | {t_p:.4f} | {t_c:.4f} | {t_f:.4f} | {2 * n * k * m / t_p / 1e9:.0f}")
    print(f"\nchecks: worst error / bound {worst:.3f}; " + (f"FAILED {failed}" if failed else "all passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
