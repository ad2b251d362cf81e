"""run128: a SIMT mainloop in cuBLAS's configuration (KERNEL below: 128×128 tiles of 128 threads, 8×16
outputs a thread, 4-byte cp.async stages, two blocks an SM, the outer sums of the two-level accumulation
in shared memory) against cuBLAS SGEMM and the engine's SIMT GEMM (the naive stage's fp32 GEMM kernel,
torch.profiler), in one process.

Correctness first (normwise relative error against float64 on randn and offset inputs, odd shapes, an
input not 16-byte aligned, the first-row shift, NaN-poisoned outputs), then time at the KernelBench
shapes (fusedlib.lab.bench.time_round_robin: L2 flush, CUDA events, 50 calls in 10 rounds). Prints a table;
run from the repository root with PYTHONPATH=. and the engine's build cache in $FUSEDLIB_CACHE."""
import statistics
import sys

import torch
from torch.utils.cpp_extension import load_inline

from fusedlib.lab import bench

# name → (template variant, flush K steps (0: ≈ √K products a partial; 1 << 30: one partial), shift)
VARIANTS = {"bk8s3": (0, 0, False), "bk8s4": (1, 0, False), "bk16s2": (2, 0, False), "bk8s3-1lvl": (0, 1 << 30, False),
            "bk8s3-shift": (0, 0, True)}

