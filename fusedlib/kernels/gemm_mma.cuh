// mma.sync mainloop (sm_80 and later: A100, RTX 30/40/50, L4, H100, B200): out(N×M) = X Wᵀ
// on TF32 tensor cores, mma.sync.m16n8k8, fed by a 4-stage cp.async pipeline. 128×128 block
// tile, K step 16, 8 warps as 2 (rows) × 4 (columns), 64×32 per warp; any K (16-byte copies
// when K % 4 == 0 and the operands are aligned, 4-byte copies otherwise). 82 KB of shared
// memory, within every sm_80+ GPU's limit.
// tf32: the fp32 words go to the tensor cores, which read their top 19 bits (truncation, as
// cuBLAS does). 3xtf32 (SPLIT): a = big + small, both TF32 (cvt.rna); acc += small·big +
// big·small + big·big (CUTLASS example 27), and since the tensor cores' fp32 accumulation
// truncates, each K step's products are accumulated from zero and then added into the fp32
// accumulator with a round-to-nearest FADD (promotion every 16 products): fp32-class at any K.
// In train mode at 3xTF32 the A fragments are X's rows minus x₀, p.x0 (the first-row shift,
// common.cuh: every row but X's row 0, or every row with an external x₀), subtracted before the
// split. The finished accumulators go through the shared-memory C tile to the epilogue Epi.
// grid = (ceil(M/128), ceil(N/128)) (past kMaxGridY row tiles, several launches from row tile
// tile0: common.cuh). Without sm_80 the kernel compiles to an empty body (the host never
// selects this path there: fusedlib/engine.py).
#pragma once
#include "epilogue.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define FL_MMA_ENABLED 1
#else
#define FL_MMA_ENABLED 0
#endif

