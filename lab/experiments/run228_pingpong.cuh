// run228 (a prototype for issue 36; lab/experiments/run228-pingpong.py copies it beside the kernels):
// the ping-pong schedule of the tf32 / 16-bit persistent GEMM (CUTLASS's
// KernelTmaWarpSpecializedPingpong, written for this engine). Each consumer warpgroup takes whole
// 128 × 128 tiles of its own (two m64n128 wgmmas a K slice: rows 0–63 and 64–127, 64 + 64
// accumulators a thread), the two in turn on the tensor cores: warpgroup w starts a tile's mainloop
// when the other's mainloop has ended (order[w]), so one's epilogue (statistics, stores) runs under
// the other's mainloop. Tiles of 128 rows, so the statistics' partials and their merge are the
// cooperative kernel's (the sums inside a tile in another order). Epilogues without a merge
// (BiasStore, AffineStore, ColumnStats); no split-K, no first-row shift (tf32 and 16-bit have none).
#pragma once

namespace fl {

constexpr int kPpBN = 128, kPpStages = 6;
struct PpTile {
  static constexpr uint32_t kABytes = kWgBM * 128, kBBytes = kPpBN * 128;  // 128 rows of 128 bytes each
  static constexpr uint32_t kStageBytes = kABytes + kBBytes;
  static constexpr size_t kEpilogueOffset = (size_t)kPpStages * kStageBytes;
  static constexpr int kEpiFloats = 11 * kPpBN + 32;  // a warpgroup's (fragment_smem_floats<128>)
  static constexpr size_t kBarrierOffset = kEpilogueOffset + 2 * kEpiFloats * sizeof(float);
  static constexpr size_t kSmem = 1024 + kBarrierOffset + (2 * kPpStages + 2) * sizeof(uint64_t) + 16;
  static_assert(kBarrierOffset % 8 == 0 && kSmem <= 232448, "aligned mbarriers; within sm_90's 227 KB");
};

#if FL_WGMMA_ENABLED
#define FL_WGMMA_SS_N128(NAME, INSTR, IMM)                                                                  \
  __device__ __forceinline__ void NAME(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" INSTR " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1" IMM ";\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                                                   \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));                                              \
  }
FL_WGMMA_SS_N128(pp_wgmma_tf32, "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32", "")
FL_WGMMA_SS_N128(pp_wgmma_bf16, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", ", 0, 0")
FL_WGMMA_SS_N128(pp_wgmma_f16, "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", ", 0, 0")
#undef FL_WGMMA_SS_N128
template <int OP>
__device__ __forceinline__ void pp_wgmma_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  if constexpr (OP == OPERAND_BF16) pp_wgmma_bf16(d, desc_a, desc_b, accumulate);
  else if constexpr (OP == OPERAND_FP16) pp_wgmma_f16(d, desc_a, desc_b, accumulate);
  else pp_wgmma_tf32(d, desc_a, desc_b, accumulate);
}
#endif

// Named barriers: 3 + w, the hand-off of a unit between the producer warp and warpgroup w (160
// threads); 5 + w, warpgroup w's epilogue (128).
__device__ __forceinline__ void pp_handoff(int w) { asm volatile("bar.sync %0, 160;\n" ::"r"(3 + w) : "memory"); }
__device__ __forceinline__ void pp_epi_sync(int w) { asm volatile("bar.sync %0, 128;\n" ::"r"(5 + w) : "memory"); }

// The scheduler: as next_unit, but each CTA fetches twice past the units (one end for each warpgroup).
__device__ __forceinline__ int pp_next_unit(const Problem& p, int units) {
  const int u = (int)atomicAdd(p.tile_counter, 1u);
  if (u == units + 2 * (int)gridDim.x - 1) *p.tile_counter = 0;
  return u;
}

