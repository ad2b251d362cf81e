// Stage 4, fused: one GEMM whose epilogue stores Z' = XWᵀ and the column partials of its
// 128-row tile; the last block of each column block (tile counter + fence) merges all
// row tiles in order into a, c and the running buffers. Then one row pass reads Z' once:
// V = a∘Z' + c and (84) the softmax from online (max, Σexp) partials, writing Y once.
// GEMM, by precision and shape:
//  * tf32 / 3xtf32 with K % 4 == 0 on Hopper: wgmma (m64n256k8) fed by TMA bulk tensor
//    copies into a 4-stage shared-memory ring on mbarriers; one producer warpgroup, two
//    consumer warpgroups (warp specialization), 128×256 block tile, grouped raster order.
//    3xTF32 runs the same kernel (128×192 tiles, promoted accumulation) over three K
//    segments: Xb·Wb, Xs·Wb, Xb·Ws, where
//    X = Xb + Xs and W = Wb + Ws are split into TF32 parts (X per call, W cached by the host).
//  * tf32 / 3xtf32 otherwise: mma.sync m16n8k8 with a cp.async 3-stage pipeline (any K).
//  * fp32: FFMA on the SIMT tile of common.cuh.
// Plain tf32 feeds the fp32 words to the tensor cores, which read their top 19 bits
// (truncation, as cuBLAS does). Eval mode: W', b' hold BN and the scale (folded by the
// caller), GEMM + bias, then the softmax (84).
// Specification: algebra.stage_forward("fused"), algebra.tile_rows("fused", ...): 128-row tiles,
// the fp32 GEMM 64 or 32 on small problems.
#include <cudaTypedefs.h>  // CUtensorMap and the cuTensorMapEncodeTiled signature (no -lcuda)

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
          ab[mi][q] = SPLIT ? to_tf32(v[q]) : __float_as_uint(v[q]);
          if (SPLIT) as[mi][q] = to_tf32(v[q] - __uint_as_float(ab[mi][q]));
        }
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int c = wn * 32 + ni * 8 + g;
        const float v[2] = {Bs[c * kLds + kk + t], Bs[c * kLds + kk + t + 4]};
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
  tile_epilogue<kBM, kBN, kThreads, EPI>(p, C, smem + kBM * LDC, out, p.bias, m0, n0, blockIdx.x, gridDim.y);
}

// ---------------------------------------------------------------- Hopper: TMA + wgmma
constexpr int kWgBM = 128, kWgBK = 32, kWgThreads = 384, kWgGroup = 16;
constexpr int kPromoteStages = 4;  // 3xTF32: promote every 4 K steps (128 products)
constexpr int kSplitBN = 192;      // 3xTF32 tile width: 96 window + 96 promoted accumulators a thread

// Per column-tile width BN: 128×BN block tile, K step 32 (one 128-byte swizzle row), and as
// many pipeline stages as fit in 192 KB (4 for BN = 256 or 192).
template <int BN>
struct WgTile {
  static constexpr uint32_t kABytes = kWgBM * kWgBK * 4, kBBytes = BN * kWgBK * 4;
  static constexpr uint32_t kStageBytes = kABytes + kBBytes;
  static constexpr int kStages = (192 * 1024) / kStageBytes;
  static constexpr size_t kSmem = 1024 + (size_t)kStages * kStageBytes + 2 * kStages * sizeof(uint64_t);
};

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) { return (uint32_t)__cvta_generic_to_shared(ptr); }

