// mma.sync mainloop (sm_80 and later: A100, RTX 30/40/50, L4, H100, B200): out(N×M) = X Wᵀ
// on TF32 tensor cores, mma.sync.m16n8k8, fed by a 4-stage cp.async pipeline. 128×128 block
// tile, a stage 64 bytes of each row (K step 16 fp32 words), 8 warps as 2 (rows) × 4 (columns),
// 64×32 per warp; any K (16-byte copies when K % 4 == 0 and the operands are aligned, 4-byte
// copies otherwise). 82 KB of shared memory, within every sm_80+ GPU's limit.
// bf16 / fp16 operands (OP, Problem::operand; docs/design.md §15): the same kernel on 16-bit
// elements, mma.sync.m16n8k16 (.f32.bf16.bf16 / .f32.f16.f16: exact products, fp32 accumulators),
// a stage the same 64 bytes of a row (K step 32 elements, two k16 steps); K % 8 == 0 and 16-byte
// aligned operands (16-byte copies only), at precision TF32 without the first-row shift. A 32-bit
// word holds two K-consecutive elements, which is what each register of the m16n8k16 fragments
// holds, and those registers sit at the very word positions of the m16n8k8 TF32 fragments (the
// fragment loads below): the two paths read the same shared-memory words and differ only in the
// instruction; the accumulator layout (and so everything after the mainloop) is the same.
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
#include <type_traits>

#include "epilogue.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define FL_MMA_ENABLED 1
#else
#define FL_MMA_ENABLED 0
#endif

