// TMA + wgmma mainloop (sm_90a: H100, H200): out(N×M) = X Wᵀ on TF32 tensor cores.
// wgmma m64nBNk8 fed by TMA bulk tensor copies into a 4- or 5-stage shared-memory ring on
// mbarriers; warp-specialized: one producer warpgroup (one thread of it issues the copies), two
// consumer warpgroups of 64 rows each; 128×BN block tile, grouped raster order.
//  * tf32: BN = 256, or 64 where the wide tiles would leave most SMs idle (wg_tile_width), one pass
//    over K; the tensor cores read the top 19 bits of the fp32 words.
//  * 3xtf32: X = Xb + Xs split into TF32 parts by the consumers as they read X's tile (in train
//    mode X shifted by the batch's first row, common.cuh); W = Wb + Ws split in shared memory by the
//    producer warpgroup's three idle warps after each W tile lands (wgmma reads B from shared
//    memory only), or, where every W tile would be split many times (many row tiles: wg_w_pass),
//    by one pass over W before the GEMM into a workspace (p.parts) both parts are then loaded from; either
//    way from W as it is at this call (nothing derived from W outlives the call) and with the
//    same bits. The same kernel with BN = 192 or 168, each stage X's tile and both of W's parts,
//    three products a K step Xs·Wb + Xb·Ws + Xb·Wb, with promoted accumulation (fp32-class at any K).
//    Where the batch is small beside out_features (84's and 33's 1024 × 8192 → 8192: wg_swap), the
//    operands swap: the kernel computes Zᵀ = W Xᵀ in 128 × 128 tiles, W split in registers as X is
//    otherwise, X's parts (shifted in train mode) from one pass over X (x_parts_kernel: N·K words,
//    not M·K), and the epilogue reads the transposed tile (epilogue_swapped).
//  * bf16 / fp16 operands (Problem::operand; docs/design.md §15): the tf32 kernel with 16-bit
//    elements, so a stage's 128-byte K slice holds 64 of them and each of its four wgmmas is
//    m64n256k16 (.f32.bf16.bf16 or .f32.f16.f16): the products are exact, the sums fp32, as tf32's.
// tf32: persistent CTAs (one an SM) take tiles as they are ready (3xtf32: one CTA a tile); the
// consumers run the epilogue Epi from their accumulator registers (epilogue_from_fragments: no
// C tile) while the producer already loads the next tile; a 16-bit Z' leaves through shared
// memory by TMA (store_z_tma), under the next tile's mainloop. Needs rows of 16-byte multiples (K % 4 == 0
// for fp32 words, K % 8 == 0 for 16-bit elements) and 16-byte aligned X and W (TMA);
// fusedlib/engine.py picks another path otherwise. Other targets compile an empty body.
#pragma once
#include <cudaTypedefs.h>  // CUtensorMap and the cuTensorMapEncodeTiled signature (no -lcuda)

#include <cstdlib>
#include <cstring>

#include "epilogue.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FL_WGMMA_ENABLED 1
#else
#define FL_WGMMA_ENABLED 0
#endif

namespace fl {

constexpr int kWgBM = 128, kWgBK = 32, kWgThreads = 384, kWgGroup = 16;
// K elements a stage: one 128-byte swizzle row, 32 fp32 words or 64 bf16 / fp16 elements.
__host__ __device__ constexpr int wg_step_k(int operand) { return operand == OPERAND_FP32 ? kWgBK : 2 * kWgBK; }
__host__ __device__ constexpr int operand_bytes(int operand) { return operand == OPERAND_FP32 ? 4 : 2; }
// 3xTF32: the producer warpgroup's warps 1–3, which split each stage's W tile (split_w_tile)
constexpr int kWgSplitThreads = 96;
// 3xTF32 tile widths (window + promoted accumulators a thread: 96 + 96 or 84 + 84), chosen per
// shape by split_tile_width.
constexpr int kSplitWide = 192, kSplitNarrow = 168;
// The swapped 3xTF32 GEMM's tile (wg_swap): 128 × 128, whose columns are Z's rows, in tiles of 128
// rows as every other tensor-core tile's (the statistics' partials and their merge order unchanged).
constexpr int kSplitSwap = 128;

// The tf32 (and 16-bit) tile's widths: 256 columns, or 64 where 256-wide tiles would leave most
// SMs idle (wg_tile_width: KernelBench v0's 128 × 1024 → 512 gives 2 wide tiles, 8 narrow ones).
constexpr int kWgWide = 256, kWgNarrow = 64;

// Per column-tile width BN: 128×BN block tile, K step 32 (one 128-byte swizzle row), a stage X's
// tile and W's (3xTF32: W's tile as loaded, split in place into Wb, and Ws beside it), as many
// pipeline stages as fit in 192 KB, at most 6 (tf32: 4, 3xTF32: 3, the narrow tile: 6), then the
// epilogue's shared memory (tf32: at least the TMA epilogue's staging area, kZStaging, which the
// merge units share) and the mbarriers (3xTF32: full, split, empty a stage).
template <int BN, bool PROMOTE>
struct WgTile {
  static constexpr uint32_t kABytes = kWgBM * kWgBK * 4, kBBytes = BN * kWgBK * 4;
  static constexpr uint32_t kStageBytes = kABytes + (PROMOTE ? 2 : 1) * kBBytes;
  static constexpr uint32_t kLoadBytes = kABytes + kBBytes;  // what TMA writes a stage (X's tile, W's)
  static constexpr int kStages = (192 * 1024) / kStageBytes < 6 ? (192 * 1024) / kStageBytes : 6;
  // 3xTF32 with the first-row shift: x₀ (p.x0) over the stage's 32 K columns, a 128-byte row a stage
  static constexpr size_t kRow0Offset = (size_t)kStages * kStageBytes;
  static constexpr size_t kEpilogueOffset = kRow0Offset + kStages * kWgBK * sizeof(float);  // beside the live ring
  static constexpr size_t kEpilogueBytes = fragment_smem_floats<BN>() * sizeof(float);
  static constexpr size_t kBarrierOffset =
      kEpilogueOffset + (!PROMOTE && kZStaging > kEpilogueBytes ? kZStaging : kEpilogueBytes);
  // + the tile scheduler's 2 slots (tile indices) + the split-K flag
  static constexpr size_t kSmem = 1024 + kBarrierOffset + (PROMOTE ? 3 : 2) * kStages * sizeof(uint64_t) + 16 + 16;
  static_assert(kBarrierOffset % 8 == 0 && kSmem <= 232448, "aligned mbarriers; within sm_90's 227 KB");
};

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) { return (uint32_t)__cvta_generic_to_shared(ptr); }