// wgmma shared-memory descriptor of a K-major tile written by TMA with 128-byte swizzle:
// rows of 128 B (32 fp32), 8-row atoms 1024 B apart (stride byte offset), swizzle mode 1.
__device__ __forceinline__ uint64_t smem_desc_sw128(const void* ptr) {
  return (uint64_t)((smem_u32(ptr) & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred P;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P, [%0], %1;\n"
      "@!P bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)), "r"(parity) : "memory");
}
// 2-D bulk tensor copy global → shared; completion counted in bytes on `bar`. Out-of-range
// rows and columns of the box are filled with zeros.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(smem_u32(dst)), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// D(64×N, fp32) = A(64×8, smem) · B(8×N, smem) (+ D if accumulate), TF32 operands (the tensor
// cores read the top 19 bits of each fp32 word). Accumulator d[4j + q]: rows g and g + 8 of the warp's 16,
// columns 8j + 2t and 8j + 2t + 1 (g = lane / 4, t = lane % 4), as mma.sync m16n8.
__device__ __forceinline__ void wgmma_tf32(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) {  // m64n256k8
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_tf32(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int accumulate) {  // m64n192k8
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
      "%96, %97, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// One CTA = one 128×BN tile of Z'. Warpgroup 0 produces (one thread issues the TMA copies),
// warpgroups 1 and 2 consume 64 rows each. full[s]: stage s landed; empty[s]: both consumer
// warpgroups are done reading it. Segments: A = (seg == 1 ? a1 : a0), B = (seg == 2 ? b1 : b0).
// PROMOTE: the tensor cores' fp32 accumulation truncates, so its error grows with K; each
// window of kPromoteStages K steps (128 products) is accumulated from zero and then added into
// a separate fp32 accumulator (round-to-nearest FADD): 3xTF32 stays fp32-class for any K.
template <int BN, bool PROMOTE, int EPI>
__global__ void __launch_bounds__(kWgThreads, 1)
fused_wgmma_kernel(const Problem p, float* out, const __grid_constant__ CUtensorMap map_a0,
                   const __grid_constant__ CUtensorMap map_b0, const __grid_constant__ CUtensorMap map_a1,
                   const __grid_constant__ CUtensorMap map_b1, int segments) {
  using T = WgTile<BN>;
  constexpr int ST = T::kStages, NACC = BN / 2;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + ST * T::kStageBytes);
  uint64_t* empty = full + ST;
  const int row_tiles = ceil_div(p.n, kWgBM), col_tiles = ceil_div(p.m, BN);
  // Grouped raster: kWgGroup row tiles share each column tile in turn, so a wave of CTAs
  // reuses W's column blocks and X's row blocks from L2.
  const int per_group = kWgGroup * col_tiles, group = blockIdx.x / per_group;
  const int first_row = group * kWgGroup, rows_in_group = min(kWgGroup, row_tiles - first_row);
  const int rt = first_row + (blockIdx.x % per_group) % rows_in_group;
  const int ct = (blockIdx.x % per_group) / rows_in_group;
  const int m0 = rt * kWgBM, n0 = ct * BN;
  const int KT = ceil_div(p.k, kWgBK), total = segments * KT;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < ST; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 2);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      for (int it = 0; it < total; ++it) {
        const int s = it % ST, seg = it / KT, k0 = (it % KT) * kWgBK;
        if (it >= ST) mbar_wait(empty + s, ((it / ST) - 1) & 1);
        uint8_t* st = smem + s * T::kStageBytes;
        mbar_expect_tx(full + s, T::kStageBytes);
        tma_load_2d(st, seg == 1 ? &map_a1 : &map_a0, full + s, k0, m0);
        tma_load_2d(st + T::kABytes, seg == 2 ? &map_b1 : &map_b0, full + s, k0, n0);
      }
    }
  } else {  // consumers: warpgroup 1 → rows 0..63, warpgroup 2 → rows 64..127
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    float d[NACC], acc[PROMOTE ? NACC : 1];
#pragma unroll
    for (int i = 0; i < NACC; ++i) d[i] = 0.f;  // K = 0 leaves the first product unissued
#pragma unroll
    for (int i = 0; i < (PROMOTE ? NACC : 1); ++i) acc[i] = 0.f;
    const int cw = wg - 1;
    const bool leader = threadIdx.x % 128 == 0;
    bool prev_released = true;  // stage it − 1's buffers already handed back to the producer
    for (int it = 0; it < total; ++it) {
      const int s = it % ST;
      mbar_wait(full + s, (it / ST) & 1);
      const uint8_t* a = smem + s * T::kStageBytes + cw * 64 * 128;
      const uint8_t* b = smem + s * T::kStageBytes + T::kABytes;
      // A promotion window starts from zero: its first product overwrites d (scale-d = 0).
      const bool fresh = PROMOTE ? it % kPromoteStages == 0 : it == 0;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kWgBK / 8; ++kk)  // 8 fp32 = 32 bytes along K per instruction
        wgmma_tf32(d, smem_desc_sw128(a + kk * 32), smem_desc_sw128(b + kk * 32), !(fresh && kk == 0));
      wgmma_commit();
      if (PROMOTE && (it % kPromoteStages == kPromoteStages - 1 || it == total - 1)) {
        wgmma_wait<0>();  // the window's products are done: add them in with round-to-nearest
#pragma unroll
        for (int i = 0; i < NACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
        if (leader && !prev_released) mbar_arrive(empty + (it - 1) % ST);
        if (leader) mbar_arrive(empty + s);
        prev_released = true;
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] += d[i];
      } else {
        wgmma_wait<1>();  // the previous stage's products are done: release its buffers
        if (leader && !prev_released) mbar_arrive(empty + (it - 1) % ST);
        prev_released = false;
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < NACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
    if (PROMOTE) {
#pragma unroll
      for (int i = 0; i < NACC; ++i) d[i] = acc[i];
    }
    // Epilogue from registers. Rows r, r + 8 of this thread; columns 8j + 2t, 8j + 2t + 1.
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = (threadIdx.x % 128) >> 5;
    const int r = m0 + cw * 64 + warp * 16 + g;
    const bool ok0 = r < p.n, ok1 = r + 8 < p.n;
    const bool pairs = (p.m & 1) == 0;  // 8-byte stores of column pairs
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int c = n0 + 8 * j + 2 * t;
      if (pairs && c < p.m) {
        const float b0 = EPI == EPI_BIAS ? p.bias[c] : 0.f, b1 = EPI == EPI_BIAS ? p.bias[c + 1] : 0.f;
        if (ok0) *reinterpret_cast<float2*>(out + (size_t)r * p.m + c) = make_float2(d[4 * j] + b0, d[4 * j + 1] + b1);
        if (ok1)
          *reinterpret_cast<float2*>(out + (size_t)(r + 8) * p.m + c) = make_float2(d[4 * j + 2] + b0, d[4 * j + 3] + b1);
        continue;
      }
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        if (c + q >= p.m) continue;
        const float b = EPI == EPI_BIAS ? p.bias[c + q] : 0.f;
        if (ok0) out[(size_t)r * p.m + c + q] = d[4 * j + q] + b;
        if (ok1) out[(size_t)(r + 8) * p.m + c + q] = d[4 * j + 2 + q] + b;
      }
    }
    if (EPI != EPI_BIAS) {
      // Tile column partials: mean over the tile's valid rows, then M2 about that mean
      // (algebra.tile_partials). Lanes sharing t hold one column: reduce over g by shuffles,
      // then over the 8 consumer warps through shared memory, in a fixed order.
      const int rows = min(kWgBM, p.n - m0), slot = cw * 4 + warp, ctid = threadIdx.x - 128;
      // Both consumer warpgroups are done reading the ring before it holds the reductions.
      asm volatile("bar.sync 1, 256;\n" ::: "memory");
      float* red = reinterpret_cast<float*>(smem);  // [8][BN] warp partials, then [BN] means
      float* mean = red + 8 * BN;
#pragma unroll
      for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int c = 8 * j + 2 * t + q;
            const float mu = pass ? mean[c] : 0.f;
            const float e0 = ok0 ? d[4 * j + q] - mu : 0.f, e1 = ok1 ? d[4 * j + 2 + q] - mu : 0.f;
            float v = pass ? e0 * e0 + e1 * e1 : e0 + e1;
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            v += __shfl_xor_sync(0xffffffffu, v, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 16);
            if (g == 0) red[slot * BN + c] = v;
          }
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        for (int c = ctid; c < BN; c += 256) {
          float total = 0.f;
          for (int w = 0; w < 8; ++w) total += red[w * BN + c];
          if (pass == 0) {
            mean[c] = total / (float)rows;
          } else if (n0 + c < p.m) {
            const int tile = m0 / kWgBM;
            p.part[(size_t)(2 * tile) * p.m + n0 + c] = mean[c];
            p.part[(size_t)(2 * tile + 1) * p.m + n0 + c] = total;
          }
        }
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
      }
    }
  }
  if (EPI == EPI_STATS_LAST)
    finalize_if_last_block<kWgBM, kWgThreads>(p, n0, min(BN, p.m - n0), ct, row_tiles,
                                              reinterpret_cast<float*>(smem) + 9 * BN);
}