KERNEL = r"""
// run128: a prototype SIMT (FFMA) mainloop in cuBLAS's configuration, standalone: out(N×M) = X Wᵀ,
// X (N×K) and W (M×K) row-major float32.
//   * 128×128 block tile, 128 threads (4 warps of 64×64), 8×16 outputs a thread as 2×4 quadrants of
//     4×4: per K step of one column a thread reads 24 operands as six LDS.128 for 128 FFMAs;
//   * operands copied global → shared by 4-byte cp.async (transposed to K-major on the way, any
//     alignment, zero-fill past the edges), STAGES stages, one __syncthreads a K step;
//   * two blocks an SM: 128 partial sums in registers; the two-level accumulation keeps the outer sum
//     in shared memory (each thread's 128 floats, float4 columns [e4][tid]): every `flush` K steps the
//     partial is added there and restarts, so rounding grows with flush·BK + K/(flush·BK) additions;
//   * optional first-row shift (train mode): rows ≠ 0 of X minus row 0, applied by each thread to the
//     elements it copied, after its cp.async wait and before the barrier.
#pragma once
#include <cuda_runtime.h>
#include <climits>

namespace proto {

__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool pred) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(pred ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <int BK, int STAGES>
struct Tile {
  static constexpr int BM = 128, BN = 128, THREADS = 128, LD = 128 + 4;
  static constexpr int kStageFloats = 2 * BK * LD + THREADS;  // A, B (K-major), each thread's x0 slot
  static constexpr size_t kSmem = ((size_t)BM * BN + (size_t)STAGES * kStageFloats) * sizeof(float);
};

template <int BK, int STAGES>
__global__ void __launch_bounds__(128, 2)
sgemm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out, int N, int K, int M,
             int flush, bool shift) {
  using T = Tile<BK, STAGES>;
  constexpr int LD = T::LD, BM = T::BM, BN = T::BN, RS = 128 / BK;  // a thread's load rows: rq + q·RS
  extern __shared__ __align__(16) float smem[];
  float* sacc = smem;                    // [32][128] float4: the outer sums
  float* stages = smem + BM * BN;        // [STAGES][A | B | x0]
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wy = warp / 2, wx = warp % 2, ty = lane / 4, tx = lane % 4;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
  const int kq = tid % BK, rq = tid / BK;

  // the rows a thread copies (rq + q·RS, q < BK) that exist
  unsigned amask = 0, bmask = 0;
#pragma unroll
  for (int q = 0; q < BK; ++q) {
    amask |= (m0 + rq + q * RS < N) << q;
    bmask |= (n0 + rq + q * RS < M) << q;
  }
  const float* xa = x + (size_t)(m0 + rq) * K;
  const float* wb = w + (size_t)(n0 + rq) * K;
  const int KT = (K + BK - 1) / BK;

  auto issue = [&](int s, int t) {
    float* as = stages + s * T::kStageFloats;
    float* bs = as + BK * LD;
    const int k = t * BK + kq;
    const bool kin = k < K;
#pragma unroll
    for (int q = 0; q < BK; ++q) {
      const bool in = kin && (amask >> q & 1);  // off: nothing read, zeros written; the address stays valid
      cp_async4(as + kq * LD + rq + q * RS, in ? xa + (size_t)q * RS * K + k : x, in);
    }
#pragma unroll
    for (int q = 0; q < BK; ++q) {
      const bool in = kin && (bmask >> q & 1);
      cp_async4(bs + kq * LD + rq + q * RS, in ? wb + (size_t)q * RS * K + k : w, in);
    }
    if (shift) cp_async4(bs + BK * LD + tid, kin ? x + k : x, kin);
  };

  float part[8][16];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 16; ++j) part[i][j] = 0.f;
  bool flushed = false;
  int since = 0;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) issue(s, s);
    cp_async_commit();
  }
  int s = 0;
  for (int t = 0; t < KT; ++t) {
    cp_async_wait<STAGES - 2>();
    float* as = stages + s * T::kStageFloats;
    const float* bs = as + BK * LD;
    if (shift) {
      const float x0 = bs[BK * LD + tid];
#pragma unroll
      for (int q = 0; q < BK; ++q) {
        const int row = m0 + rq + q * RS;
        if (row > 0) as[kq * LD + rq + q * RS] -= x0;  // rows ≥ N are zeros and never stored
      }
    }
    __syncthreads();
    {
      const int tn = t + STAGES - 1;
      if (tn < KT) issue((s + STAGES - 1) % STAGES, tn);
      cp_async_commit();
    }
    const float* a = as + wy * 64 + 4 * ty;
    const float* b = bs + wx * 64 + 4 * tx;
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float av[8], bv[16];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(a + kk * LD + 32 * q);
        av[4 * q] = v.x, av[4 * q + 1] = v.y, av[4 * q + 2] = v.z, av[4 * q + 3] = v.w;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(b + kk * LD + 16 * q);
        bv[4 * q] = v.x, bv[4 * q + 1] = v.y, bv[4 * q + 2] = v.z, bv[4 * q + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 16; ++j) part[i][j] = fmaf(av[i], bv[j], part[i][j]);
    }
    s = s + 1 == STAGES ? 0 : s + 1;
    if (++since == flush && t + 1 < KT) {
      since = 0;
      float4* acc4 = reinterpret_cast<float4*>(sacc) + tid;
#pragma unroll
      for (int e = 0; e < 32; ++e) {
        const int i = e / 4, j = 4 * (e % 4);
        float4 v = flushed ? acc4[e * 128] : make_float4(0.f, 0.f, 0.f, 0.f);
        v.x += part[i][j], v.y += part[i][j + 1], v.z += part[i][j + 2], v.w += part[i][j + 3];
        acc4[e * 128] = v;
        part[i][j] = part[i][j + 1] = part[i][j + 2] = part[i][j + 3] = 0.f;
      }
      flushed = true;
    }
  }
  cp_async_wait<0>();
  if (flushed) {
    const float4* acc4 = reinterpret_cast<const float4*>(sacc) + tid;
#pragma unroll
    for (int e = 0; e < 32; ++e) {
      const int i = e / 4, j = 4 * (e % 4);
      const float4 v = acc4[e * 128];
      part[i][j] += v.x, part[i][j + 1] += v.y, part[i][j + 2] += v.z, part[i][j + 3] += v.w;
    }
  }
  __syncthreads();  // every thread's outer sums read, every stage consumed: C may overwrite them
  constexpr int LDC = BN + 1;
  float* C = smem;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 16; ++j)
      C[(wy * 64 + 32 * (i / 4) + 4 * ty + i % 4) * LDC + wx * 64 + 16 * (j / 4) + 4 * tx + j % 4] = part[i][j];
  __syncthreads();
  for (int e = tid; e < BM * BN; e += 128) {
    const int r = e / BN, c = e % BN;
    if (m0 + r < N && n0 + c < M) out[(size_t)(m0 + r) * M + n0 + c] = C[r * LDC + c];
  }
}

template <int BK, int STAGES>
cudaError_t launch_sgemm(const float* x, const float* w, float* out, int N, int K, int M, int flush, bool shift,
                         cudaStream_t st) {
  using T = Tile<BK, STAGES>;
  auto kernel = sgemm_kernel<BK, STAGES>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::kSmem);
  if (err != cudaSuccess) return err;
  if (flush <= 0) {  // ≈ √K products a partial
    const double f = __builtin_sqrt((double)K) / BK;
    flush = f < 1.5 ? 1 : (int)(f + 0.5);
  }
  const dim3 grid((M + T::BN - 1) / T::BN, (N + T::BM - 1) / T::BM);
  kernel<<<grid, T::THREADS, T::kSmem, st>>>(x, w, out, N, K, M, flush, shift);
  return cudaGetLastError();
}

template cudaError_t launch_sgemm<8, 3>(const float*, const float*, float*, int, int, int, int, bool, cudaStream_t);
template cudaError_t launch_sgemm<8, 4>(const float*, const float*, float*, int, int, int, int, bool, cudaStream_t);
template cudaError_t launch_sgemm<16, 2>(const float*, const float*, float*, int, int, int, int, bool, cudaStream_t);

}  // namespace proto
"""

