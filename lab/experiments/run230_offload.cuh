// run230 (a prototype for issue 36; lab/experiments/run230-offload.py copies it beside the kernels):
// the 16-bit GEMM's epilogue handed to the producer warpgroup's idle warps through shared memory.
// The consumers (two warpgroups, 64 rows each of a 128 × 256 tile, the cooperative mainloop) end a
// tile by writing it, rounded to the module's dtype, to a 64 KB staging buffer (four boxes of 128
// rows × 64 columns, 128-byte swizzle: TMA's layout), and go on to their next tile; warps 1–3 of the
// producer warpgroup (96 threads, 56 registers: the consumers get 224) issue the four TMA stores of Z′, take the tile's
// column statistics from the staged values (Σz → mean_t, then Σ(z − mean_t)² → M2_t: the sums
// stage's partials, of the values the row pass normalises), and free the buffer once the stores
// have read it. The ring has 3 stages of 48 KB (144 + 64 KB). The sums stage's finalize and the row
// pass of Z′ in 16 bits follow (run214's). Train mode, one process, no split-K, no shift (16-bit
// operands have none). Knobs (run227's, read by the host at each call): $FUSEDLIB_COLGROUP=G, the
// raster by groups of G column tiles; $FUSEDLIB_SIDE=1, a side stream by the epilogue warps.
#pragma once

namespace fl {

constexpr int kOffStages = 3, kOffBN = 256;
struct OffTile {
  static constexpr uint32_t kABytes = kWgBM * 128, kBBytes = kOffBN * 128;  // rows of 128 bytes (64 elements)
  static constexpr uint32_t kStageBytes = kABytes + kBBytes;
  static constexpr size_t kStagingOffset = (size_t)kOffStages * kStageBytes;
  static constexpr uint32_t kBoxBytes = kWgBM * 128;  // 128 rows × 64 16-bit columns
  static constexpr size_t kBarrierOffset = kStagingOffset + 4 * kBoxBytes;
  static constexpr size_t kSmem = 1024 + kBarrierOffset + (2 * kOffStages + 2) * sizeof(uint64_t) + 16 + 16;
  static_assert(kBarrierOffset % 8 == 0 && kSmem <= 232448, "aligned mbarriers; within sm_90's 227 KB");
};

// Byte offset of 16-bit element (row, col) of the staged tile (col even: a 4-byte pair): box col / 64,
// its 16-byte chunk (col % 64) / 8 at chunk ((col % 64) / 8) ^ (row % 8) of the row (the 128-byte swizzle).
__device__ __forceinline__ uint32_t staged_offset(int row, int col) {
  const int cc = col & 63;
  return (uint32_t)((col >> 6) * OffTile::kBoxBytes + row * 128 + ((((cc >> 3) ^ row) & 7) << 4) + (cc & 7) * 2);
}

template <int OP>
__device__ __forceinline__ uint32_t off_pack2(float a, float b) {
  const typename Element<OP>::T lo = narrow<OP>(a), hi = narrow<OP>(b);
  return (uint32_t)*reinterpret_cast<const uint16_t*>(&lo) | ((uint32_t)*reinterpret_cast<const uint16_t*>(&hi) << 16);
}
template <int OP>
__device__ __forceinline__ float2 off_unpack2(uint32_t v) {
  if constexpr (OP == OPERAND_BF16) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
  } else {
    const uint16_t lo = (uint16_t)v, hi = (uint16_t)(v >> 16);
    return make_float2(widen(*reinterpret_cast<const __half*>(&lo)), widen(*reinterpret_cast<const __half*>(&hi)));
  }
}

