// Stage 4, fused: one GEMM whose epilogue stores Z' = XWᵀ and the column partials of its
// 128-row tile; the last block of each column block (tile counter + fence) merges all
// row tiles in order into a, c and the running buffers. Then one row pass reads Z' once:
// V = a∘Z' + c and (84) the softmax from online (max, Σexp) partials, writing Y once.
// GEMM: tf32 / 3xtf32 on tensor cores (mma.sync m16n8k8, cp.async 3-stage pipeline) or
// fp32 on FFMA (the SIMT tile of common.cuh). Eval mode: W', b' hold BN and the scale
// (folded by the caller), GEMM + bias, then the softmax (84).
// Specification: algebra.stage_forward("fused"), TILE_ROWS["fused"] = 128.
#include "common.cuh"

namespace fl {

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 3, kThreads = 256;
constexpr int kLds = kBK + 4;  // padded row stride (words): fragment loads hit 32 distinct banks
constexpr size_t kTcLoopSmem = (size_t)kStages * (kBM + kBN) * kLds * sizeof(float);
constexpr size_t kTcEpiSmem = ((size_t)kBM * (kBN + 1) + kThreads + 32) * sizeof(float);
constexpr size_t kTcSmem = kTcLoopSmem > kTcEpiSmem ? kTcLoopSmem : kTcEpiSmem;

__device__ __forceinline__ uint32_t to_tf32(float f) {  // round to nearest, ties away (cvt.rna)
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return r;
}

// D += A·B, A 16×8 (row), B 8×8 (col), TF32 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Asynchronous global→shared copies; src_size 0 fills zeros (rows or columns past the edge).
__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool valid) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// One K-slice (kBK columns) of the X rows m0… and W rows n0… into a pipeline stage.
// VEC: 16-byte copies (K % 4 == 0 and aligned pointers), else 4-byte copies.
template <bool VEC>
__device__ __forceinline__ void load_stage(const Problem& p, float* As, float* Bs, int m0, int n0, int k0) {
  const int tid = threadIdx.x;
  if (VEC) {
#pragma unroll
    for (int i = 0; i < (kBM * kBK / 4) / kThreads; ++i) {
      const int ch = tid + i * kThreads, r = ch / (kBK / 4), c = (ch % (kBK / 4)) * 4;
      const bool in_k = k0 + c < p.k;
      const bool va = in_k && m0 + r < p.n, vb = in_k && n0 + r < p.m;
      cp_async16(As + r * kLds + c, va ? p.x + (size_t)(m0 + r) * p.k + k0 + c : p.x, va);
      cp_async16(Bs + r * kLds + c, vb ? p.w + (size_t)(n0 + r) * p.k + k0 + c : p.w, vb);
    }
  } else {
#pragma unroll 4
    for (int i = 0; i < (kBM * kBK) / kThreads; ++i) {
      const int e = tid + i * kThreads, r = e / kBK, c = e % kBK;
      const bool in_k = k0 + c < p.k;
      const bool va = in_k && m0 + r < p.n, vb = in_k && n0 + r < p.m;
      cp_async4(As + r * kLds + c, va ? p.x + (size_t)(m0 + r) * p.k + k0 + c : p.x, va);
      cp_async4(Bs + r * kLds + c, vb ? p.w + (size_t)(n0 + r) * p.k + k0 + c : p.w, vb);
    }
  }
}

// Tensor-core GEMM, 128×128 block tile, 8 warps as 2 (rows) × 4 (columns), 64×32 per warp.
// SPLIT (3xTF32): a = big + small, both TF32; acc += small·big + big·small + big·big
// (CUTLASS example 27), fp32-class accuracy on TF32 units.
template <bool VEC, bool SPLIT, int EPI>
__global__ void __launch_bounds__(kThreads, 1) fused_tc_gemm_kernel(const Problem p, float* out) {
  extern __shared__ __align__(16) float smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * kBN, m0 = blockIdx.y * kBM;
  const int KT = ceil_div(p.k, kBK);
  constexpr int kStageWords = (kBM + kBN) * kLds;
  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < KT) load_stage<VEC>(p, smem + s * kStageWords, smem + s * kStageWords + kBM * kLds, m0, n0, s * kBK);
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt landed for all threads; stage kt−1 is free to refill
    const int nk = kt + kStages - 1;
    if (nk < KT) {
      float* st = smem + (nk % kStages) * kStageWords;
      load_stage<VEC>(p, st, st + kBM * kLds, m0, n0, nk * kBK);
    }
    cp_async_commit();
    const float* As = smem + (kt % kStages) * kStageWords;
    const float* Bs = As + kBM * kLds;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 8) {
      uint32_t ab[4][4], bb[4][2], as[4][4], bs[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        const int r = wm * 64 + mi * 16 + g;
        const float v[4] = {As[r * kLds + kk + t], As[(r + 8) * kLds + kk + t], As[r * kLds + kk + t + 4],
                            As[(r + 8) * kLds + kk + t + 4]};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          ab[mi][q] = to_tf32(v[q]);
          if (SPLIT) as[mi][q] = to_tf32(v[q] - __uint_as_float(ab[mi][q]));
        }
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int c = wn * 32 + ni * 8 + g;
        const float v[2] = {Bs[c * kLds + kk + t], Bs[c * kLds + kk + t + 4]};
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          bb[ni][q] = to_tf32(v[q]);
          if (SPLIT) bs[ni][q] = to_tf32(v[q] - __uint_as_float(bb[ni][q]));
        }
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          if (SPLIT) {
            mma_tf32(acc[mi][ni], as[mi], bb[ni]);
            mma_tf32(acc[mi][ni], ab[mi], bs[ni]);
          }
          mma_tf32(acc[mi][ni], ab[mi], bb[ni]);
        }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // pipeline buffers become the epilogue's C tile
  float* C = smem;
  constexpr int LDC = kBN + 1;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int r = wm * 64 + mi * 16 + g, c = wn * 32 + ni * 8 + 2 * t;
      C[r * LDC + c] = acc[mi][ni][0];
      C[r * LDC + c + 1] = acc[mi][ni][1];
      C[(r + 8) * LDC + c] = acc[mi][ni][2];
      C[(r + 8) * LDC + c + 1] = acc[mi][ni][3];
    }
  __syncthreads();
  tile_epilogue<kBM, kBN, kThreads, EPI>(p, C, smem + kBM * LDC, out, p.bias, m0, n0);
}