binding = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
""" + KERNEL + r"""
torch::Tensor sgemm(torch::Tensor x, torch::Tensor w, int64_t variant, int64_t flush, bool shift, bool poison) {
  TORCH_CHECK(x.is_cuda() && w.is_cuda() && x.scalar_type() == torch::kFloat && w.scalar_type() == torch::kFloat,
              "x, w: float32 CUDA tensors");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
              "x (N, K), w (M, K) contiguous");
  auto out = poison ? torch::full({x.size(0), w.size(0)}, NAN, x.options()) : torch::empty({x.size(0), w.size(0)}, x.options());
  const int N = x.size(0), K = x.size(1), M = w.size(0);
  cudaStream_t st = c10::cuda::getCurrentCUDAStream();
  const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  cudaError_t err;
  switch (variant) {
    case 0: err = proto::launch_sgemm<8, 3>(xp, wp, op, N, K, M, flush, shift, st); break;
    case 1: err = proto::launch_sgemm<8, 4>(xp, wp, op, N, K, M, flush, shift, st); break;
    case 2: err = proto::launch_sgemm<16, 2>(xp, wp, op, N, K, M, flush, shift, st); break;
    default: TORCH_CHECK(false, "variant: 0..2");
  }
  TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
  return out;
}
"""
ext = load_inline("run128_simt_proto", cpp_sources="torch::Tensor sgemm(torch::Tensor x, torch::Tensor w, int64_t variant, int64_t flush, bool shift, bool poison);",
                  cuda_sources=binding, functions=["sgemm"], extra_cuda_cflags=["-O3", "-Xptxas=-v", "-std=c++17"],
                  verbose=False)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def inputs(n, k, m, kind, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    w = torch.randn(m, k, generator=g) / k ** 0.5
    if kind == "offset":
        x = torch.randn(1, k, generator=g, dtype=torch.float64) + 1e-3 * torch.randn(n, k, generator=g, dtype=torch.float64)
        x = x.float()
    else:
        x = torch.randn(n, k, generator=g)
    return x.to(dev), w.to(dev)


def shifted(x):
    xs = x.double().clone()
    xs[1:] -= xs[0]
    return xs


print("== correctness (normwise relative error against float64; cuBLAS fp32 beside)")
bad = 0
print("shape kind cuBLAS " + " ".join(VARIANTS))
for shape in [(7, 33, 65), (257, 1000, 999), (1000, 999, 1001), (129, 64, 130), (300, 264, 130), (1024, 8192, 8192)]:
    for kind in ("randn", "offset"):
        x, w = inputs(*shape, kind)
        errs = []
        for name, (v, f, sh) in VARIANTS.items():
            xr = shifted(x) if sh else x.double()
            want = xr @ w.double().t()
            ref = rel((xr.float() @ w.t()), want)
            y = ext.sgemm(x, w, v, f, sh, True)
            e = rel(y, want) if torch.isfinite(y).all() else float("nan")
            errs.append(e)
            bad += f < 1 << 30 and not (e <= max(2 * ref, 1e-6))
        ref = rel(x @ w.t(), x.double() @ w.double().t())
        print(f"{shape[0]}x{shape[1]}->{shape[2]:<6} {kind:6s} cuBLAS {ref:.2e}  ours " + " ".join(f"{e:.2e}" for e in errs))
# an input not 16-B aligned (4-byte cp.async takes any float pointer)
x, w = inputs(256, 515, 260, "randn")
xs = torch.empty(256 * 515 + 1, device=dev)[1:].view(256, 515).copy_(x)
for v in range(3):
    e = rel(ext.sgemm(xs, w, v, 0, False, True), x.double() @ w.double().t())
    print(f"offset pointer, variant {v}: {e:.2e}")
    bad += not (e < 1e-6)
print(f"correctness: {bad} failures")


def engine_simt_ms(n, k, m):
    """The engine's SIMT GEMM kernel time (the naive stage's fp32 GEMM, eval), torch.profiler."""
    try:
        import fusedlib
        from fusedlib.reference import make_reference
        from torch.profiler import ProfilerActivity, profile
        mod = fusedlib.from_reference(make_reference("84", k, m, seed=0).to(dev).eval(), stage="naive", precision="fp32")
        x = torch.randn(n, k, device=dev)
        with torch.no_grad():
            for _ in range(3):
                mod(x)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    mod(x)
                torch.cuda.synchronize()
        ts = [e.device_time for e in prof.events() if "simt_gemm_kernel" in e.name]
        return statistics.median(ts) / 1e3 if ts else float("nan")
    except Exception as exc:  # the engine is a comparison only
        print("engine:", exc)
        return float("nan")


print("\n== time (ms, median of 50 in 10 rounds, L2 flushed); TFLOP/s in brackets")
rows = []
for n, k, m in [(1024, 8192, 8192), (16384, 4096, 4096), (4096, 4096, 4096)]:
    x, w = inputs(n, k, m, "randn")
    flops = 2 * n * k * m
    fns = {"cublas": (lambda x: x @ w.t(), "fp32")}
    fns.update({name: (lambda x, v=v, f=f, sh=sh: ext.sgemm(x, w, v, f, sh, False), None)
                for name, (v, f, sh) in VARIANTS.items()})
    t = bench.time_round_robin(fns, x, iters=50, rounds=10)
    cub, ours = t["cublas"][0], [t[name][0] for name in VARIANTS]
    eng = engine_simt_ms(n, k, m)
    rows.append((f"{n}x{k}->{m}", cub, eng, ours))
    print(f"{n}x{k}->{m}: cuBLAS {cub:.3f} ({flops / cub / 1e9:.1f})  engine {eng:.3f}  " +
          "  ".join(f"{name} {t:.3f} ({flops / t / 1e9:.1f})" for name, t in zip(VARIANTS, ours)), flush=True)

print("\n| shape | cuBLAS | engine today | " + " | ".join(VARIANTS) + " | best / cuBLAS |")
print("|---|---|---|" + "---|" * len(VARIANTS) + "---|")
for shape, cub, eng, ours in rows:
    print(f"| {shape} | {cub:.3f} | {eng:.3f} | " + " | ".join(f"{t:.3f} ({cub / t:.2f})" for t in ours) +
          f" | {min(ours) / cub:.2f} |")
sys.exit(1 if bad else 0)