// wgmma shared-memory descriptor of a K-major tile written by TMA with 128-byte swizzle:
// rows of 128 B (32 fp32), 8-row atoms 1024 B apart (stride byte offset), swizzle mode 1.
__device__ __forceinline__ uint64_t smem_desc_sw128(const void* ptr) {
  return (uint64_t)((smem_u32(ptr) & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

#if FL_WGMMA_ENABLED
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Named barrier 2 (1: epilogue_sync): the hand-off of each unit between the producer warp and the
// 256 consumer threads (N = 288; with merge units also the counting warp, N = 320), all of them
// waiting (bar.sync); it orders the unit index's write before its reads, and the reads of a slot
// before its next write.
template <int N>
__device__ __forceinline__ void handoff_sync() { asm volatile("bar.sync 2, %0;\n" ::"n"(N) : "memory"); }
// Named barrier 5 (3 and 4: store_z_tma's): a merge unit done. The consumers arrive after it
// (bar.arrive: they go on to the hand-off), the producer warp waits there before it claims the
// next unit, so that no CTA holds a claimed merge behind the one it runs: it would wait in the
// kernel's tail. (run250: at 84 eight CTAs ran ten merges each, two of them in the tail.)
__device__ __forceinline__ void merge_done_arrive() { asm volatile("bar.arrive 5, 288;\n" ::: "memory"); }
__device__ __forceinline__ void merge_done_sync() { asm volatile("bar.sync 5, 288;\n" ::: "memory"); }
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

// D(64×256, fp32) = A(64×Kᵢ, smem) · B(Kᵢ×256, smem) (+ D if accumulate), both operands by
// descriptor, 32 bytes of K: TF32 (Kᵢ = 8; the tensor cores read the top 19 bits of each fp32 word),
// bf16 or fp16 (Kᵢ = 16, K-major: the two transpose immediates 0). Accumulator d[4j + q]: rows g
// and g + 8 of the warp's 16, columns 8j + 2t and 8j + 2t + 1 (g = lane / 4, t = lane % 4), as
// mma.sync m16n8. One operand list, three instructions:
#define FL_WGMMA_SS_N256(NAME, INSTR, IMM)                                                                   \
  __device__ __forceinline__ void NAME(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" INSTR                                     \
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1" IMM ";\n}\n"                                              \
                 : \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));                                               \
  }
FL_WGMMA_SS_N256(wgmma_tf32, "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32", "")
FL_WGMMA_SS_N256(wgmma_bf16, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", ", 0, 0")
FL_WGMMA_SS_N256(wgmma_f16, "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", ", 0, 0")
#undef FL_WGMMA_SS_N256
// The narrow tile's (kWgNarrow): D(64×64), the same operands and layout.
#define FL_WGMMA_SS_N64(NAME, INSTR, IMM)                                                                   \
  __device__ __forceinline__ void NAME(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" INSTR                                     \
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1" IMM ";\n}\n" \
                 : \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));                                               \
  }
FL_WGMMA_SS_N64(wgmma_tf32, "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32", "")
FL_WGMMA_SS_N64(wgmma_bf16, "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", ", 0, 0")
FL_WGMMA_SS_N64(wgmma_f16, "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", ", 0, 0")
#undef FL_WGMMA_SS_N64
template <int OP, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  if constexpr (OP == OPERAND_BF16) wgmma_bf16(d, desc_a, desc_b, accumulate);
  else if constexpr (OP == OPERAND_FP16) wgmma_f16(d, desc_a, desc_b, accumulate);
  else wgmma_tf32(d, desc_a, desc_b, accumulate);
}
// 3xTF32: D(64×N) (+)= A(64×8, registers) · B(8×N, smem), A the TF32 part of X a thread computed
// (wgmma's register fragment of A: a[0] row g, column t; a[1] row g + 8; a[2], a[3] the same rows
// at column t + 4, in the warp's 16 rows), so X (the swapped GEMM: W) is split on the fly
// (wgmma_3xtf32_fragments).
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {  // m64n128k8
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[96], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {  // m64n192k8
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
      "{%96, %97, %98, %99}, %100, p, 1, 1;\n"
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
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[84], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {  // m64n168k8
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %89, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n168k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83}, "
      "{%84, %85, %86, %87}, %88, p, 1, 1;\n"
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
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}
#endif  // FL_WGMMA_ENABLED

// Whether a 16-bit Z' leaves by TMA (store_z_tma; host and device agree): 16-byte rows and base.
__host__ __device__ inline bool wg_z_tma(const Problem& p) {
  return p.operand != OPERAND_FP32 && p.z_type == p.operand && p.m % 8 == 0 && (uintptr_t)p.z % 16 == 0;
}

// Whether the kernel runs persistent CTAs: tf32 does; 3xTF32 runs one CTA a tile, as the
// launch's grid says: with its promoted accumulators (2 × BN/2 registers a thread) the tile
// loop's state costs more than persistence saves (run82, 84's fused GEMM: 1123 µs persistent
// against 1047–1051 one CTA a tile; at 128×192 ptxas spills).
__host__ __device__ constexpr bool wg_persistent(bool promote) { return !promote; }

// Tile t of the grouped raster: kWgGroup row tiles share each column tile in turn, so the
// tiles running at once reuse W's column blocks and X's row blocks from L2.
__device__ __forceinline__ void wg_tile_origin(int t, int row_tiles, int col_tiles, int bn, int& m0, int& n0) {
  const int per_group = kWgGroup * col_tiles, group = t / per_group;
  const int first_row = group * kWgGroup, rows_in_group = min(kWgGroup, row_tiles - first_row);
  m0 = (first_row + (t % per_group) % rows_in_group) * kWgBM;
  n0 = ((t % per_group) / rows_in_group) * bn;
}

// The persistent (tf32) tile scheduler: the next unit (tile, or tile × split) of the raster
// from a global counter, as each CTA's producer is ready for one. With merge units
// (kMergeUnits) the tiles come first and then, in column-block order, the merges of every
// 64-column slice (merge_slice): a CTA with no tile left takes a merge, so no merge delays a
// tile (run108–run111: with the last tile of each column block merging, a CTA delayed by one
// merge finished its next tile last and merged again, and ended the kernel), and a merge unit
// only ever waits on tiles already handed to running CTAs. Results do not depend on which CTA
// runs a unit (the merge order is the tiles', not the CTAs'). The counter is zero before the
// launch; the last fetch (gridDim.x of them return ≥ units, one a CTA) resets it. (One CTA a
// tile, 3xTF32: unit blockIdx.x, no scheduler.)
constexpr bool kMergeUnits = true;
__device__ __forceinline__ int next_unit(const Problem& p, int units) {
  const int u = (int)atomicAdd(p.tile_counter, 1u);
  if (u == units + (int)gridDim.x - 1) *p.tile_counter = 0;  // every CTA has had its last
  return u;
}

// 3xTF32's split of X as the consumers read it (no split pass, no copy of X's parts): this
// thread's wgmma A fragments (wgmma_tf32_rs) of Xb and Xs, K slice kk (8 columns) of its
// warpgroup's 64 rows in a stage, which TMA wrote with the 128-byte swizzle (16-byte chunk c of row r at chunk
// c ^ (r % 8)). v = x − x₀ in the rows the first-row shift covers (shift_lo, shift_hi = 1 for rows
// g, g + 8; x₀ from row0, the shift row over the stage's K columns, + 4t), then Xb = rna_tf32(v) and
// Xs = rna_tf32(v − Xb) (algebra.tf32_split; the same bits as a split pass; a NaN in X stays a
// NaN in Xs).
__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void wgmma_3xtf32_fragments(uint32_t (&xb)[4], uint32_t (&xs)[4], uint32_t a, uint32_t row0,
                                                       int kk, float shift_lo, float shift_hi) {
  // a: the stage's rows of this warpgroup (1024-aligned) + this thread's swizzled offset of row
  // g, chunk 0 (wgmma_3xtf32_base); chunk c of rows g and g + 8 at a ^ (c << 4), + 1024
  const uint32_t c0 = a ^ ((2 * kk) << 4), c1 = a ^ ((2 * kk + 1) << 4);
  const float x[4] = {lds_f32(c0), lds_f32(c0 + 1024), lds_f32(c1), lds_f32(c1 + 1024)};
  float x0[2] = {0.f, 0.f};
  if (shift_lo != 0.f || shift_hi != 0.f) x0[0] = lds_f32(row0 + 32 * kk), x0[1] = lds_f32(row0 + 32 * kk + 16);
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // rows g, g + 8 (q % 2) at columns 8kk + t, + 4 (q / 2)
    const float v = fmaf(-(q % 2 ? shift_hi : shift_lo), x0[q / 2], x[q]);  // x − x₀ or x, exactly
    // Xb by integer rounding (ties away, as cvt.rna for every finite v; 2 instructions instead
    // of cvt's emulation with its NaN guard); Xs by to_tf32, which keeps a NaN v a NaN
    xb[q] = (__float_as_uint(v) + 0x1000u) & ~0x1FFFu;
    xs[q] = to_tf32(v - __uint_as_float(xb[q]));
  }
}