// A warpgroup's epilogue of its 128 × 128 tile: d0 holds rows 16·warp + g and + 8, d1 the same
// + 64, columns 8j + 2t and + 1 in d[4j … 4j + 3] (g = lane / 4, t = lane % 4). As
// epilogue_from_fragments (the stores, then the statistics: Σz → mean_t, Σ(z − mean_t)² → M2_t),
// over 4 warps of two row halves.
template <class Epi>
__device__ __forceinline__ void pp_epilogue(const Problem& p, float (&d0)[64], float (&d1)[64], float* smem,
                                            float* out, int m0, int n0, int tid, int w) {
  constexpr int BN = kPpBN, BM = 128, NV = BN / 4;
  float* coef = smem;          // [2][BN]
  float* red = smem + 2 * BN;  // [4][BN]
  float* mean = red + 8 * BN;  // [BN]
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3, r = 16 * warp + g;
  const int rows = min(BM, p.n - m0), cols = min(BN, p.m - n0);
  pp_epi_sync(w);  // the previous tile's reads of this shared memory are done
  if (Epi::kStore != Store::kPlain) {
    for (int c = tid; c < BN; c += 128) {
      float a = 1.f, b = 0.f;
      if (c < cols) {
        if (Epi::kStore == Store::kBias) {
          b = p.bias[n0 + c];
        } else {
          const Affine ac = eval_affine(p, n0 + c, true);
          a = ac.a;
          b = ac.c;
        }
      }
      coef[c] = a;
      coef[BN + c] = b;
    }
    pp_epi_sync(w);
  }
  const bool pairs = (p.m & 1) == 0 && ((uintptr_t)out & 7) == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float(&d)[64] = h ? d1 : d0;
    const int rh = r + 64 * h;
    float* row0 = out + (size_t)(m0 + rh) * p.m + n0;
    float* row1 = row0 + (size_t)8 * p.m;
    const bool ok0 = rh < rows, ok1 = rh + 8 < rows;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int c = 8 * j + 2 * t;
      float v0 = d[4 * j], v1 = d[4 * j + 1], v2 = d[4 * j + 2], v3 = d[4 * j + 3];
      if (Epi::kStore == Store::kBias) {
        v0 += coef[BN + c], v1 += coef[BN + c + 1], v2 += coef[BN + c], v3 += coef[BN + c + 1];
      } else if (Epi::kStore == Store::kAffine) {
        v0 = coef[c] * v0 + coef[BN + c], v1 = coef[c + 1] * v1 + coef[BN + c + 1];
        v2 = coef[c] * v2 + coef[BN + c], v3 = coef[c + 1] * v3 + coef[BN + c + 1];
      }
      if (ok0) store_pair(row0 + c, v0, v1, c, cols, pairs);
      if (ok1) store_pair(row1 + c, v2, v3, c, cols, pairs);
    }
  }
  if constexpr (Epi::kStats) {
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
      float s[NV];
#pragma unroll
      for (int q = 0; q < NV; ++q) {  // column 8(q / 2) + 2t + q % 2; rows r, r + 8, r + 64, r + 72
        const int i0 = 4 * (q / 2) + q % 2, i1 = i0 + 2;
        if (pass == 0) {
          s[q] = (d0[i0] + d0[i1]) + (d1[i0] + d1[i1]);  // rows past N hold zeros
        } else {
          const float mu = mean[8 * (q / 2) + 2 * t + q % 2];
          const float e0 = d0[i0] - mu, e1 = d0[i1] - mu, e2 = d1[i0] - mu, e3 = d1[i1] - mu;
          s[q] = ((r < rows ? e0 * e0 : 0.f) + (r + 8 < rows ? e1 * e1 : 0.f)) +
                 ((r + 64 < rows ? e2 * e2 : 0.f) + (r + 72 < rows ? e3 * e3 : 0.f));
        }
      }
      lane_butterfly(s, lane);  // s[i] of lane (g, t): the warp's sum for q = i + 4g
#pragma unroll
      for (int i = 0; i < NV / 8; ++i) {
        const int q = i + (NV / 8) * g;
        red[warp * BN + 8 * (q / 2) + 2 * t + q % 2] = s[i];
      }
      pp_epi_sync(w);
      const float total = (red[tid] + red[BN + tid]) + (red[2 * BN + tid] + red[3 * BN + tid]);
      if (pass == 0) {
        mean[tid] = total / (float)rows;
        pp_epi_sync(w);
      } else if (tid < cols) {
        const int tile = m0 / BM;
        p.part[(size_t)(2 * tile) * p.m + n0 + tid] = mean[tid];
        p.part[(size_t)(2 * tile + 1) * p.m + n0 + tid] = total;
      }
    }
  }
}

