// Stage 1, naive: one kernel per operator, each reading and writing global memory, as a
// first translation of the PyTorch model would be. Problem 84: GEMM+bias → column mean →
// column variance → normalize+affine → ×scale → row max → row Σexp → normalize.
// Problems 33/39: GEMM+bias → ×scale → column mean → column variance → normalize+affine.
// The GEMM is the engine's (gemm.cuh) with the plain bias-store epilogue, at any precision
// (in train mode at fp32 and 3xTF32 shifted by its first row, as in every stage: Z − Z₀, where
// the bias cancels; common.cuh column_shift).
// The first pass that changes Z writes Y's memory and every later one works in place there
// (Z itself lives in Y's memory too, unless the backward keeps it: torch_op.cuh's z_out; a
// 16-bit module's Y the last kernel writes apart, in its dtype: common.cuh y_out);
// BatchNorm updates the running buffers as soon as its batch statistics exist. Data parallelism
// (p.sync_phase, common.cuh): phase 1 stops at this rank's moments of Z, phase 2 merges every
// rank's (passes.cuh rank_merge_kernel) and runs the rest.
// Specification: fusedlib/algebra.py, _naive().
#include "gemm.cuh"
#include "passes.cuh"

namespace fl {

// y = z ∘ s (column scale, 33) or y = s·z (scalar scale, 84); in place when z == y.
__global__ void scale_kernel(const float* z, const Vec scale, int scale_len, float* y, int n, int m) {
  const size_t total = (size_t)n * m;
  for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < total; q += (size_t)gridDim.x * blockDim.x)
    y[q] = z[q] * vec_at(scale, scale_len == 1 ? 0 : (long long)(q % m));
}

// y = γ (z − μ)/√(σ² + ε) + β with per-column μ, σ² (batch or running statistics).
// In place (z == y): each element is read and written by the same thread. 33/39's last
// kernel: counts the train step (step = num_batches_tracked; nullptr: eval, or not last) and
// writes Y in OUT (common.cuh store: float32, or a 16-bit module's dtype).
template <int OUT>
__global__ void normalize_affine_kernel(const float* z, const Vec mean, const Vec var, const Vec gamma,
                                        const Vec beta, float eps, float* y, int n, int m, long long* step) {
  count_train_step(step);
  const size_t total = (size_t)n * m;
  for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < total; q += (size_t)gridDim.x * blockDim.x) {
    const int j = (int)(q % m);
    store<OUT>(y, q, vec_at(gamma, j) * ((z[q] - vec_at(mean, j)) / sqrtf(vec_at(var, j) + eps)) + vec_at(beta, j));
  }
}

// Row max of v (N×M) into rmax (N); one block a row.
__global__ void row_max_kernel(const float* __restrict__ v, float* __restrict__ rmax, int m) {
  __shared__ float red[32];
  const float* vr = v + (size_t)blockIdx.x * m;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < m; j += blockDim.x) mx = fmaxf(mx, vr[j]);
  mx = block_reduce<true>(mx, red);
  if (threadIdx.x == 0) rmax[blockIdx.x] = mx;
}

// Row Σ exp(v − max) into rsum (N).
__global__ void row_sumexp_kernel(const float* __restrict__ v, const float* __restrict__ rmax,
                                  float* __restrict__ rsum, int m) {
  __shared__ float red[32];
  const float* vr = v + (size_t)blockIdx.x * m;
  const float mx = rmax[blockIdx.x];
  float l = 0.f;
  for (int j = threadIdx.x; j < m; j += blockDim.x) l += expf(vr[j] - mx);
  l = block_reduce<false>(l, red);
  if (threadIdx.x == 0) rsum[blockIdx.x] = l;
}

// y = exp(v − max)/Σ, elementwise, in place (v == y). 84's last kernel: counts the train step,
// writes Y in OUT.
template <int OUT>
__global__ void softmax_normalize_kernel(const float* v, const float* __restrict__ rmax,
                                         const float* __restrict__ rsum, float* y, int n, int m, long long* step) {
  count_train_step(step);
  const size_t total = (size_t)n * m;
  for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < total; q += (size_t)gridDim.x * blockDim.x) {
    const size_t i = q / m;
    store<OUT>(y, q, expf(v[q] - rmax[i]) / rsum[i]);
  }
}