// This thread's offset in a stage's A tile for wgmma_3xtf32_fragment: row 16·warp + g of its
// warpgroup's 64, chunk 0 as swizzled ((0 ^ g) << 4), its column t within the chunk.
__device__ __forceinline__ uint32_t wgmma_3xtf32_offset() {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  return (16 * ((threadIdx.x / 32) % 4) + g) * 128 + (g << 4) + 4 * t;
}

// The registers of a wgmma's A fragment stay as they are up to this point (the compiler may
// not reuse them earlier: the tensor cores read them until the wgmma's wait).
__device__ __forceinline__ void held_until_here(uint32_t (&f)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) asm volatile("" : "+r"(f[q])::"memory");
}

// 3xTF32's split of four words of W: Wb = W truncated to TF32 (exact TF32 values: what the tensor
// cores read does not depend on how they round an fp32 word) and Ws = rna_tf32(W − Wb) (W − Wb is
// exact; |Ws| < 2⁻¹⁰|W|, so Wb + Ws is W to 2⁻²¹|W|, the order of the Xs·Ws term 3xTF32 leaves
// out). A NaN or an inf in W stays one in Wb. Integer arithmetic, 4 instructions a word (cvt.rna
// is emulated on sm_90). The one split of W: in shared memory (split_w_tile) and in the pass
// (w_parts_kernel), so both give the same bits.
__device__ __forceinline__ void split_w4(uint4 v, uint4& big, uint4& small) {
  big = uint4{v.x & ~0x1FFFu, v.y & ~0x1FFFu, v.z & ~0x1FFFu, v.w & ~0x1FFFu};
  const auto rest = [](uint32_t w, uint32_t wb) {  // rna_tf32(w − wb), w − wb finite or NaN (Wb keeps it)
    return (__float_as_uint(__uint_as_float(w) - __uint_as_float(wb)) + 0x1000u) & ~0x1FFFu;
  };
  small = uint4{rest(v.x, big.x), rest(v.y, big.y), rest(v.z, big.z), rest(v.w, big.w)};
}

// In shared memory: a stage's W tile as TMA wrote it (BN rows of 32 fp32, swizzled; the split is
// elementwise, so the layout does not matter) becomes Wb in place and Ws in the BYTES after it;
// thread t of the kWgSplitThreads splitting threads takes 16 bytes at a time (consecutive
// threads, consecutive 16 bytes: no bank conflicts), four such loads in flight.
template <uint32_t BYTES>
__device__ __forceinline__ void split_w_tile(uint8_t* tile, int t) {
  static_assert(BYTES % (16 * kWgSplitThreads) == 0, "whole float4 rounds");
  uint4* big = reinterpret_cast<uint4*>(tile);
  uint4* small = reinterpret_cast<uint4*>(tile + BYTES);
#pragma unroll 2
  for (int i = t; i < (int)(BYTES / 16); i += kWgSplitThreads) split_w4(big[i], big[i], small[i]);
}

// The pass: W (M·K words, K % 4 == 0 and 16-byte aligned, as the wgmma path needs) into
// parts = [Wb; Ws] (2·M·K words), 16 bytes a thread, grid-stride.
__global__ void w_parts_kernel(const uint4* __restrict__ w, uint4* __restrict__ parts, size_t quads) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < quads; i += (size_t)gridDim.x * blockDim.x)
    split_w4(w[i], parts[i], parts[quads + i]);
}

// The swapped GEMM's pass (wg_swap): X (N·K words, as W above) into parts = [Xb; Xs] by the same
// split of a word, each row first shifted by x₀ where the first-row shift covers it (p.z0: every
// row but row 0, or every row with an external x₀; v = x − x₀ rounded once, as the consumers'
// split computes it), so that Zᵀ's column 0 is z₀ = x₀Wᵀ and the others D's.
__global__ void x_parts_kernel(const Problem p, uint4* __restrict__ parts) {
  const size_t quads = (size_t)p.n * p.k / 4, row_quads = p.k / 4;
  const float4* x = reinterpret_cast<const float4*>(p.x);
  const float4* x0 = reinterpret_cast<const float4*>(p.x0);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < quads; i += (size_t)gridDim.x * blockDim.x) {
    float4 v = x[i];
    const size_t row = i / row_quads;
    if (p.z0 && (row != 0 || !shift_keeps_row0(p))) {
      const float4 s = x0[i % row_quads];
      v = make_float4(v.x - s.x, v.y - s.y, v.z - s.z, v.w - s.w);
    }
    split_w4(make_uint4(__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z), __float_as_uint(v.w)),
             parts[i], parts[quads + i]);
  }
}

