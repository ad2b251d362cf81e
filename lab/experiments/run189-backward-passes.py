"""run189: the fused train backward's three passes against variants (results/h200/NOTES.md).

The CUDA program below (SOURCE) is written to build/run189/run189.cu, compiled with nvcc for
sm_90a against the tree's kernels (-I fusedlib/kernels: it includes backward.cu; the tree with
run188-merge.patch applied) and run: python lab/experiments/run189-backward-passes.py [CSV]
(the binary, build/run189/run189, stays for Nsight Compute). Kept as a string, not a .cu file,
so that the repository's kernel sources stay fusedlib/kernels' alone (the GPU records' hashes).
Since run192 backward.cu holds three of the variants (row terms vec, float32 in the 16-bit
chunks' order; partials fence=writers at the kernel's own launch bounds; 16-bit dZ' cols=2 as
backward_dz16_kernel, with the kernel's fma order): its "as is" rows are those kernels, and
results/h200/logs/run189.log the kernels before them.
"""
import subprocess
import sys
from pathlib import Path

SOURCE = r'''// run189 (one H200 or H100; results/h200/NOTES.md): where the fused train backward's three passes
// lose against the memory's rate (run188's bf16 step at 84: row terms 32 MB in 18.5 µs, partials
// 64 MB in 49 µs, dZ' 80 MB in 28 µs, where the H200 streams about 4 TB/s), and what each change
// to them gains. Stand-alone: the backward's kernels as they are (backward.cu, included) against
// variants written here, on random 84 and 33 problems at N × M, bf16 and float32 dY and Y (Z in
// float32), one launch each after a 128 MiB L2 flush, median of REPS; the variants' outputs
// compared with the kernels' bit for bit (a variant that changes the sums' order reports its
// largest relative difference instead).
//   partials  fence=writers   only warp 0 (the 32 threads that wrote the tile's partials) fences,
//                             counts and merges; the other warps return after the reductions
//             4/SM, 3/SM      as many blocks an SM asked of ptxas (the kernel as it is asks 2 for
//                             16 bits; at 33 it takes 92 registers, so 2 blocks an SM run)
//             cols=2          two adjacent columns a thread, 64 a block, vector loads (float2,
//                             bf16x2), every column's sums in the same order
//             rows=256        256-row statistics tiles (half the tiles, fences and partials; the
//                             merge's order changes: algebra.BACKWARD_TILE_ROWS would follow)
//   row terms vec             16-byte loads, 4 a thread in flight (the sum's order changes)
//   dZ'       cols=2          (16-bit) two adjacent columns a thread, 64-column tiles, 4-byte stores
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backward.cu"

using namespace fl;

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e = (x);                                                                   \
    if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } \
  } while (0)

// (load2: two adjacent elements of type OP at element index q, q even, widened: backward.cu's)

// backward_partials_kernel with ROWS-row tiles, CPT adjacent columns a thread, with WARP0_TAIL
// the tail (partials' store, fence, count, merge) in warp 0 alone, and MINB blocks an SM asked
// of ptxas (0: its choice; the kernel as it is asks 2 for a 16-bit OP).
template <bool K84, int OP, int ROWS, int CPT, bool WARP0_TAIL, int MINB = 0>
__global__ void __launch_bounds__(kBwdCols * kBwdGroups, MINB) partials_variant(const BackwardProblem p) {
  constexpr int U = ROWS / kBwdGroups, W = kBwdCols * CPT;
  __shared__ float red[4][kBwdGroups][W + 1];
  __shared__ int is_last;
  const int c = threadIdx.x, g = threadIdx.y, j0 = blockIdx.x * W + c * CPT, t = blockIdx.y;
  const int T = ceil_div(p.n, ROWS);
  const int r0 = t * ROWS, rows = min(ROWS, p.n - r0);
  const bool col_ok = j0 < p.m;  // (M a multiple of CPT here)
  float z[U][CPT], gr[U][CPT], sz[CPT];
#pragma unroll
  for (int k = 0; k < CPT; ++k) sz[k] = 0.f;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int i = g + kBwdGroups * u;
#pragma unroll
    for (int k = 0; k < CPT; ++k) z[u][k] = gr[u][k] = 0.f;
    if (col_ok && i < rows) {
      const size_t q = (size_t)(r0 + i) * p.m + j0;
      if constexpr (CPT == 2) {
        const float2 zz = reinterpret_cast<const float2*>(p.z)[q / 2];
        const float2 d = load2<OP>(p.dy, q);
        z[u][0] = zz.x, z[u][1] = zz.y;
        if constexpr (K84) {
          const float2 y = load2<OP>(p.y, q);
          const float ri = p.r[r0 + i];
          gr[u][0] = y.x * (d.x - ri), gr[u][1] = y.y * (d.y - ri);
        } else {
          gr[u][0] = d.x, gr[u][1] = d.y;
        }
      } else {
        z[u][0] = p.z[q];
        gr[u][0] = backward_grad<OP>(p, K84, q, r0 + i);
      }
#pragma unroll
      for (int k = 0; k < CPT; ++k) sz[k] += z[u][k];
    }
  }
#pragma unroll
  for (int k = 0; k < CPT; ++k) red[0][g][c * CPT + k] = sz[k];
  __syncthreads();
  float m2[CPT], s1[CPT], cr[CPT], mean[CPT];
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    mean[k] = 0.f;
    for (int q = 0; q < kBwdGroups; ++q) mean[k] += red[0][q][c * CPT + k];
    mean[k] /= (float)rows;
    m2[k] = s1[k] = cr[k] = 0.f;
  }
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (g + kBwdGroups * u < rows) {
#pragma unroll
      for (int k = 0; k < CPT; ++k) {
        const float d = z[u][k] - mean[k];
        m2[k] += d * d;
        s1[k] += gr[u][k];
        cr[k] += gr[u][k] * d;
      }
    }
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    red[1][g][c * CPT + k] = m2[k];
    red[2][g][c * CPT + k] = s1[k];
    red[3][g][c * CPT + k] = cr[k];
  }
  __syncthreads();
  if (WARP0_TAIL && g != 0) return;
  if (g == 0 && col_ok) {
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
      float tot[3] = {0.f, 0.f, 0.f};
      for (int q = 0; q < kBwdGroups; ++q)
#pragma unroll
        for (int e = 0; e < 3; ++e) tot[e] += red[1 + e][q][c * CPT + k];
      float* pt = p.part + (size_t)(4 * t) * p.m + j0 + k;
      pt[0] = mean[k];
      pt[p.m] = tot[0];
      pt[2 * (size_t)p.m] = tot[1];
      pt[3 * (size_t)p.m] = tot[2];
    }
  }
  __threadfence();
  bool last;
  if constexpr (WARP0_TAIL) {
    __syncwarp();
    unsigned l = 0;
    if (c == 0) {
      l = atomicAdd(p.counters + blockIdx.x, 1u) == (unsigned)T - 1;
      if (l) p.counters[blockIdx.x] = 0;
    }
    last = __shfl_sync(0xffffffffu, l, 0);
  } else {
    __syncthreads();
    if (g == 0 && c == 0) {
      is_last = atomicAdd(p.counters + blockIdx.x, 1u) == (unsigned)T - 1;
      if (is_last) p.counters[blockIdx.x] = 0;
    }
    __syncthreads();
    last = is_last;
  }
  if (!last || g != 0 || !col_ok) return;
  __threadfence();
  for (int k = 0; k < CPT; ++k) {
    const int j = j0 + k;
    const float* pj = p.part + j;
    const auto tile = [&](int u) { return pj + (size_t)(4 * u) * p.m; };
    const float ref = __ldcg(pj);
    const Moments acc = merge_blocked<Moments>(
        T, [&](int u) { return Moments{(float)min(ROWS, p.n - u * ROWS), __ldcg(tile(u)) - ref, __ldcg(tile(u) + p.m)}; },
        chan_merge);
    const float2 s12 = merge_blocked<float2>(
        T,
        [&](int u) {
          const float su = __ldcg(tile(u) + 2 * (size_t)p.m);
          return make_float2(su, __ldcg(tile(u) + 3 * (size_t)p.m) + su * ((__ldcg(tile(u)) - ref) - acc.mean));
        },
        [](float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); });
    backward_column(p, j, acc.mean + ref, acc.m2 / acc.n, s12.x, s12.y, s12.x, s12.y, (float)p.n);
  }
}

// row_dot_kernel with 16-byte loads (8 16-bit elements or 4 floats), 4 in flight a thread;
// M a multiple of 8 (16-bit) or 4 (float32), rows 16-byte aligned.
template <int OP>
__global__ void __launch_bounds__(256) row_dot_vec(const BackwardProblem p) {
  __shared__ float red[32];
  constexpr int E = OP == OPERAND_FP32 ? 4 : 8;  // elements a 16-byte load
  const size_t row = (size_t)blockIdx.x * p.m;
  const uint4* dy = reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(p.dy) + row * (OP == OPERAND_FP32 ? 4 : 2));
  const uint4* y = reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(p.y) + row * (OP == OPERAND_FP32 ? 4 : 2));
  const int n16 = p.m / E;
  float s = 0.f;
  for (int v0 = threadIdx.x; v0 < n16; v0 += 4 * blockDim.x) {
    uint4 a[4], b[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int v = v0 + u * blockDim.x;
      if (v < n16) a[u] = __ldcs(dy + v), b[u] = __ldcs(y + v);
      else a[u] = b[u] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if constexpr (OP == OPERAND_FP32) {
        const float* fa = reinterpret_cast<const float*>(&a[u]);
        const float* fb = reinterpret_cast<const float*>(&b[u]);
#pragma unroll
        for (int e = 0; e < 4; ++e) s += fa[e] * fb[e];
      } else {
        using T = typename Element<OP>::T;
        const T* ea = reinterpret_cast<const T*>(&a[u]);
        const T* eb = reinterpret_cast<const T*>(&b[u]);
#pragma unroll
        for (int e = 0; e < 8; ++e) s += widen(ea[e]) * widen(eb[e]);
      }
    }
  }
  s = block_reduce<false>(s, red);
  if (threadIdx.x == 0) p.r[blockIdx.x] = s;
}

// backward_dz_kernel for a 16-bit OP with two adjacent columns a thread (64-column tiles).
template <bool K84, int OP>
__global__ void __launch_bounds__(kBwdCols * kBwdGroups) dz_cols2(const BackwardProblem p) {
  using T2 = std::conditional_t<OP == OPERAND_BF16, __nv_bfloat162, __half2>;
  const int c = threadIdx.x, g = threadIdx.y;
  const int i0 = blockIdx.y * kDzTile, j = blockIdx.x * 2 * kDzTile + 2 * c;
  if (j >= p.m) return;
  const float* coef = p.coef + j;
  const float2 a1 = *reinterpret_cast<const float2*>(coef), a2 = *reinterpret_cast<const float2*>(coef + p.m);
  const float2 a0 = *reinterpret_cast<const float2*>(coef + 2 * (size_t)p.m);
  const float2 mu = *reinterpret_cast<const float2*>(coef + 3 * (size_t)p.m);
  for (int u = g; u < kDzTile && i0 + u < p.n; u += kBwdGroups) {
    const int i = i0 + u;
    const size_t q = (size_t)i * p.m + j;
    const float2 d = load2<OP>(p.dy, q), zz = reinterpret_cast<const float2*>(p.z)[q / 2];
    float gx = d.x, gy = d.y;
    if constexpr (K84) {
      const float2 y = load2<OP>(p.y, q);
      const float ri = p.r[i];
      gx = y.x * (d.x - ri), gy = y.y * (d.y - ri);
    }
    const float vx = a1.x * gx + a2.x * (zz.x - mu.x) + a0.x, vy = a1.y * gy + a2.y * (zz.y - mu.y) + a0.y;
    T2 o;
    if constexpr (OP == OPERAND_BF16) o = __floats2bfloat162_rn(vx, vy);
    else o = __floats2half2_rn(vx, vy);
    reinterpret_cast<T2*>(p.dz)[q / 2] = o;
  }
}

// Random fill: uniform in [lo, hi) from a hash of the index (fixed seed), in element type OP.
template <int OP>
__global__ void fill(float* base, size_t n, uint32_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    store<OP>(base, i, lo + (hi - lo) * (h >> 8) * (1.f / 16777216.f));
  }
}

struct Bufs {
  float *dy, *y, *z, *scale, *gamma, *beta, *r, *part, *coef, *dgamma, *dbeta, *dscale, *dz, *dzt;
  unsigned int* counters;
};

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  const int N = 1024, M = 8192, REPS = 30;
  FILE* csv = fopen(argc > 1 ? argv[1] : "run189.csv", "w");
  fprintf(csv, "kind,dtype,pass,variant,us,gb_s,same_bits,max_rel_diff\n");
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  const size_t NM = (size_t)N * M;
  char* flush;
  CK(cudaMalloc(&flush, 128u << 20));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  Bufs b;
  CK(cudaMalloc(&b.dy, NM * 4));
  CK(cudaMalloc(&b.y, NM * 4));
  CK(cudaMalloc(&b.z, NM * 4));
  CK(cudaMalloc(&b.dz, NM * 4 * 2));
  CK(cudaMalloc(&b.dzt, NM * 4 * 2));
  CK(cudaMalloc(&b.scale, M * 4));
  CK(cudaMalloc(&b.gamma, M * 4));
  CK(cudaMalloc(&b.beta, M * 4));
  CK(cudaMalloc(&b.r, N * 4));
  CK(cudaMalloc(&b.part, (size_t)4 * ceil_div(N, 128) * M * 4));
  CK(cudaMalloc(&b.coef, 4 * M * 4));
  CK(cudaMalloc(&b.dgamma, M * 4));
  CK(cudaMalloc(&b.dbeta, M * 4));
  CK(cudaMalloc(&b.dscale, M * 4));
  CK(cudaMalloc(&b.counters, M * 4));
  CK(cudaMemset(b.counters, 0, M * 4));
  fill<OPERAND_FP32><<<512, 256>>>(b.z, NM, 3, -2.f, 3.f);
  fill<OPERAND_FP32><<<64, 256>>>(b.scale, M, 4, 0.5f, 2.f);
  fill<OPERAND_FP32><<<64, 256>>>(b.gamma, M, 5, 0.5f, 1.5f);
  fill<OPERAND_FP32><<<64, 256>>>(b.beta, M, 6, -0.5f, 0.5f);
  CK(cudaDeviceSynchronize());

  // time one launch (after the flush), REPS times; returns the median in µs
  auto timed = [&](auto&& launch) {
    std::vector<float> ms;
    for (int rep = 0; rep < REPS + 3; ++rep) {
      CK(cudaMemsetAsync(flush, rep & 0xff, 128u << 20));
      CK(cudaEventRecord(e0));
      launch();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float t;
      CK(cudaEventElapsedTime(&t, e0, e1));
      if (rep >= 3) ms.push_back(t * 1000.f);
    }
    return median(ms);
  };
  // the outputs a pass leaves, for the comparison with the kernels as they are
  auto snapshot = [&](const char* pass, int eb) {
    std::vector<float> out;
    auto grab = [&](const float* d, size_t n) {
      const size_t at = out.size();
      out.resize(at + n);
      CK(cudaMemcpy(out.data() + at, d, n * 4, cudaMemcpyDeviceToHost));
    };
    if (!strcmp(pass, "row terms")) grab(b.r, N);
    else if (!strcmp(pass, "partials")) grab(b.coef, 4 * (size_t)M), grab(b.dgamma, M), grab(b.dbeta, M), grab(b.dscale, M);
    else grab(b.dz, NM * eb / 4);
    return out;
  };
  auto compare = [&](const std::vector<float>& a, const std::vector<float>& v, bool bits16) {
    double worst = 0;
    if (bits16) {  // 16-bit dZ': compare as raw words
      return std::make_pair(memcmp(a.data(), v.data(), a.size() * 4) == 0, 0.0);
    }
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = std::abs((double)a[i] - v[i]), s = std::max(std::abs((double)a[i]), 1e-30);
      if (!(d / s <= worst)) worst = std::isnan(d) ? 1e30 : std::max(worst, d / s);
    }
    return std::make_pair(memcmp(a.data(), v.data(), a.size() * 4) == 0, worst);
  };

  printf("%-4s %-5s %-10s %-22s %9s %9s %s\n", "kind", "dtype", "pass", "variant", "µs", "GB/s", "same bits (max rel diff)");
  auto run = [&](auto kind84, auto op) {
    constexpr bool K84 = decltype(kind84)::value;
    constexpr int OP = decltype(op)::value;
    const int eb = OP == OPERAND_FP32 ? 4 : 2;
    const char* dt = OP == OPERAND_FP32 ? "fp32" : OP == OPERAND_BF16 ? "bf16" : "fp16";
    fill<OP><<<512, 256>>>(b.dy, NM, 1, -1.f, 1.f);
    fill<OP><<<512, 256>>>(b.y, NM, 2, 0.f, 2.f / M);
    CK(cudaDeviceSynchronize());
    BackwardProblem p{};
    p.dy = b.dy, p.y = b.y, p.z = b.z, p.scale = b.scale, p.gamma = b.gamma, p.beta = b.beta, p.r = b.r;
    p.part = b.part, p.coef = b.coef, p.counters = b.counters, p.dgamma = b.dgamma, p.dbeta = b.dbeta;
    p.dscale_cols = b.dscale, p.dz = b.dz, p.dzt = b.dzt, p.n = N, p.m = M, p.kind = K84 ? 84 : 33;
    p.scale_len = K84 ? 1 : M, p.split = 0, p.operand = OP, p.eps = 1e-5f, p.sync_phase = 0;
    const double rd = (double)NM * (4 + (K84 ? 2 : 1) * eb);  // bytes the partials and dZ' read
    auto report = [&](const char* pass, const char* variant, float us, double bytes, const std::vector<float>* ref) {
      std::string same = "(the kernel as it is)";
      int bits = -1;
      double diff = 0;
      if (ref) {
        const auto out = snapshot(pass, eb);
        const auto cmp = compare(*ref, out, !strcmp(pass, "dZ'") && OP != OPERAND_FP32);
        bits = cmp.first, diff = cmp.second;
        char s[64];
        snprintf(s, sizeof s, "%s (%.2e)", bits ? "yes" : "no", diff);
        same = s;
      }
      printf("%-4s %-5s %-10s %-22s %9.1f %9.0f %s\n", K84 ? "84" : "33", dt, pass, variant, us, bytes / us * 1e-3, same.c_str());
      fprintf(csv, "%s,%s,%s,%s,%.2f,%.0f,%d,%.3e\n", K84 ? "84" : "33", dt, pass, variant, us, bytes / us * 1e-3, bits, diff);
    };
    const dim3 block(kBwdCols, kBwdGroups);
    if (K84) {  // row terms
      const float us = timed([&] { row_dot_kernel<OP><<<N, 256>>>(p); });
      const auto ref = snapshot("row terms", eb);
      report("row terms", "as is", us, 2.0 * NM * eb, nullptr);
      const float us2 = timed([&] { row_dot_vec<OP><<<N, 256>>>(p); });
      report("row terms", "vec", us2, 2.0 * NM * eb, &ref);
      row_dot_kernel<OP><<<N, 256>>>(p);  // the kernel's r for what follows
    }
    const int T = backward_tiles(N);
    const float us = timed([&] { backward_partials_kernel<K84, OP><<<dim3(ceil_div(M, kBwdCols), T), block>>>(p, 0); });
    const auto ref = snapshot("partials", eb);
    report("partials", "as is", us, rd, nullptr);
    const dim3 g1(ceil_div(M, kBwdCols), T), g2(ceil_div(M, 2 * kBwdCols), T);
    report("partials", "fence=writers", timed([&] { partials_variant<K84, OP, 128, 1, true><<<g1, block>>>(p); }), rd, &ref);
    report("partials", "fence=writers 4/SM", timed([&] {
             partials_variant<K84, OP, 128, 1, true, 4><<<g1, block>>>(p);
           }), rd, &ref);
    report("partials", "fence=writers 3/SM", timed([&] {  // run201-partials33.patch's bounds at 33
             partials_variant<K84, OP, 128, 1, true, 3><<<g1, block>>>(p);
           }), rd, &ref);
    report("partials", "fence=writers 2/SM", timed([&] {  // the library kernel's bounds
             partials_variant<K84, OP, 128, 1, true, 2><<<g1, block>>>(p);
           }), rd, &ref);
    report("partials", "cols=2 fence=writers", timed([&] {
             partials_variant<K84, OP, 128, 2, true><<<g2, block>>>(p);
           }), rd, &ref);
    report("partials", "cols=2 fw 3/SM", timed([&] {
             partials_variant<K84, OP, 128, 2, true, 3><<<g2, block>>>(p);
           }), rd, &ref);
    report("partials", "rows=256 fw", timed([&] {
             partials_variant<K84, OP, 256, 1, true><<<dim3(ceil_div(M, kBwdCols), ceil_div(N, 256)), block>>>(p);
           }), rd, &ref);
    backward_partials_kernel<K84, OP><<<dim3(ceil_div(M, kBwdCols), T), block>>>(p, 0);  // the kernel's coefficients
    const double wr = OP == OPERAND_FP32 ? 2.0 * NM * 4 : (double)NM * eb;  // float32: row-major and transposed
    const float usd = timed([&] {
      if constexpr (OP == OPERAND_FP32)
        backward_dz_kernel<K84, false><<<dim3(ceil_div(M, kDzTile), ceil_div(N, kDzTile)), block>>>(p, 0);
      else
        backward_dz16_kernel<K84, OP><<<dim3(ceil_div(M, 2 * kDzTile), ceil_div(N, kDzTile)), block>>>(p, 0);
    });
    report("dZ'", "as is", usd, rd + wr, nullptr);
    if constexpr (OP != OPERAND_FP32) {
      const auto refd = snapshot("dZ'", eb);
      report("dZ'", "cols=2", timed([&] {
               dz_cols2<K84, OP><<<dim3(ceil_div(M, 2 * kDzTile), ceil_div(N, kDzTile)), block>>>(p);
             }), rd + wr, &refd);
    }
  };
  using B84 = std::true_type;
  using B33 = std::false_type;
  using BF = std::integral_constant<int, OPERAND_BF16>;
  using F32 = std::integral_constant<int, OPERAND_FP32>;
  run(B84{}, BF{});
  run(B33{}, BF{});
  run(B84{}, F32{});
  run(B33{}, F32{});
  fclose(csv);
  CK(cudaDeviceSynchronize());
  return 0;
}
'''


def main() -> int:
    out = Path("build/run189")
    out.mkdir(parents=True, exist_ok=True)
    (out / "run189.cu").write_text(SOURCE)
    subprocess.run(["nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-I", "fusedlib/kernels",
                    str(out / "run189.cu"), "-o", str(out / "run189")], check=True)
    print("compiled", flush=True)
    return subprocess.run([str(out / "run189"), *sys.argv[1:2]]).returncode


if __name__ == "__main__":
    sys.exit(main())