// X = Xb + Xs with Xb = rna_tf32(X), Xs = rna_tf32(X − Xb) (same rounding as algebra.round_tf32).
__global__ void split_tf32_kernel(const float* __restrict__ x, float* __restrict__ big, float* __restrict__ small,
                                  size_t count) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    const float v = x[i], b = __uint_as_float(to_tf32(v));
    big[i] = b;
    small[i] = __uint_as_float(to_tf32(v - b));
  }
}

static const char* encode_map(CUtensorMap* map, const float* base, int rows, int k, int box_rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  if (!encode) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    FL_RETURN_IF_ERROR(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (!fn || q != cudaDriverEntryPointSuccess) return "cuTensorMapEncodeTiled is not available";
    encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }
  const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)k * sizeof(float)};
  const cuuint32_t box[2] = {(cuuint32_t)kWgBK, (cuuint32_t)box_rows};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(base), dims, strides, box,
                            elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled rejected a tensor map";
}

// The Hopper path applies when TMA can address the operands (16-byte aligned rows) and, for
// 3xTF32, the host supplied the split copies (p.xsplit workspace, p.wsplit = [Wb; Ws]).
inline bool wgmma_applicable(const Problem& p) {
  const bool aligned = p.k % 4 == 0 && (uintptr_t)p.x % 16 == 0 && (uintptr_t)p.w % 16 == 0;
  return p.use_wgmma && aligned && (p.precision == TF32 || (p.xsplit && p.wsplit));
}