namespace fl {

constexpr int kMmaBM = 128, kMmaBN = 128, kMmaBK = 16, kMmaStages = 4, kMmaThreads = 256;
constexpr int kMmaLds = kMmaBK + 4;  // padded row stride (words): fragment loads hit 32 distinct banks
// A stage: the X tile, the W tile, then one row of x₀ (the first-row shift), kMmaLds apart.
constexpr int kMmaStageWords = (kMmaBM + kMmaBN + 1) * kMmaLds;
constexpr size_t kMmaLoopSmem = (size_t)kMmaStages * kMmaStageWords * sizeof(float);
constexpr size_t kMmaEpiSmem = epilogue_smem_bytes<kMmaBM, kMmaBN, kMmaThreads>();
constexpr size_t kMmaSmem = kMmaLoopSmem > kMmaEpiSmem ? kMmaLoopSmem : kMmaEpiSmem;

// D += A·B, A 16×8 (row), B 8×8 (col), TF32 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if FL_MMA_ENABLED
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// Asynchronous global→shared copies; src_size 0 fills zeros (rows or columns past the edge).
__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool valid) {
#if FL_MMA_ENABLED
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
#if FL_MMA_ENABLED
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 4 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if FL_MMA_ENABLED
  asm volatile("cp.async.commit_group;\n");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if FL_MMA_ENABLED
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// One K-slice (kMmaBK columns) of the X rows m0… and W rows n0… into a pipeline stage (with
// the first-row shift, x₀ as well, from p.x0, after the W tile). VEC: 16-byte copies (K % 4 == 0
// and aligned pointers), else 4-byte copies.
template <bool VEC>
__device__ __forceinline__ void mma_load_stage(const Problem& p, const float* x, const float* w, float* As,
                                               float* Bs, int m0, int n0, int k0) {
  const int tid = threadIdx.x;
  if (p.z0 && tid < (VEC ? kMmaBK / 4 : kMmaBK)) {
    const int c = VEC ? 4 * tid : tid;
    float* dst = Bs + kMmaBN * kMmaLds + c;
    if (VEC) cp_async16(dst, k0 + c < p.k ? p.x0 + k0 + c : p.x0, k0 + c < p.k);
    else cp_async4(dst, k0 + c < p.k ? p.x0 + k0 + c : p.x0, k0 + c < p.k);
  }
  if (VEC) {
#pragma unroll
    for (int i = 0; i < (kMmaBM * kMmaBK / 4) / kMmaThreads; ++i) {
      const int ch = tid + i * kMmaThreads, r = ch / (kMmaBK / 4), c = (ch % (kMmaBK / 4)) * 4;
      const bool in_k = k0 + c < p.k;
      const bool va = in_k && m0 + r < p.n, vb = in_k && n0 + r < p.m;
      cp_async16(As + r * kMmaLds + c, va ? x + (size_t)(m0 + r) * p.k + k0 + c : x, va);
      cp_async16(Bs + r * kMmaLds + c, vb ? w + (size_t)(n0 + r) * p.k + k0 + c : w, vb);
    }
  } else {
#pragma unroll 4
    for (int i = 0; i < (kMmaBM * kMmaBK) / kMmaThreads; ++i) {
      const int e = tid + i * kMmaThreads, r = e / kMmaBK, c = e % kMmaBK;
      const bool in_k = k0 + c < p.k;
      const bool va = in_k && m0 + r < p.n, vb = in_k && n0 + r < p.m;
      cp_async4(As + r * kMmaLds + c, va ? x + (size_t)(m0 + r) * p.k + k0 + c : x, va);
      cp_async4(Bs + r * kMmaLds + c, vb ? w + (size_t)(n0 + r) * p.k + k0 + c : w, vb);
    }
  }
}

template <bool VEC, bool SPLIT, class Epi>
__global__ void __launch_bounds__(kMmaThreads, 1)
mma_gemm_kernel(const Problem p, const float* __restrict__ x, const float* __restrict__ w, float* out, int tile0) {
#if FL_MMA_ENABLED
  extern __shared__ __align__(16) float smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * kMmaBN, m0 = (tile0 + (int)blockIdx.y) * kMmaBM;
  const int KT = ceil_div(p.k, kMmaBK);
  constexpr int kStageWords = kMmaStageWords;
  const bool keep0 = shift_keeps_row0(p);  // the first-row shift leaves X's row 0 as it is (not: external x₀)
  float acc[4][4][4], part[SPLIT ? 4 : 1][SPLIT ? 4 : 1][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

#pragma unroll
  for (int s = 0; s < kMmaStages - 1; ++s) {
    if (s < KT)
      mma_load_stage<VEC>(p, x, w, smem + s * kStageWords, smem + s * kStageWords + kMmaBM * kMmaLds, m0, n0,
                          s * kMmaBK);
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kMmaStages - 2>();
    __syncthreads();  // stage kt landed for all threads; stage kt−1 is free to refill
    const int nk = kt + kMmaStages - 1;
    if (nk < KT) {
      float* st = smem + (nk % kMmaStages) * kStageWords;
      mma_load_stage<VEC>(p, x, w, st, st + kMmaBM * kMmaLds, m0, n0, nk * kMmaBK);
    }
    cp_async_commit();
    const float* As = smem + (kt % kMmaStages) * kStageWords;
    const float* Bs = As + kMmaBM * kMmaLds;
    if (SPLIT) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) part[SPLIT ? i : 0][SPLIT ? j : 0][q] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < kMmaBK; kk += 8) {
      uint32_t ab[4][4], bb[4][2], as[4][4], bs[4][2];
      // the first-row shift: x₀ at this thread's two columns (zeros past K), else 0
      const float* X0s = Bs + kMmaBN * kMmaLds;
      const float x0a = p.z0 ? X0s[kk + t] : 0.f, x0b = p.z0 ? X0s[kk + t + 4] : 0.f;
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        const int r = wm * 64 + mi * 16 + g;
        const bool first = m0 + r == 0 && keep0;  // row 0 stays x₀ (rows r + 8 never are row 0)
        const float v[4] = {As[r * kMmaLds + kk + t] - (first ? 0.f : x0a), As[(r + 8) * kMmaLds + kk + t] - x0a,
                            As[r * kMmaLds + kk + t + 4] - (first ? 0.f : x0b),
                            As[(r + 8) * kMmaLds + kk + t + 4] - x0b};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          ab[mi][q] = SPLIT ? to_tf32(v[q]) : __float_as_uint(v[q]);
          if (SPLIT) as[mi][q] = to_tf32(v[q] - __uint_as_float(ab[mi][q]));
        }
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int c = wn * 32 + ni * 8 + g;
        const float v[2] = {Bs[c * kMmaLds + kk + t], Bs[c * kMmaLds + kk + t + 4]};
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          bb[ni][q] = SPLIT ? to_tf32(v[q]) : __float_as_uint(v[q]);
          if (SPLIT) bs[ni][q] = to_tf32(v[q] - __uint_as_float(bb[ni][q]));
        }
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          if (SPLIT) {
            float(&d)[4] = part[SPLIT ? mi : 0][SPLIT ? ni : 0];
            mma_tf32(d, as[mi], bb[ni]);
            mma_tf32(d, ab[mi], bs[ni]);
            mma_tf32(d, ab[mi], bb[ni]);
          } else {
            mma_tf32(acc[mi][ni], ab[mi], bb[ni]);
          }
        }
    }
    if (SPLIT) {  // promotion: this K step's products join the accumulator, rounded to nearest
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[i][j][q] += part[SPLIT ? i : 0][SPLIT ? j : 0][q];
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // pipeline buffers become the epilogue's C tile
  float* C = smem;
  constexpr int LDC = kMmaBN + 1;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int r = wm * 64 + mi * 16 + g, c = wn * 32 + ni * 8 + 2 * t;
      C[r * LDC + c] = take_shift_row(p, acc[mi][ni][0], m0 + r, n0 + c);
      C[r * LDC + c + 1] = take_shift_row(p, acc[mi][ni][1], m0 + r, n0 + c + 1);
      C[(r + 8) * LDC + c] = acc[mi][ni][2];
      C[(r + 8) * LDC + c + 1] = acc[mi][ni][3];
    }
  __syncthreads();
  Epi::template apply<kMmaBM, kMmaBN, kMmaThreads>(p, C, smem + kMmaBM * LDC, out, m0, n0, tid);
#endif
}

template <class Epi>
const char* launch_mma_gemm(const Problem& p, const float* x, const float* w, float* out, cudaStream_t st) {
  const bool vec = p.k % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)w % 16 == 0 &&
                   (!p.z0 || (uintptr_t)p.x0 % 16 == 0);  // (x₀: X's row 0, or an external row)
  const bool split = p.precision == TF32X3;
  auto kernel = vec ? (split ? mma_gemm_kernel<true, true, Epi> : mma_gemm_kernel<true, false, Epi>)
                    : (split ? mma_gemm_kernel<false, true, Epi> : mma_gemm_kernel<false, false, Epi>);
  FL_OPT_IN_SMEM(kernel, kMmaSmem);
  const int rows = ceil_div(p.n, kMmaBM);
  for (int t0 = 0; t0 < rows; t0 += kMaxGridY) {
    const dim3 grid(ceil_div(p.m, kMmaBN), std::min(rows - t0, kMaxGridY));
    kernel<<<grid, kMmaThreads, kMmaSmem, st>>>(p, x, w, out, t0);
    FL_CHECK_LAUNCH();
  }
  return nullptr;
}

}  // namespace fl