// Persistent: a CTA (one an SM) runs the units next_unit hands it. Warp 0 produces (its lane 0
// takes the next unit, passes its index to the consumers through tile_slot[f % 2] at a hand-off
// barrier, and issues the TMA copies), warpgroups 1 and 2 consume 64
// rows each. full[s]: stage s landed; empty[s]: both consumer warpgroups are done reading it. One step counter `it` runs across the CTA's
// tiles, so producer and consumers agree on every stage's parity; the producer loads the next
// tile while the consumers run this tile's epilogue (from their registers, with its own shared
// memory beside the ring). tf32: A from map_a (X), B from map_b0 (W), both by descriptor.
// 3xTF32: a stage holds X's tile as it is (map_a) and W's (map_b0), which the producer
// warpgroup's other three warps split into Wb (in place) and Ws once it has landed
// (split_w_tile; split[s]: done), or with p.parts W's parts Wb, Ws from the pass (map_b0,
// map_b1: TMA writes the whole stage, no split in the kernel); the consumers split X into TF32 parts as they read it from
// shared memory (wgmma_3xtf32_fragments) and issue Xs·Wb + Xb·Ws + Xb·Wb for each K slice. With the first-row shift (p.z0) the producer
// also loads x₀ for each K step (map_row0, the 1×K map over p.x0: X's row 0, or an external row).
// PROMOTE: the tensor cores' fp32 accumulation truncates, so its error grows with K; each K
// step's products (3 × 32) are accumulated from zero and then added into a separate fp32
// accumulator (round-to-nearest FADD): 3xTF32 stays fp32-class for any K.
// 16-bit operands (at TF32): map_b1 is Z's map where a 16-bit Z' leaves by TMA (wg_z_tma).
// SWAP (3xTF32, wg_swap): the tile is Zᵀ's, 128 of W's rows (Z's columns) × BN = 128 of X's (Z's
// rows): A is W (map_a), split by the consumers as X is otherwise; B is X's parts from the pass
// (map_b0, map_b1), the first-row shift already in them; epilogue_swapped reads the tile.
template <int BN, bool PROMOTE, class Epi, bool SPLITK, int OP = OPERAND_FP32, bool SWAP = false>
__global__ void __launch_bounds__(kWgThreads, 1)
wgmma_gemm_kernel(const Problem p, float* out, const __grid_constant__ CUtensorMap map_a,
                   const __grid_constant__ CUtensorMap map_b0, const __grid_constant__ CUtensorMap map_row0,
                   const __grid_constant__ CUtensorMap map_b1) {
#if FL_WGMMA_ENABLED
  using T = WgTile<BN, PROMOTE>;
  constexpr int ST = T::kStages, NACC = BN / 2, BK = wg_step_k(OP);  // BK: K elements a stage
  static_assert(OP == OPERAND_FP32 || !PROMOTE, "16-bit operands: no 3xTF32 (their products are exact)");
  static_assert(!SWAP || (PROMOTE && !SPLITK && BN == kSplitSwap && OP == OPERAND_FP32),
                "the swap: 3xTF32 (float32 operands and vectors: epilogue_swapped), 128 × 128 tiles, no split-K");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  float* epi = reinterpret_cast<float*>(smem + T::kEpilogueOffset);
  float* row0 = reinterpret_cast<float*>(smem + T::kRow0Offset);  // [ST][32] (3xTF32, p.z0)
  const bool shift = PROMOTE && p.z0 && !SWAP;  // (swapped: X's parts hold the shift)
  const bool parts = PROMOTE && p.parts;  // 3xTF32: B's parts from the pass, loaded (no split here)
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kBarrierOffset);
  uint64_t* empty = full + ST;
  uint64_t* split = empty + ST;  // 3xTF32: W's tile of stage s split (split_w_tile)
  int* tile_slot = reinterpret_cast<int*>(split + (PROMOTE ? ST : 0));  // [2] the next unit's index
  int* last_split = tile_slot + 2;
  const int row_tiles = ceil_div(SWAP ? p.m : p.n, kWgBM), col_tiles = ceil_div(SWAP ? p.n : p.m, BN);
  const int tiles = row_tiles * col_tiles;
  const int KT = ceil_div(p.k, BK), S = SPLITK ? p.splits : 1, units = tiles * S;
  constexpr bool kUnits = kMergeUnits && Epi::kMerge && wg_persistent(PROMOTE);  // merges after the tiles
  static_assert(!kUnits || BN % 64 == 0, "a column block in 64-column slices");
  static_assert(!kUnits || T::kBarrierOffset - T::kEpilogueOffset >= 3 * 256 * sizeof(float), "merge_columns' smem");
  // + a merge unit a 64-column slice, where a column's statistics span row tiles (one row tile: the
  // tile's epilogue finalizes its columns, epilogue_from_fragments)
  const int all_units = units + (kUnits && row_tiles > 1 ? ceil_div(p.m, 64) : 0);
  constexpr int kHandoff = kUnits ? 320 : 288;  // the hand-off's threads (+ the counting warp)
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < ST; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 2);
      if (PROMOTE) mbar_init(split + s, kWgSplitThreads / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x < 32) {  // the producer warp: lane 0 issues, the warp meets the hand-offs
      const bool issuer = threadIdx.x == 0;
      int it = 0;  // the issuer's step across units: every stage's parity
      auto load_step = [&](int kt, int m0, int n0) {
        const int s = it % ST, k0 = kt * BK;
        if (it >= ST) mbar_wait(empty + s, ((it / ST) - 1) & 1);
        uint8_t* st = smem + s * T::kStageBytes;
        mbar_expect_tx(full + s, (parts ? T::kStageBytes : T::kLoadBytes) + (shift ? kWgBK * sizeof(float) : 0));
        tma_load_2d(st, &map_a, full + s, k0, m0);
        tma_load_2d(st + T::kABytes, &map_b0, full + s, k0, n0);
        if (parts) tma_load_2d(st + T::kABytes + T::kBBytes, &map_b1, full + s, k0, n0);
        if (shift) tma_load_2d(row0 + s * kWgBK, &map_row0, full + s, k0, 0);
        ++it;
      };
      // The unit to take: the scheduler's, through slot f % 2, in the persistent kernel.
      auto claim = [&](int f) {
        int v = 0;
        if (issuer) tile_slot[f % 2] = v = next_unit(p, all_units);
        return __shfl_sync(0xffffffffu, v, 0);
      };
      int u = wg_persistent(PROMOTE) ? claim(0) : blockIdx.x;
      for (int f = 0;; ++f) {  // unit f of this CTA
        const bool tile = u < units;
        int m0 = 0, n0 = 0, kt = 0, kt1 = 0;
        if (tile) {
          wg_tile_origin(u / S, row_tiles, col_tiles, BN, m0, n0);
          kt = split_begin(u % S, S, KT), kt1 = split_begin(u % S + 1, S, KT);
        }
        // Its first ST steps go into the stages the consumers free as they finish unit f − 1 (the
        // overlap of a tile's loads with the previous tile's epilogue); then the hand-off, which
        // waits for that epilogue; then the rest.
        if (issuer)
          for (const int first = min(kt1, kt + ST); kt < first; ++kt) load_step(kt, m0, n0);
        if (wg_persistent(PROMOTE)) {
          __syncwarp();  // (lane 0 from its loads: bar.sync wants the whole warp)
          handoff_sync<kHandoff>();  // the consumers take unit f from slot f % 2
          if (u >= all_units) break;
        }
        if (issuer)
          for (; kt < kt1; ++kt) load_step(kt, m0, n0);
        if (!wg_persistent(PROMOTE)) break;  // one tile a CTA
        if (kUnits && !tile) {  // a merge: the next claim once it is done
          __syncwarp();  // (as before the hand-off: bar.sync wants the whole warp)
          merge_done_sync();
        }
        u = claim(f + 1);  // slot (f + 1) % 2: its last reads (unit f − 1) were before this hand-off
      }
    } else if constexpr (PROMOTE && !SWAP) {  // warps 1–3 (3xTF32, one tile a CTA): W's parts of each stage as it lands
      const int kt0 = split_begin(blockIdx.x % S, S, KT), kt1 = split_begin(blockIdx.x % S + 1, S, KT);
      for (int kt = kt0, it = 0; kt < kt1 && !parts; ++kt, ++it) {
        const int s = it % ST;
        mbar_wait(full + s, (it / ST) & 1);
        split_w_tile<T::kBBytes>(smem + s * T::kStageBytes + T::kABytes, threadIdx.x - 32);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the writes, before wgmma reads them
        __syncwarp();
        if (threadIdx.x % 32 == 0) mbar_arrive(split + s);  // one arrival a warp
      }
    } else if constexpr (kUnits) {  // warp 1, the counting warp: each unit's count (below)
      if (threadIdx.x < 64)
        for (int f = 0, done = -1;; ++f) {  // done: unit f − 1 where it was a tile (× split)
          __syncwarp();  // (bar.sync wants the whole warp)
          handoff_sync<kHandoff>();
          const int u = tile_slot[f % 2];
          if (done >= 0 && threadIdx.x == 32) {
            int m0, n0;
            wg_tile_origin(done / S, row_tiles, col_tiles, BN, m0, n0);
            __threadfence();  // the partials the consumers wrote before the hand-off, visible device-wide
            atomicAdd(p.counters + n0 / BN, 1u);
          }
          if (u >= all_units) break;
          done = u < units && row_tiles > 1 ? u : -1;
        }
    }
  } else {  // consumers: warpgroup 1 → rows 0..63, warpgroup 2 → rows 64..127
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wg - 1;
    const bool leader = threadIdx.x % 128 == 0;
    int it = 0;
    for (int f = 0;; ++f) {
      int u = blockIdx.x;
      if (wg_persistent(PROMOTE)) {
        handoff_sync<kHandoff>();  // unit f − 1 done (its epilogue); unit f's index is in slot f % 2
        u = tile_slot[f % 2];
        if (u >= all_units) break;
        if (kUnits && u >= units) {  // merge unit: the 64-column slice from j0, of column block j0 / BN
          const int j0 = (u - units) * 64, block = j0 / BN, slices = ceil_div(min(BN, p.m - block * BN), 64);
          if (OP != OPERAND_FP32 && wg_z_tma(p)) z_staging_drained<256>(threadIdx.x - 128);  // (epi: staging)
          merge_slice(p, epi, block, j0, min(64, p.m - j0), row_tiles * S, slices, kWgBM, threadIdx.x - 128);
          merge_done_arrive();
          continue;
        }
      }
      const int kt0 = split_begin(u % S, S, KT), kt1 = split_begin(u % S + 1, S, KT);
      float d[NACC], acc[PROMOTE ? NACC : 1];
#pragma unroll
      for (int i = 0; i < NACC; ++i) d[i] = 0.f;  // K = 0 leaves the first product unissued
#pragma unroll
      for (int i = 0; i < (PROMOTE ? NACC : 1); ++i) acc[i] = 0.f;
      float shift_lo = 0.f, shift_hi = 0.f;  // 3xTF32: 1 where rows g, g + 8 of the warp are shifted
      if (PROMOTE && shift) {
        int m0, n0;
        wg_tile_origin(u / S, row_tiles, col_tiles, BN, m0, n0);
        const int r = m0 + 64 * cw + 16 * ((threadIdx.x / 32) % 4) + (threadIdx.x % 32) / 4;
        // row 0 stays x₀ (not with an external x₀: shift_keeps_row0); rows past N stay 0
        shift_lo = (r != 0 || !shift_keeps_row0(p)) && r < p.n, shift_hi = r + 8 < p.n;
      }
      Affine early{1.f, 0.f};  // eval's 16-bit Y by TMA: this thread's column coefficients (early_coef)
      if constexpr (OP != OPERAND_FP32 && Epi::kStore == Store::kAffine) {
        int m0, n0;
        wg_tile_origin(u / S, row_tiles, col_tiles, BN, m0, n0);
        early = early_coef<Epi, OP, BN>(p, n0, threadIdx.x - 128, wg_z_tma(p));
      }
      bool prev_released = true;  // step it − 1's stage already handed back to the producer
      // 3xTF32: the A fragments (Xb and Xs) of G K slices at a time (all four; 2 at BN = 192, for
      // registers), rewritten once the wgmmas before are done; the two consumer warpgroups take
      // turns on the tensor cores, one splitting while the other's 3·G wgmmas run (one split
      // feeds all three products, run120). Each step's products are then added into acc.
      constexpr int G = BN == kSplitWide ? 2 : kWgBK / 8;
      uint32_t xb[G][4] = {}, xs[G][4] = {};
      const uint32_t offset = PROMOTE ? wgmma_3xtf32_offset() : 0;
      for (int kt = kt0; kt < kt1; ++kt, ++it) {
        const int s = it % ST;
        mbar_wait(full + s, (it / ST) & 1);
        const uint8_t* a = smem + s * T::kStageBytes + cw * 64 * 128;
        const uint8_t* b = smem + s * T::kStageBytes + T::kABytes;
        if constexpr (PROMOTE) {
          const uint32_t a_u32 = smem_u32(a) + offset, x0_u32 = smem_u32(row0 + s * kWgBK) + 4 * (threadIdx.x % 4);
#pragma unroll
          for (int k0 = 0; k0 < kWgBK / 8; k0 += G) {
            wgmma_wait<0>();  // the products before are done (k0 = 0: the previous step's)
#pragma unroll
            for (int i = 0; i < NACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
#pragma unroll
            for (int j = 0; j < G; ++j) held_until_here(xb[j]), held_until_here(xs[j]);
            if (k0 == 0) {
              if (kt > kt0) {  // add the previous step's products in, rounding to nearest
#pragma unroll
                for (int i = 0; i < NACC; ++i) acc[i] += d[i];
              }
              if (leader && !prev_released) mbar_arrive(empty + (it - 1) % ST);  // its stage is free
            }
#pragma unroll
            for (int j = 0; j < G; ++j)
              wgmma_3xtf32_fragments(xb[j], xs[j], a_u32, x0_u32, k0 + j, shift_lo, shift_hi);
            if (k0 == 0 && !parts) mbar_wait(split + s, (it / ST) & 1);  // W's parts of the stage are ready
            wgmma_fence();
#pragma unroll
            for (int j = 0; j < G; ++j) {  // the small products first; the step's first from zero
              const int kk = k0 + j;
              wgmma_tf32_rs(d, xs[j], smem_desc_sw128(b + kk * 32), kk != 0);
              wgmma_tf32_rs(d, xb[j], smem_desc_sw128(b + T::kBBytes + kk * 32), 1);
              wgmma_tf32_rs(d, xb[j], smem_desc_sw128(b + kk * 32), 1);
            }
            wgmma_commit();
          }
        } else {
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)  // 32 bytes along K per instruction (8 fp32, 16 bf16 / fp16)
            wgmma_ss<OP>(d, smem_desc_sw128(a + kk * 32), smem_desc_sw128(b + kk * 32), !(kt == kt0 && kk == 0));
          wgmma_commit();
          wgmma_wait<1>();  // the previous step's products are done: release its stage
          if (leader && !prev_released) mbar_arrive(empty + (it - 1) % ST);
        }
        prev_released = false;
      }
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < NACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
#pragma unroll
      for (int j = 0; j < G; ++j) held_until_here(xb[j]), held_until_here(xs[j]);
      if (PROMOTE && kt1 > kt0) {
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] += d[i];
      }
      if (leader && !prev_released) mbar_arrive(empty + (it - 1) % ST);  // the tile's last stage
      if (PROMOTE) {
#pragma unroll
        for (int i = 0; i < NACC; ++i) d[i] = acc[i];
      }
      // Split-K: the tile's last split to finish adds all S partial tiles in split order and
      // runs the epilogue; the others only leave their partial tile.
      if (!SPLITK || sum_splits<NACC, 256>(p, d, u / S, u % S, last_split, threadIdx.x - 128)) {
        int m0, n0;  // (not needed by the mainloop: two registers fewer under the accumulators)
        wg_tile_origin(u / S, row_tiles, col_tiles, BN, m0, n0);
        // The epilogue from the accumulator registers (m16n8 layout: warp 4·cw + warp holds rows
        // 16·(4·cw + warp) + g and + 8); the barrier keeps the previous tile's epilogue reads of
        // its shared memory before this one's writes.
        epilogue_sync<256>();
        if constexpr (SWAP) epilogue_swapped<BN, Epi>(p, d, epi, out, m0, n0, threadIdx.x - 128);
        else
          epilogue_from_fragments<BN, Epi, kUnits, OP>(p, d, epi, out, m0, n0, threadIdx.x - 128,
                                                       OP != OPERAND_FP32 && wg_z_tma(p) ? &map_b1 : nullptr, early);
      }
      if (!wg_persistent(PROMOTE)) break;  // one tile a CTA
    }
    if (OP != OPERAND_FP32 && wg_z_tma(p) && threadIdx.x % 128 == 0)  // Z's last stores done before the CTA ends
      asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  }