// running ← (1 − m)·running + m·batch, variance unbiased (×N/(N−1)); stats of what BN saw
// (its mean plus what the first-row shift took out, times s for 33/39: common.cuh column_shift).
__global__ void update_running_kernel(const Problem p, const float* __restrict__ mean,
                                      const float* __restrict__ var) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.m) return;
  update_running(p, j, mean[j] + column_shift(p, j) * (p.kind == 84 ? 1.f : scale_at(p, j)), var[j], (float)p.n);
}

}  // namespace fl

extern "C" const char* fl_naive_forward(const fl::Problem* pp, cudaStream_t st) {
  using namespace fl;
  const Problem& p = *pp;
  const int ew_blocks = sm_count() * 8, ew_threads = 256;
  const char* err;
  if (p.sync_phase != 2 && (err = launch_gemm<BiasStore>(p, p.x, p.w, p.z, st))) return err;  // Z = XWᵀ + b
  const float* t = p.z;  // what BatchNorm sees: Z (84), or Z∘s in Y's memory (33/39)
  if (p.kind != 84 && p.sync_phase != 1) {
    scale_kernel<<<ew_blocks, ew_threads, 0, st>>>(p.z, p.scale, p.scale_len, p.y, p.n, p.m);
    FL_CHECK_LAUNCH();
    t = p.y;
  }
  Vec mean = p.running_mean, var = p.running_var;
  if (p.training) {
    float* bmean = p.coef + 2 * (size_t)p.m;  // (4M may pass 2³¹)
    float* bvar = p.coef + 3 * (size_t)p.m;
    if (p.sync_phase == 0) {
      if ((err = launch_column_stats(t, bmean, bvar, p.n, p.m, st))) return err;
      update_running_kernel<<<ceil_div(p.m, 256), 256, 0, st>>>(p, bmean, bvar);
      FL_CHECK_LAUNCH();
    } else if (p.sync_phase == 1) {  // data parallelism: this rank's moments of Z (the scale comes after)
      if ((err = launch_column_stats(p.z, bmean, bvar, p.n, p.m, st))) return err;
      return launch_local_moments(p, bmean, bvar, st);
    } else if ((err = launch_rank_merge(p, true, false, st))) {  // every rank's moments: Z∘s's statistics
      return err;
    }
    mean = vec_f32(bmean);
    var = vec_f32(bvar);
  }
  long long* step = p.training ? p.num_batches_tracked : nullptr;
  const YOut out = y_out(p);  // Y's memory and element type (a 16-bit module's: written by the last kernel)
  const auto last = [](auto f32, auto bf16, auto fp16, int type) {
    return type == OPERAND_BF16 ? bf16 : type == OPERAND_FP16 ? fp16 : f32;
  };
  if (p.kind == 84) {
    normalize_affine_kernel<OPERAND_FP32><<<ew_blocks, ew_threads, 0, st>>>(t, mean, var, p.gamma, p.beta, p.eps, p.y,
                                                                          p.n, p.m, nullptr);
  } else {
    last(normalize_affine_kernel<OPERAND_FP32>, normalize_affine_kernel<OPERAND_BF16>,
         normalize_affine_kernel<OPERAND_FP16>, out.type)<<<ew_blocks, ew_threads, 0, st>>>(
        t, mean, var, p.gamma, p.beta, p.eps, out.y, p.n, p.m, step);
  }
  FL_CHECK_LAUNCH();
  if (p.kind == 84) {
    scale_kernel<<<ew_blocks, ew_threads, 0, st>>>(p.y, p.scale, 1, p.y, p.n, p.m);
    FL_CHECK_LAUNCH();
    float* rmax = p.part;
    float* rsum = p.part + p.n;
    row_max_kernel<<<p.n, 256, 0, st>>>(p.y, rmax, p.m);
    FL_CHECK_LAUNCH();
    row_sumexp_kernel<<<p.n, 256, 0, st>>>(p.y, rmax, rsum, p.m);
    FL_CHECK_LAUNCH();
    last(softmax_normalize_kernel<OPERAND_FP32>, softmax_normalize_kernel<OPERAND_BF16>,
         softmax_normalize_kernel<OPERAND_FP16>, out.type)<<<ew_blocks, ew_threads, 0, st>>>(p.y, rmax, rsum, out.y,
                                                                                             p.n, p.m, step);
    FL_CHECK_LAUNCH();
  }
  return nullptr;
}