#if FL_WGMMA_ENABLED
__device__ __forceinline__ void sts_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t lds_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
// A box of the staged tile to Z′ (global), by TMA; completion tracked by bulk groups.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
               ::"l"((uint64_t)map), "r"(smem_u32(src)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// Named barrier 4: the 96 epilogue warps.
__device__ __forceinline__ void workers_sync() { asm volatile("bar.sync 4, 96;\n" ::: "memory"); }
#endif

// The knob FUSEDLIB_SIDE (run227's side stream, here a slice a tile): the epilogue warps stream slice u
// of the side buffer (N·M 16-bit elements in `units` slices; read, v·1.5 + 0.25, write) after tile u's
// epilogue, as a row pass over finished column groups would.
template <int OP>
__device__ __forceinline__ void side_slice(const Problem& p, int u, int units, int wt) {
  constexpr int TH = 96, IN = 2;  // (32-bit offsets, two 16-byte loads in flight: within 56 registers)
  const long long quads = p.side_n / 8, per = (quads + units - 1) / units, q0 = (long long)u * per;
  const int n = (int)max(0LL, min(quads, q0 + per) - q0);
  const uint4* src = reinterpret_cast<const uint4*>(p.side_src) + q0;
  uint4* dst = reinterpret_cast<uint4*>(p.side_dst) + q0;
  const auto f = [](uint32_t w) {
    const float2 e = off_unpack2<OP>(w);
    return off_pack2<OP>(e.x * 1.5f + 0.25f, e.y * 1.5f + 0.25f);
  };
  for (int i = wt; i < n; i += IN * TH) {
    uint4 v[IN];
#pragma unroll
    for (int k = 0; k < IN; ++k)
      if (i + k * TH < n) v[k] = __ldcs(src + i + k * TH);
#pragma unroll
    for (int k = 0; k < IN; ++k)
      if (i + k * TH < n) __stcs(dst + i + k * TH, make_uint4(f(v[k].x), f(v[k].y), f(v[k].z), f(v[k].w)));
  }
}

template <int OP>
__global__ void __launch_bounds__(kWgThreads, 1)
wgmma_offload_kernel(const Problem p, const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     const __grid_constant__ CUtensorMap map_z) {
#if FL_WGMMA_ENABLED
  using T = OffTile;
  constexpr int ST = kOffStages, BN = kOffBN, NACC = BN / 2, BK = wg_step_k(OP);
  static_assert(OP != OPERAND_FP32, "a 16-bit Z′");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* staging = smem + T::kStagingOffset;
  const uint32_t staging_u32 = smem_u32(staging);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kBarrierOffset);
  uint64_t* empty = full + ST;
  uint64_t* staged = empty + ST;  // every consumer thread has written the tile (256 arrivals)
  uint64_t* freed = staged + 1;   // the epilogue warps are done with the staged tile (1)
  int* tile_slot = reinterpret_cast<int*>(freed + 1);  // [2], as the cooperative kernel's
  volatile int* staged_unit = tile_slot + 2;           // the staged tile's unit, or −1: no more
  const int row_tiles = ceil_div(p.n, kWgBM), col_tiles = ceil_div(p.m, BN), units = row_tiles * col_tiles;
  const int KT = ceil_div(p.k, BK);
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < ST; ++s) mbar_init(full + s, 1), mbar_init(empty + s, 2);
    mbar_init(staged, 256), mbar_init(freed, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    if (threadIdx.x < 32) {  // the producer warp, as the cooperative kernel's (no merge units, no split-K)
      const bool issuer = threadIdx.x == 0;
      int it = 0;
      auto load_step = [&](int kt, int m0, int n0) {
        const int s = it % ST;
        if (it >= ST) mbar_wait(empty + s, ((it / ST) - 1) & 1);
        uint8_t* st = smem + s * T::kStageBytes;
        mbar_expect_tx(full + s, T::kStageBytes);
        tma_load_2d(st, &map_a, full + s, kt * BK, m0);
        tma_load_2d(st + T::kABytes, &map_b, full + s, kt * BK, n0);
        ++it;
      };
      auto claim = [&](int f) {
        int v = 0;
        if (issuer) tile_slot[f % 2] = v = next_unit(p, units);
        return __shfl_sync(0xffffffffu, v, 0);
      };
      int u = claim(0);
      for (int f = 0;; ++f) {
        const bool tile = u < units;
        int m0 = 0, n0 = 0, kt = 0;
        if (tile) wg_tile_origin_g(p.colgroup, u, row_tiles, col_tiles, BN, m0, n0);
        if (issuer && tile)
          for (const int first = min(KT, ST); kt < first; ++kt) load_step(kt, m0, n0);
        __syncwarp();
        handoff_sync();
        if (!tile) break;
        if (issuer)
          for (; kt < KT; ++kt) load_step(kt, m0, n0);
        u = claim(f + 1);
      }
    } else {  // warps 1–3: each staged tile's stores and statistics
      const int wt = threadIdx.x - 32;
      for (int f = 0;; ++f) {
        mbar_wait(staged, f & 1);
        const int u = *staged_unit;
        if (u < 0) break;
        int m0, n0;
        wg_tile_origin_g(p.colgroup, u, row_tiles, col_tiles, BN, m0, n0);
        if (wt == 0) {
#pragma unroll
          for (int b = 0; b < 4; ++b) tma_store_2d(&map_z, staging + b * T::kBoxBytes, n0 + 64 * b, m0);
          bulk_commit();
        }
        const int rows = min(kWgBM, p.n - m0), cols = min(BN, p.m - n0), tile = m0 / kWgBM;
        for (int cp = wt; cp < BN / 2; cp += 96) {  // columns 2cp, 2cp + 1 (the staged values, widened exactly)
          const int col = 2 * cp;
          float s0 = 0.f, s1 = 0.f;
#pragma unroll 8
          for (int r = 0; r < kWgBM; ++r) {  // rows past N hold zeros
            const float2 v = off_unpack2<OP>(lds_u32(staging_u32 + staged_offset(r, col)));
            s0 += v.x, s1 += v.y;
          }
          const float mu0 = s0 / (float)rows, mu1 = s1 / (float)rows;
          float q0 = 0.f, q1 = 0.f;
#pragma unroll 8
          for (int r = 0; r < kWgBM; ++r) {
            const float2 v = off_unpack2<OP>(lds_u32(staging_u32 + staged_offset(r, col)));
            const float e0 = v.x - mu0, e1 = v.y - mu1;
            if (r < rows) q0 += e0 * e0, q1 += e1 * e1;
          }
          float* mean_t = p.part + (size_t)(2 * tile) * p.m + n0;
          float* m2_t = p.part + (size_t)(2 * tile + 1) * p.m + n0;
          if (col < cols) mean_t[col] = mu0, m2_t[col] = q0;
          if (col + 1 < cols) mean_t[col + 1] = mu1, m2_t[col + 1] = q1;
        }
        workers_sync();  // every worker's reads of the staged tile are done
        if (wt == 0) {
          bulk_wait_read_all();  // and the stores' reads
          mbar_arrive(freed);
        }
        if (p.side_n) side_slice<OP>(p, u, units, wt);  // run230's knob: a row pass's traffic, a slice a tile
      }
      if (wt == 0) bulk_wait_all();
    }
  } else {  // consumers: warpgroup 1 → rows 0..63, warpgroup 2 → rows 64..127
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
    const int cw = wg - 1, tid = threadIdx.x - 128, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const bool leader = threadIdx.x % 128 == 0;
    int it = 0, staged_tiles = 0;
    for (int f = 0;; ++f) {
      handoff_sync();
      const int u = tile_slot[f % 2];
      if (u >= units) {  // tell the epilogue warps
        if (staged_tiles > 0) mbar_wait(freed, (staged_tiles - 1) & 1);
        if (tid == 0) *staged_unit = -1;
        mbar_arrive(staged);
        break;
      }
      float d[NACC];
#pragma unroll
      for (int i = 0; i < NACC; ++i) d[i] = 0.f;
      bool prev_released = true;
      for (int kt = 0; kt < KT; ++kt, ++it) {
        const int s = it % ST;
        mbar_wait(full + s, (it / ST) & 1);
        const uint8_t* a = smem + s * T::kStageBytes + cw * 64 * 128;
        const uint8_t* b = smem + s * T::kStageBytes + T::kABytes;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          wgmma_ss<OP>(d, smem_desc_sw128(a + kk * 32), smem_desc_sw128(b + kk * 32), !(kt == 0 && kk == 0));
        wgmma_commit();
        wgmma_wait<1>();
        if (leader && !prev_released) mbar_arrive(empty + (it - 1) % ST);
        prev_released = false;
      }
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < NACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
      if (leader && !prev_released) mbar_arrive(empty + (it - 1) % ST);
      // the tile, rounded to the dtype, to the staging buffer (once the epilogue warps freed it)
      if (staged_tiles > 0) mbar_wait(freed, (staged_tiles - 1) & 1);
      if (tid == 0) *staged_unit = u;
      const int r = 64 * cw + 16 * (warp % 4) + g;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int c = 8 * j + 2 * t;
        sts_u32(staging_u32 + staged_offset(r, c), off_pack2<OP>(d[4 * j], d[4 * j + 1]));
        sts_u32(staging_u32 + staged_offset(r + 8, c), off_pack2<OP>(d[4 * j + 2], d[4 * j + 3]));
      }
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the writes, before TMA reads them
      mbar_arrive(staged);
      ++staged_tiles;
    }
  }