namespace fl {

// kMmaBK: 32-bit words of a row a stage (16 fp32, or 32 bf16 / fp16 elements: mma_step_k).
constexpr int kMmaBM = 128, kMmaBN = 128, kMmaBK = 16, kMmaStages = 4, kMmaThreads = 256;
// Padded row stride (words): 16 words of data, 4 of padding. A warp's fragment load (TF32 and
// 16-bit operands alike: the fragments at mma_tf32) reads word kk + t (or kk + t + 4) of rows
// base + g, g = lane / 4, t = lane % 4, base a multiple of 8 rows in the stage's X or W tile (8 rows
// = 160 words ≡ 0 mod 32 banks; the W tile 128 rows on): bank (20g + t + const) mod 32, where
// 20g mod 32 = 0, 20, 8, 28, 16, 4, 24, 12 are the 8 multiples of 4 and t ∈ 0…3 fills in between:
// 32 distinct banks, conflict-free.
constexpr int kMmaLds = kMmaBK + 4;
// A stage: the X tile, the W tile, then one row of x₀ (the first-row shift), kMmaLds apart.
constexpr int kMmaStageWords = (kMmaBM + kMmaBN + 1) * kMmaLds;
constexpr size_t kMmaLoopSmem = (size_t)kMmaStages * kMmaStageWords * sizeof(float);
constexpr size_t kMmaEpiSmem = epilogue_smem_bytes<kMmaBM, kMmaBN, kMmaThreads>();
constexpr size_t kMmaSmem = kMmaLoopSmem > kMmaEpiSmem ? kMmaLoopSmem : kMmaEpiSmem;
// K elements a stage: kMmaBK words, of one fp32 or two bf16 / fp16 elements each.
__host__ __device__ constexpr int mma_step_k(int operand) { return operand == OPERAND_FP32 ? kMmaBK : 2 * kMmaBK; }

// D += A·B, fp32 accumulators (PTX ISA, matrix fragments for mma.m16n8k8 and mma.m16n8k16):
//   mma_tf32           m16n8k8: A 16×8 (row), B 8×8 (col), TF32 (the top 19 bits of fp32 words)
//   mma_bf16, mma_f16  m16n8k16: A 16×16 (row), B 16×8 (col), bf16 or fp16, two K-consecutive
//                      elements a 32-bit register (the lower K in the low half)
// With g = lane / 4, t = lane % 4, each register is one 32-bit word of a K-major row (X's, W's):
//   k8   A: a0 (row g, k t), a1 (row g + 8, k t), a2 (g, t + 4), a3 (g + 8, t + 4);
//        B: b0 (k t, col g), b1 (k t + 4, col g)
//   k16  A: a0 (row g, k 2t…2t+1), a1 (row g + 8, k 2t…2t+1), a2 (g, 2t+8…2t+9), a3 (g + 8, 2t+8…2t+9);
//        B: b0 (k 2t…2t+1, col g), b1 (k 2t+8…2t+9, col g)
// that is, either way, words t and t + 4 of rows g and g + 8 (A) and of row g (B, W's row = B's col).
// D, both: d0, d1 (row g, cols 2t, 2t + 1), d2, d3 (row g + 8, the same cols).
#if FL_MMA_ENABLED
#define FL_MMA_M16N8(name, instr)                                                                              \
  __device__ __forceinline__ void name(float(&d)[4], const uint32_t(&a)[4], const uint32_t(&b)[2]) {           \
    asm volatile(instr " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                               \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                            \
  }
#else
#define FL_MMA_M16N8(name, instr) \
  __device__ __forceinline__ void name(float(&)[4], const uint32_t(&)[4], const uint32_t(&)[2]) {}
#endif
FL_MMA_M16N8(mma_tf32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
FL_MMA_M16N8(mma_bf16, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
FL_MMA_M16N8(mma_f16, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
#undef FL_MMA_M16N8

// One fragment step (8 words of K) of the operand type OP.
template <int OP>
__device__ __forceinline__ void mma_step(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (OP == OPERAND_BF16) mma_bf16(d, a, b);
  else if constexpr (OP == OPERAND_FP16) mma_f16(d, a, b);
  else mma_tf32(d, a, b);
}

// Asynchronous global→shared copies; src_size 0 fills zeros (rows or columns past the edge).
__device__ __forceinline__ void cp_async16(float* dst, const void* src, bool valid) {
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

// One K-slice (kMmaBK words a row: mma_step_k(OP) elements from element k0) of the X rows m0…
// and W rows n0… into a pipeline stage (with the first-row shift, x₀ as well, from p.x0, after the
// W tile). VEC: 16-byte copies (K % 4 == 0 and aligned pointers; 16-bit operands: K % 8 == 0, so
// that a copy's 8 elements are all in K or all past it, zero-filled), else 4-byte copies (fp32).
template <bool VEC, int OP>
__device__ __forceinline__ void mma_load_stage(const Problem& p, const float* x, const float* w, float* As,
                                               float* Bs, int m0, int n0, int k0) {
  static_assert(OP == OPERAND_FP32 || VEC, "bf16/fp16 operands: 16-byte copies only");
  using Elem = std::conditional_t<OP == OPERAND_FP32, float, uint16_t>;  // X's and W's elements (raw bits)
  constexpr int E = 4 / sizeof(Elem);                                     // elements a shared-memory word
  const Elem *xe = reinterpret_cast<const Elem*>(x), *we = reinterpret_cast<const Elem*>(w);
  const int tid = threadIdx.x;
  if constexpr (OP == OPERAND_FP32) {  // (16-bit operands have no first-row shift)
    if (p.z0 && tid < (VEC ? kMmaBK / 4 : kMmaBK)) {
      const int c = VEC ? 4 * tid : tid;
      float* dst = Bs + kMmaBN * kMmaLds + c;
      if (VEC) cp_async16(dst, k0 + c < p.k ? p.x0 + k0 + c : p.x0, k0 + c < p.k);
      else cp_async4(dst, k0 + c < p.k ? p.x0 + k0 + c : p.x0, k0 + c < p.k);
    }
  }
  if constexpr (VEC) {
#pragma unroll
    for (int i = 0; i < (kMmaBM * kMmaBK / 4) / kMmaThreads; ++i) {
      // 16 bytes at word c of row r: elements k0 + c·E … of the row
      const int ch = tid + i * kMmaThreads, r = ch / (kMmaBK / 4), c = (ch % (kMmaBK / 4)) * 4;
      const bool in_k = k0 + c * E < p.k;
      const bool va = in_k && m0 + r < p.n, vb = in_k && n0 + r < p.m;
      cp_async16(As + r * kMmaLds + c, va ? xe + (size_t)(m0 + r) * p.k + k0 + c * E : xe, va);
      cp_async16(Bs + r * kMmaLds + c, vb ? we + (size_t)(n0 + r) * p.k + k0 + c * E : we, vb);
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

// OP: the operands' element type (Operand); 16-bit operands run with VEC and without SPLIT.
template <bool VEC, bool SPLIT, class Epi, int OP = OPERAND_FP32>
__global__ void __launch_bounds__(kMmaThreads, 1)
mma_gemm_kernel(const Problem p, const float* __restrict__ x, const float* __restrict__ w, float* out, int tile0) {
  static_assert(OP == OPERAND_FP32 || (VEC && !SPLIT), "bf16/fp16 operands: 16-byte copies, no 3xTF32");
#if FL_MMA_ENABLED
  extern __shared__ __align__(16) float smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * kMmaBN, m0 = (tile0 + (int)blockIdx.y) * kMmaBM;
  constexpr int BK = mma_step_k(OP);  // K elements a stage
  const int KT = ceil_div(p.k, BK);
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
      mma_load_stage<VEC, OP>(p, x, w, smem + s * kStageWords, smem + s * kStageWords + kMmaBM * kMmaLds, m0, n0,
                              s * BK);
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kMmaStages - 2>();
    __syncthreads();  // stage kt landed for all threads; stage kt−1 is free to refill
    const int nk = kt + kMmaStages - 1;
    if (nk < KT) {
      float* st = smem + (nk % kMmaStages) * kStageWords;
      mma_load_stage<VEC, OP>(p, x, w, st, st + kMmaBM * kMmaLds, m0, n0, nk * BK);
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
    for (int kk = 0; kk < kMmaBK; kk += 8) {  // 8 words: a k8 (TF32) or k16 (bf16 / fp16) step
      uint32_t ab[4][4], bb[4][2], as[4][4], bs[4][2];
      if constexpr (OP == OPERAND_FP32) {
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
      } else {  // 16-bit: the words as they are, two K-consecutive elements each (the k16 fragments)
        const uint32_t *Aw = reinterpret_cast<const uint32_t*>(As), *Bw = reinterpret_cast<const uint32_t*>(Bs);
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          const int r = wm * 64 + mi * 16 + g;
          ab[mi][0] = Aw[r * kMmaLds + kk + t];
          ab[mi][1] = Aw[(r + 8) * kMmaLds + kk + t];
          ab[mi][2] = Aw[r * kMmaLds + kk + t + 4];
          ab[mi][3] = Aw[(r + 8) * kMmaLds + kk + t + 4];
        }
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          const int c = wn * 32 + ni * 8 + g;
          bb[ni][0] = Bw[c * kMmaLds + kk + t];
          bb[ni][1] = Bw[c * kMmaLds + kk + t + 4];
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
            mma_step<OP>(acc[mi][ni], ab[mi], bb[ni]);
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
  Epi::template apply<kMmaBM, kMmaBN, kMmaThreads, OP>(p, C, smem + kMmaBM * LDC, out, m0, n0, tid);
#endif
}

// The kernel for p.operand: fp32 words (16-byte or 4-byte copies, TF32 or 3xTF32), or bf16 / fp16
// elements (16-byte copies, TF32 only).
template <class Epi>
const char* launch_mma_gemm(const Problem& p, const float* x, const float* w, float* out, cudaStream_t st) {
  auto kernel = mma_gemm_kernel<true, false, Epi>;
  if (p.operand == OPERAND_FP32) {
    const bool vec = p.k % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)w % 16 == 0 &&
                     (!p.z0 || (uintptr_t)p.x0 % 16 == 0);  // (x₀: X's row 0, or an external row)
    const bool split = p.precision == TF32X3;
    kernel = vec ? (split ? mma_gemm_kernel<true, true, Epi> : mma_gemm_kernel<true, false, Epi>)
                 : (split ? mma_gemm_kernel<false, true, Epi> : mma_gemm_kernel<false, false, Epi>);
  } else if (p.operand == OPERAND_BF16 || p.operand == OPERAND_FP16) {
    if (p.k % 8 != 0 || (uintptr_t)x % 16 != 0 || (uintptr_t)w % 16 != 0)
      return "the mma.sync GEMM needs in_features % 8 == 0 and 16-byte aligned x and weight in bf16/fp16";
    if (p.precision != TF32 || p.z0)
      return "the mma.sync GEMM runs bf16/fp16 operands at precision tf32, without the first-row shift";
    kernel = p.operand == OPERAND_BF16 ? mma_gemm_kernel<true, false, Epi, OPERAND_BF16>
                                       : mma_gemm_kernel<true, false, Epi, OPERAND_FP16>;
  } else {
    return "unknown operand type (expected 0 fp32, 1 bf16, 2 fp16)";
  }
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