template <bool VEC, bool SPLIT, int EPI>
const char* launch_tc(const Problem& p, float* out, cudaStream_t st) {
  auto kernel = fused_tc_gemm_kernel<VEC, SPLIT, EPI>;
  FL_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kTcSmem));
  kernel<<<dim3(ceil_div(p.m, kBN), ceil_div(p.n, kBM)), kThreads, kTcSmem, st>>>(p, out);
  FL_CHECK_LAUNCH();
  return nullptr;
}

template <int EPI>
const char* launch_fused_gemm(const Problem& p, float* out, cudaStream_t st) {
  if (p.precision == FP32) return launch_simt_gemm<kBM, kBN, 8, 8, 8, EPI>(p, p.x, p.w, out, st);
  const bool vec = p.k % 4 == 0 && (uintptr_t)p.x % 16 == 0 && (uintptr_t)p.w % 16 == 0;
  const bool split = p.precision == TF32X3;
  if (vec) return split ? launch_tc<true, true, EPI>(p, out, st) : launch_tc<true, false, EPI>(p, out, st);
  return split ? launch_tc<false, true, EPI>(p, out, st) : launch_tc<false, false, EPI>(p, out, st);
}

// Online softmax merge (Milakov & Gimelshein 2018): (m, l) ⊕ (m', l') = (M, l·e^{m−M} + l'·e^{m'−M}).
__device__ __forceinline__ void softmax_merge(float& m, float& l, float m2, float l2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  l = l * expf(m - mx) + l2 * expf(m2 - mx);
  m = mx;
}

// One block a row: V = a∘Z' + c (coef == nullptr: V = Z') read once into shared memory
// while each thread keeps online (max, Σexp) partials over its columns; the partials merge
// across the block in a fixed order; then Y = exp(V − M)/L is written once.
template <bool ROW_IN_SMEM>
__global__ void online_softmax_rows_kernel(const float* __restrict__ z, const float* __restrict__ coef,
                                           float* __restrict__ y, int m) {
  extern __shared__ float row[];
  __shared__ float red_m[32], red_l[32];
  const float* zr = z + (size_t)blockIdx.x * m;
  float* yr = y + (size_t)blockIdx.x * m;
  float mx = -INFINITY, l = 0.f;
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    const float v = coef ? coef[j] * zr[j] + coef[m + j] : zr[j];
    if (ROW_IN_SMEM) row[j] = v;
    softmax_merge(mx, l, v, 1.f);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, mx, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
    softmax_merge(mx, l, m2, l2);
  }
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) { red_m[wid] = mx; red_l[wid] = l; }
  __syncthreads();
  mx = red_m[0];
  l = red_l[0];
  for (int q = 1; q < nw; ++q) softmax_merge(mx, l, red_m[q], red_l[q]);
  const float inv = 1.f / l;
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    const float v = ROW_IN_SMEM ? row[j] : (coef ? coef[j] * zr[j] + coef[m + j] : zr[j]);
    yr[j] = expf(v - mx) * inv;
  }
}

inline const char* launch_online_softmax_rows(const float* z, const float* coef, float* y, int n, int m,
                                              cudaStream_t st) {
  const size_t bytes = (size_t)m * sizeof(float);
  if (bytes <= kMaxRowSmemBytes) {
    FL_RETURN_IF_ERROR(cudaFuncSetAttribute(online_softmax_rows_kernel<true>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    online_softmax_rows_kernel<true><<<n, 512, bytes, st>>>(z, coef, y, m);
  } else {
    online_softmax_rows_kernel<false><<<n, 512, 0, st>>>(z, coef, y, m);
  }
  FL_CHECK_LAUNCH();
  return nullptr;
}

}  // namespace fl

extern "C" const char* fl_fused_forward(const fl::Problem* pp, cudaStream_t st) {
  using namespace fl;
  const Problem& p = *pp;
  const char* err;
  if (!p.training) {  // W', b' already hold BN and the scale
    if ((err = launch_fused_gemm<EPI_BIAS>(p, p.kind == 84 ? p.z : p.y, st))) return err;
    return p.kind == 84 ? launch_online_softmax_rows(p.z, nullptr, p.y, p.n, p.m, st) : nullptr;
  }
  if ((err = launch_fused_gemm<EPI_STATS_LAST>(p, p.z, st))) return err;  // Z', partials, a, c
  return p.kind == 84 ? launch_online_softmax_rows(p.z, p.coef, p.y, p.n, p.m, st)
                      : launch_affine(p.z, p.coef, p.y, p.n, p.m, st);
}