#endif
}

// A (rows × k) row-major matrix of `operand` elements (fp32, bf16 or fp16) read in boxes of
// box_rows × one 128-byte row (32 fp32 or 64 16-bit elements: wg_step_k), 128-byte swizzled for
// wgmma's descriptors (or not: the shift row x₀, 1 × k, which the consumers read by address).
static const char* encode_map(CUtensorMap* map, const void* base, int rows, int k, int box_rows,
                              CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B, int operand = OPERAND_FP32) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  if (!encode) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    FL_RETURN_IF_ERROR(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (!fn || q != cudaDriverEntryPointSuccess) return "cuTensorMapEncodeTiled is not available";
    encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }
  const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)k * operand_bytes(operand)};
  const cuuint32_t box[2] = {(cuuint32_t)wg_step_k(operand), (cuuint32_t)box_rows};
  const cuuint32_t elem[2] = {1, 1};
  const CUtensorMapDataType type = operand == OPERAND_BF16   ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : operand == OPERAND_FP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUresult r = encode(map, type, 2, const_cast<void*>(base), dims, strides, box,
                            elem, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled rejected a tensor map";
}

// The Hopper path can run when TMA can address the operands (rows of 16-byte multiples, 16-byte
// aligned bases) at a tensor-core precision (16-bit operands: at TF32's, the one kernel they have).
inline bool wgmma_applicable(const Problem& p, const void* x, const void* w) {
  const bool aligned = (size_t)p.k * operand_bytes(p.operand) % 16 == 0 && (uintptr_t)x % 16 == 0 &&
                       (uintptr_t)w % 16 == 0;
  return aligned && (p.operand == OPERAND_FP32 ? p.precision == TF32 || p.precision == TF32X3 : p.precision == TF32);
}