#endif
}

// The sums stage's finalize (03_sums.cu sums_finalize_kernel), for the fused stage's copy.
__global__ void __launch_bounds__(256) offload_finalize_kernel(const Problem p, int tile_rows) {
  __shared__ float smem[3 * 256];
  const int j0 = blockIdx.x * 64;
  merge_columns(p, smem, j0, min(64, p.m - j0), tile_rows, threadIdx.x);
}

template <int OP>
inline const char* launch_offload(const Problem& p, cudaStream_t st) {
  CUtensorMap a, b, z;
  const char* err;
  if ((err = encode_map(&a, p.x, p.n, p.k, kWgBM, CU_TENSOR_MAP_SWIZZLE_128B, OP)) ||
      (err = encode_map(&b, p.w, p.m, p.k, kOffBN, CU_TENSOR_MAP_SWIZZLE_128B, OP)) ||
      (err = encode_map(&z, p.z, p.n, p.m, kWgBM, CU_TENSOR_MAP_SWIZZLE_128B, OP)))
    return err;
  auto kernel = wgmma_offload_kernel<OP>;
  FL_OPT_IN_SMEM(kernel, OffTile::kSmem);
  const int units = ceil_div(p.n, kWgBM) * ceil_div(p.m, kOffBN);
  kernel<<<persistent_grid(units), kWgThreads, OffTile::kSmem, st>>>(p, a, b, z);
  FL_CHECK_LAUNCH();
  return nullptr;
}

}  // namespace fl