// tf32: 128×256 tiles, one pass over K. 3xtf32: X split here (Xb, Xs into p.xsplit), W's
// parts from the host; 128×192 tiles with promotion, three passes over K.
template <int EPI>
const char* launch_wgmma(const Problem& p, float* out, cudaStream_t st) {
  CUtensorMap a0, b0, a1, b1;
  const char* err;
  if (p.precision == TF32) {
    if ((err = encode_map(&a0, p.x, p.n, p.k, kWgBM)) || (err = encode_map(&b0, p.w, p.m, p.k, 256))) return err;
    auto kernel = fused_wgmma_kernel<256, false, EPI>;
    FL_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WgTile<256>::kSmem));
    kernel<<<ceil_div(p.n, kWgBM) * ceil_div(p.m, 256), kWgThreads, WgTile<256>::kSmem, st>>>(p, out, a0, b0, a0, b0, 1);
    FL_CHECK_LAUNCH();
    return nullptr;
  }
  const size_t nk = (size_t)p.n * p.k, mk = (size_t)p.m * p.k;
  split_tf32_kernel<<<132 * 8, 256, 0, st>>>(p.x, p.xsplit, p.xsplit + nk, nk);
  FL_CHECK_LAUNCH();
  if ((err = encode_map(&a0, p.xsplit, p.n, p.k, kWgBM)) || (err = encode_map(&a1, p.xsplit + nk, p.n, p.k, kWgBM)) ||
      (err = encode_map(&b0, p.wsplit, p.m, p.k, kSplitBN)) || (err = encode_map(&b1, p.wsplit + mk, p.m, p.k, kSplitBN)))
    return err;
  auto kernel = fused_wgmma_kernel<kSplitBN, true, EPI>;
  FL_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WgTile<kSplitBN>::kSmem));
  kernel<<<ceil_div(p.n, kWgBM) * ceil_div(p.m, kSplitBN), kWgThreads, WgTile<kSplitBN>::kSmem, st>>>(p, out, a0, b0, a1, b1, 3);
  FL_CHECK_LAUNCH();
  return nullptr;
}