// 3xTF32 tile width for an N×M output: of 192 and 168, the one whose rounds of one tile an SM
// cost less, ceil(tiles / SMs)·(BN + 24) (the 24: a tile's own loads and epilogue, in columns).
// Fits the H100 measurements (results/h100/NOTES.md, run79): 168 where both widths need the
// same rounds (1024×8192→8192: 3 · 3, 12 % faster), 192 at 16384×4096→4096 (25 · 22 rounds).
inline int split_tile_width(int n, int m) {
  const int sms = sm_count(), rows = ceil_div(n, kWgBM);
  const long wide = (long)ceil_div(rows * ceil_div(m, kSplitWide), sms) * (kSplitWide + 24);
  const long narrow = (long)ceil_div(rows * ceil_div(m, kSplitNarrow), sms) * (kSplitNarrow + 24);
  return narrow < wide ? kSplitNarrow : kSplitWide;
}

// 3xTF32: whether W's parts come from one pass over W at this call (w_parts_kernel, then the GEMM
// loads both parts: W read once, 2·M·K words written and read back) rather than from the split
// in shared memory, which every CTA of a column tile repeats on the same W tile, once a row tile.
// The pass wins where the row tiles are many: at 1024 rows (8 row tiles, 84/33) the split in
// shared memory costs no more than the parts from memory plus their pass; at 16 384 rows (128,
// 39) it costs 9 % of the GEMM (results/h100/NOTES.md). $FUSEDLIB_WGMMA_WSPLIT=smem or pass
// forces one (tests: both give the same bits); =swap the swapped GEMM (wg_swap), which has no W parts.
constexpr int kWPassRowTiles = 32;
inline bool wg_w_pass(int n) {
  const char* forced = std::getenv("FUSEDLIB_WGMMA_WSPLIT");
  if (forced && *forced) return std::strcmp(forced, "pass") == 0;
  return ceil_div(n, kWgBM) >= kWPassRowTiles;
}