template <class Epi, int OP>
__global__ void __launch_bounds__(kWgThreads, 1)
wgmma_pingpong_kernel(const Problem p, float* out, const __grid_constant__ CUtensorMap map_a,
                      const __grid_constant__ CUtensorMap map_b) {
#if FL_WGMMA_ENABLED
  using T = PpTile;
  constexpr int ST = kPpStages, BN = kPpBN;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kBarrierOffset);
  uint64_t* empty = full + ST;
  uint64_t* order = empty + ST;  // [2]: warpgroup w's turn on the tensor cores
  int* tile_slot = reinterpret_cast<int*>(order + 2);  // [2]: the unit handed to warpgroup w
  const int row_tiles = ceil_div(p.n, kWgBM), col_tiles = ceil_div(p.m, BN), units = row_tiles * col_tiles;
  const int KT = ceil_div(p.k, wg_step_k(OP));
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < ST; ++s) mbar_init(full + s, 1), mbar_init(empty + s, 1);
    mbar_init(order, 1), mbar_init(order + 1, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();
  if (wg == 0) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x < 32) {
      const bool issuer = threadIdx.x == 0;
      int it = 0;
      bool ended = false;
      for (int f = 0;; ++f) {  // unit f goes to warpgroup f % 2
        int v = 0;
        if (issuer) tile_slot[f % 2] = v = pp_next_unit(p, units);
        v = __shfl_sync(0xffffffffu, v, 0);
        __syncwarp();
        pp_handoff(f % 2);
        if (v >= units) {
          if (ended) break;  // both warpgroups told
          ended = true;
          continue;
        }
        int m0, n0;
        wg_tile_origin(v, row_tiles, col_tiles, BN, m0, n0);
        if (issuer)
          for (int kt = 0; kt < KT; ++kt, ++it) {
            const int s = it % ST;
            if (it >= ST) mbar_wait(empty + s, ((it / ST) - 1) & 1);
            uint8_t* st = smem + s * T::kStageBytes;
            mbar_expect_tx(full + s, T::kStageBytes);
            tma_load_2d(st, &map_a, full + s, kt * wg_step_k(OP), m0);
            tma_load_2d(st + T::kABytes, &map_b, full + s, kt * wg_step_k(OP), n0);
          }
        it = __shfl_sync(0xffffffffu, it, 0);
      }
    }
  } else {  // consumers: warpgroup w = 0, 1 takes units w, w + 2, …
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int w = wg - 1, tid = threadIdx.x % 128;
    const bool leader = tid == 0;
    float* epi = reinterpret_cast<float*>(smem + T::kEpilogueOffset) + w * T::kEpiFloats;
    for (int i = 0;; ++i) {
      const int f = 2 * i + w;
      pp_handoff(w);
      const int u = tile_slot[w];
      if (u >= units) break;
      if (f > 0) mbar_wait(order + w, w == 1 ? (i & 1) : ((i - 1) & 1));  // the other's mainloop of unit f − 1 ended
      float d0[64], d1[64];
#pragma unroll
      for (int q = 0; q < 64; ++q) d0[q] = 0.f, d1[q] = 0.f;
      int it = f * KT;  // the producer's step of this unit's first stage (every unit has KT)
      for (int kt = 0; kt < KT; ++kt, ++it) {
        const int s = it % ST;
        mbar_wait(full + s, (it / ST) & 1);
        const uint8_t* a = smem + s * T::kStageBytes;
        const uint8_t* b = a + T::kABytes;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          pp_wgmma_ss<OP>(d0, smem_desc_sw128(a + kk * 32), smem_desc_sw128(b + kk * 32), !(kt == 0 && kk == 0));
          pp_wgmma_ss<OP>(d1, smem_desc_sw128(a + 64 * 128 + kk * 32), smem_desc_sw128(b + kk * 32), !(kt == 0 && kk == 0));
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (leader && kt > 0) mbar_arrive(empty + (it - 1) % ST);
      }
      wgmma_wait<0>();
#pragma unroll
      for (int q = 0; q < 64; ++q) asm volatile("" : "+f"(d0[q]), "+f"(d1[q])::"memory");
      if (leader && KT > 0) mbar_arrive(empty + (it - 1) % ST);
      if (leader) mbar_arrive(order + (1 - w));  // the other warpgroup's turn
      int m0, n0;
      wg_tile_origin(u, row_tiles, col_tiles, BN, m0, n0);
      pp_epilogue<Epi>(p, d0, d1, epi, out, m0, n0, tid, w);
    }
  }
#endif
}

// The host's choice: $FUSEDLIB_PINGPONG=1, an epilogue without a merge, no split-K, no shift.
template <class Epi>
inline bool pp_wanted(const Problem& p) {
  const char* e = std::getenv("FUSEDLIB_PINGPONG");
  return e && e[0] == '1' && !Epi::kMerge && p.splits <= 1 && !p.z0 && p.precision == TF32;
}
template <class Epi, int OP>
const char* launch_pp(const Problem& p, float* out, const CUtensorMap& a, const CUtensorMap& b, cudaStream_t st) {
  auto kernel = wgmma_pingpong_kernel<Epi, OP>;
  FL_OPT_IN_SMEM(kernel, PpTile::kSmem);
  const int tiles = ceil_div(p.n, kWgBM) * ceil_div(p.m, kPpBN);
  kernel<<<persistent_grid(tiles), kWgThreads, PpTile::kSmem, st>>>(p, out, a, b);
  FL_CHECK_LAUNCH();
  return nullptr;
}

}  // namespace fl