template <bool VEC, bool SPLIT, int EPI>
const char* launch_tc(const Problem& p, float* out, cudaStream_t st) {
  auto kernel = fused_tc_gemm_kernel<VEC, SPLIT, EPI>;
  FL_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kTcSmem));
  kernel<<<dim3(ceil_div(p.m, kBN), ceil_div(p.n, kBM)), kThreads, kTcSmem, st>>>(p, out);
  FL_CHECK_LAUNCH();
  return nullptr;
}

// fp32: the largest square tile whose grid has at least kMinGrid tiles (the H100's SM count),
// else 32×32 — KernelBench v0 gets 64 tiles of 32×32 instead of 4 of 128×128.
// algebra.FUSED_FP32_TILES, MIN_GRID.
constexpr int kMinGrid = 132;

inline bool fills_grid(const Problem& p, int tile) { return ceil_div(p.m, tile) * ceil_div(p.n, tile) >= kMinGrid; }

template <int EPI>
const char* launch_fused_gemm(const Problem& p, float* out, cudaStream_t st) {
  if (p.precision == FP32) {
    if (fills_grid(p, kBM)) return launch_simt_gemm<kBM, kBN, 8, 8, 8, EPI>(p, p.x, p.w, out, st);
    if (fills_grid(p, 64)) return launch_simt_gemm<FL_GEMM64, EPI>(p, p.x, p.w, out, st);
    return launch_simt_gemm<32, 32, 16, 2, 2, EPI>(p, p.x, p.w, out, st);
  }
  if (wgmma_applicable(p)) return launch_wgmma<EPI>(p, out, st);
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
  const bool vec = ROW_IN_SMEM && (m & 3) == 0;  // 16-byte loads (rows then start 16-byte aligned)
  if (vec) {
    for (int j = 4 * threadIdx.x; j < m; j += 4 * blockDim.x) {
      float4 v = *reinterpret_cast<const float4*>(zr + j);
      if (coef) {
        v.x = coef[j] * v.x + coef[m + j];
        v.y = coef[j + 1] * v.y + coef[m + j + 1];
        v.z = coef[j + 2] * v.z + coef[m + j + 2];
        v.w = coef[j + 3] * v.w + coef[m + j + 3];
      }
      *reinterpret_cast<float4*>(row + j) = v;
      softmax_merge(mx, l, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)), 0.f);
      l += expf(v.x - mx) + expf(v.y - mx) + expf(v.z - mx) + expf(v.w - mx);
    }
  } else {
    for (int j = threadIdx.x; j < m; j += blockDim.x) {
      const float v = coef ? coef[j] * zr[j] + coef[m + j] : zr[j];
      if (ROW_IN_SMEM) row[j] = v;
      softmax_merge(mx, l, v, 1.f);
    }
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
  if (vec) {
    for (int j = 4 * threadIdx.x; j < m; j += 4 * blockDim.x) {
      const float4 v = *reinterpret_cast<const float4*>(row + j);
      *reinterpret_cast<float4*>(yr + j) =
          make_float4(expf(v.x - mx) * inv, expf(v.y - mx) * inv, expf(v.z - mx) * inv, expf(v.w - mx) * inv);
    }
    return;
  }
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