// 3xTF32: whether the GEMM runs swapped (Zᵀ = W Xᵀ, X's parts from x_parts_kernel, 128 × 128 tiles:
// the kernel's SWAP) rather than with W split in shared memory. The swap splits the larger operand
// in registers and makes the smaller one's parts in a pass of N·K words: it pays where the batch is
// small beside out_features and the tiles fill the GPU. At 84's 1024 × 8192 → 8192 the fused stage's
// swapped GEMM takes 994 + 27 µs (the pass) against 1128 (results/h200/NOTES.md, run208). Not where
// W's parts come from their pass (wg_w_pass: many row tiles). $FUSEDLIB_WGMMA_WSPLIT=swap forces it
// (tests: any shape, split-K then off), =smem or =pass the unswapped kernel.
// The rule does not depend on the GPU at hand (kSwapMinTiles: two tiles an SM of the H100's 132).
constexpr int kSwapMinTiles = 264;
inline bool wg_swap(int n, int m) {
  const char* forced = std::getenv("FUSEDLIB_WGMMA_WSPLIT");
  if (forced && *forced) return std::strcmp(forced, "swap") == 0;
  return 4L * n <= m && (long)ceil_div(n, kSplitSwap) * ceil_div(m, kWgBM) >= kSwapMinTiles && !wg_w_pass(n);
}

// CTAs of a persistent launch: one an SM, at most one a unit (launch_wg: of tiles, or of merges).
// $FUSEDLIB_WGMMA_GRID=G caps it at G (tests: every grid size must give the same bits, as the
// schedule and the merge order do not depend on it; G ≥ tiles: one CTA a tile).
inline int persistent_grid(int tiles) {
  const char* cap = std::getenv("FUSEDLIB_WGMMA_GRID");
  const int limit = cap && std::atoi(cap) > 0 ? std::atoi(cap) : sm_count();
  return tiles < limit ? tiles : limit;
}

// The split-K plan of a wgmma GEMM (host): S = 1 where the tiles fill at least half the SMs;
// else as many splits as leave one CTA an SM, each of at least kMinSplitSteps K steps, at most
// kMaxSplits (epilogue.cuh; a 3xTF32 K step counts three: its three products; a 16-bit K step holds 64 of K).
// The swapped 3xTF32 GEMM (wg_swap) runs no split. At v0 (run89) the tf32 GEMM is
// fastest with 4 splits of 8 steps (18.9 µs; 21.4 with 8 of 4, worse with 16), 3xTF32 with 8.
// $FUSEDLIB_WGMMA_SPLITK=S forces S (tests; clamped to 1 … the K steps). A 3xTF32 split-K GEMM
// runs 128×168 tiles (wg_split_width: 128×192 leaves no registers for the split bookkeeping).
inline int wg_split_width(int n, int m, int splits) { return splits > 1 ? kSplitNarrow : split_tile_width(n, m); }
// The tf32 (and 16-bit) tile's width for an N×M output: 256 where those tiles fill at least a
// quarter of the SMs, else 64 (4 times the CTAs, each with a quarter of the columns: at v0 the
// wide tiles' 2 CTAs run 16 or 32 K steps each while 130 SMs idle, results/h200/NOTES.md run258).
// $FUSEDLIB_WGMMA_WIDTH=256 or 64 forces one (tests: both give the same bits: the statistics'
// partials and their merge order are by 128-row tiles and single columns, not by column tiles).
inline int wg_tile_width(int n, int m) {
  const char* forced = std::getenv("FUSEDLIB_WGMMA_WIDTH");
  if (forced && std::atoi(forced) == kWgNarrow) return kWgNarrow;
  if (forced && std::atoi(forced) == kWgWide) return kWgWide;
  return 4L * ceil_div(n, kWgBM) * ceil_div(m, kWgWide) >= sm_count() ? kWgWide : kWgNarrow;
}
inline SplitK wg_split_k(int precision, int n, int k, int m, int operand = OPERAND_FP32) {
  if (precision == TF32X3 && wg_swap(n, m)) return {1, ceil_div(m, kWgBM) * ceil_div(n, kSplitSwap), 0};
  const int bn = precision == TF32 ? wg_tile_width(n, m) : split_tile_width(n, m);
  const int KT = ceil_div(k, wg_step_k(operand)), tiles = ceil_div(n, kWgBM) * ceil_div(m, bn), work = (precision == TF32 ? 1 : 3) * KT;
  const char* forced = std::getenv("FUSEDLIB_WGMMA_SPLITK");
  int s = 1;
  if (forced && std::atoi(forced) > 0) s = std::atoi(forced);
  else if (2 * tiles <= sm_count()) s = std::min(std::min(sm_count() / tiles, work / kMinSplitSteps), kMaxSplits);
  s = std::max(1, std::min(s, KT));
  if (precision == TF32 || wg_split_width(n, m, s) == bn) return {s, tiles, kWgBM * bn};
  return {s, ceil_div(n, kWgBM) * ceil_div(m, kSplitNarrow), kWgBM * kSplitNarrow};
}

// One launch of the width-BN kernel: its split-K instantiation where p.splits > 1 (the S = 1
// one compiles without the split bookkeeping), a CTA a unit (tf32: persistent, one an SM).
template <int BN, bool PROMOTE, class Epi, bool SPLITK, int OP, bool SWAP = false>
const char* launch_wg(const Problem& p, float* out, const CUtensorMap& a, const CUtensorMap& b0,
                      const CUtensorMap& row0, const CUtensorMap& b1, cudaStream_t st) {
  auto kernel = wgmma_gemm_kernel<BN, PROMOTE, Epi, SPLITK, OP, SWAP>;
  FL_OPT_IN_SMEM(kernel, (WgTile<BN, PROMOTE>::kSmem));
  const int units = ceil_div(SWAP ? p.m : p.n, kWgBM) * ceil_div(SWAP ? p.n : p.m, BN) * p.splits;
  // persistent: at least as many CTAs as merge units where the SMs allow, so that with few units of
  // tiles the merges all run side by side (not a CTA for every unit of either kind: run264, v0's 8
  // and 8 on 128 × 256 tiles in tf32, lost 2–3 µs that way)
  const bool merging = kMergeUnits && Epi::kMerge && wg_persistent(PROMOTE) && ceil_div(p.n, kWgBM) > 1;
  const int merges = merging ? ceil_div(p.m, 64) : 0;
  kernel<<<wg_persistent(PROMOTE) ? persistent_grid(std::max(units, merges)) : units, kWgThreads,
           WgTile<BN, PROMOTE>::kSmem, st>>>(p, out, a, b0, row0, b1);
  FL_CHECK_LAUNCH();
  return nullptr;
}
template <int BN, bool PROMOTE, class Epi, int OP = OPERAND_FP32>
const char* launch_wg(const Problem& p, float* out, const CUtensorMap& a, const CUtensorMap& b0,
                      const CUtensorMap& row0, const CUtensorMap& b1, cudaStream_t st) {
  if constexpr (BN == kSplitWide) return launch_wg<BN, PROMOTE, Epi, false, OP>(p, out, a, b0, row0, b1, st);
  else
    return p.splits > 1 ? launch_wg<BN, PROMOTE, Epi, true, OP>(p, out, a, b0, row0, b1, st)
                        : launch_wg<BN, PROMOTE, Epi, false, OP>(p, out, a, b0, row0, b1, st);
}

// The tf32 kernel of width BN for the operands' type (z: a 16-bit Z's map, in map_b1's slot).
template <int BN, class Epi>
const char* launch_wg_tf32(const Problem& p, float* out, const CUtensorMap& a, const CUtensorMap& b0,
                           const CUtensorMap& z, cudaStream_t st) {
  switch (p.operand) {
    case OPERAND_BF16: return launch_wg<BN, false, Epi, OPERAND_BF16>(p, out, a, b0, a, z, st);
    case OPERAND_FP16: return launch_wg<BN, false, Epi, OPERAND_FP16>(p, out, a, b0, a, z, st);
    default: return launch_wg<BN, false, Epi>(p, out, a, b0, a, b0, st);
  }
}

template <class Epi>
const char* launch_wgmma_gemm(const Problem& p, const float* x, const float* w, float* out, cudaStream_t st) {
  if (p.splits > 1 && !(p.splitk && p.splitk_counters)) return "the split-K wgmma GEMM needs its workspace";
  if (!wgmma_applicable(p, x, w))
    return p.operand == OPERAND_FP32 ? "the wgmma GEMM needs in_features % 4 == 0, 16-byte aligned x and weight and a "
                                       "tensor-core precision"
                                     : "the wgmma GEMM needs in_features % 8 == 0 and 16-byte aligned x and weight "
                                       "in bf16/fp16, at precision tf32";
  CUtensorMap a, b0, row0, b1;
  const char* err;
  if ((err = encode_map(&a, x, p.n, p.k, kWgBM, CU_TENSOR_MAP_SWIZZLE_128B, p.operand))) return err;
  if (p.precision == TF32) {
    if (p.z0 || p.parts) return "the tf32 wgmma GEMM reads X and W as they are (TMA): z0 and parts must be null";
    const int bn = wg_tile_width(p.n, p.m);  // (the split-K plan, p.splits, took the same width)
    if ((err = encode_map(&b0, w, p.m, p.k, bn, CU_TENSOR_MAP_SWIZZLE_128B, p.operand))) return err;
    // 16-bit operands: a 16-bit Z' goes out by TMA in 64 × 64 boxes (wg_z_tma), its map in map_b1's slot
    CUtensorMap z = b0;
    if (wg_z_tma(p) && (err = encode_map(&z, p.z, p.n, p.m, 64, CU_TENSOR_MAP_SWIZZLE_128B, p.operand))) return err;
    return bn == kWgWide ? launch_wg_tf32<kWgWide, Epi>(p, out, a, b0, z, st)
                         : launch_wg_tf32<kWgNarrow, Epi>(p, out, a, b0, z, st);
  }
  // the first-row shift's x₀ (p.x0: X's row 0, or an external row), a 1×K map (without the shift, unused)
  if (p.z0 && (uintptr_t)p.x0 % 16 != 0) return "the wgmma GEMM needs a 16-byte aligned shift row x0 (TMA)";
  if ((err = encode_map(&row0, p.z0 ? p.x0 : x, 1, p.k, 1, CU_TENSOR_MAP_SWIZZLE_NONE))) return err;
  if (wg_swap(p.n, p.m)) {  // Zᵀ = W Xᵀ: W split by the consumers, X's parts by the pass, at this call
    if (!p.parts || p.splits > 1) return "the swapped 3xTF32 GEMM needs X's parts (p.parts, 2·N·K floats), no split-K";
    const size_t nk = (size_t)p.n * p.k;
    x_parts_kernel<<<sm_count() * 8, 256, 0, st>>>(p, reinterpret_cast<uint4*>(p.parts));
    FL_CHECK_LAUNCH();
    if ((err = encode_map(&a, w, p.m, p.k, kWgBM)) || (err = encode_map(&b0, p.parts, p.n, p.k, kSplitSwap)) ||
        (err = encode_map(&b1, p.parts + nk, p.n, p.k, kSplitSwap)))
      return err;
    return launch_wg<kSplitSwap, true, Epi, false, OPERAND_FP32, true>(p, out, a, b0, row0, b1, st);
  }
  const int bn = wg_split_width(p.n, p.m, p.splits);
  if (p.parts) {  // W's parts by the pass, at this call; the GEMM loads both
    const size_t mk = (size_t)p.m * p.k;
    w_parts_kernel<<<sm_count() * 8, 256, 0, st>>>(reinterpret_cast<const uint4*>(w),
                                                    reinterpret_cast<uint4*>(p.parts), mk / 4);
    FL_CHECK_LAUNCH();
    if ((err = encode_map(&b0, p.parts, p.m, p.k, bn)) || (err = encode_map(&b1, p.parts + mk, p.m, p.k, bn)))
      return err;
  } else {  // W as it is; the producer's warps split each tile in shared memory
    if ((err = encode_map(&b0, w, p.m, p.k, bn))) return err;
    b1 = b0;
  }
  return bn == kSplitWide ? launch_wg<kSplitWide, true, Epi>(p, out, a, b0, row0, b1, st)
                          : launch_wg<kSplitNarrow, true, Epi>(p, out, a, b0, row0, b1, st);
}

}  // namespace fl
