// The host side of the fused backward's kernels (backward.cu), exported to Python as
// `backward_passes` (and `centered_x`, X's operand of dW) and called by the CUDA kernel of torch.ops.fusedlib.train_backward
// (fusedlib/ops.py), which adds the two GEMMs. Argument checks, outputs, the stream's
// scratch (row terms, tile partials, coefficients, column-tile counters: shared with the
// forwards on the same stream, which run in order), the three launches on the current
// CUDA stream; nothing waits for the GPU.
#pragma once
#include "torch_common.cuh"

// dZ' (P, N, M) and dZ'ᵀ (P, M, N) (P = 2, the TF32 parts, when split), dγ, dβ (M) and
// the scale's gradient per column (M), from dY, the forward's Y and its saved Z (N, M).
std::vector<at::Tensor> backward_passes(const at::Tensor& dy_in, const at::Tensor& y, const at::Tensor& z,
                                        const at::Tensor& scale, const at::Tensor& gamma, const at::Tensor& beta,
                                        c10::string_view kind, double eps, bool split) {
  using namespace fl;
  TORCH_CHECK(z.is_cuda() && z.scalar_type() == at::kFloat && z.dim() == 2 && z.is_contiguous() && z.size(0) > 1,
              "z: expected a contiguous float32 CUDA tensor (batch ≥ 2, out_features), got ", z.scalar_type(), " ",
              shape_str(z), " on ", z.device());
  const int64_t n = z.size(0), m = z.size(1);
  TORCH_CHECK(dims_fit({n, m}), "z: batch and out_features must each be ", dims_limit(), ", got ", shape_str(z));
  TORCH_CHECK(kind == "84" || kind == "33", "kind: expected '84' or '33', got '", std::string(kind), "'");
  for (const auto& [t, name] : {std::pair{&dy_in, "dy"}, std::pair{&y, "y"}})
    TORCH_CHECK(t->device() == z.device() && t->scalar_type() == at::kFloat && t->sizes() == z.sizes(), name,
                ": expected a float32 ", shape_str(z), " tensor on ", z.device(), ", got ", t->scalar_type(), " ",
                shape_str(*t), " on ", t->device());
  TORCH_CHECK(y.is_contiguous(), "y: expected a contiguous tensor");
  check_vector(gamma, "gamma", m, z);
  check_vector(beta, "beta", m, z);
  TORCH_CHECK(scale.device() == z.device() && scale.scalar_type() == at::kFloat && scale.is_contiguous() &&
                  (scale.numel() == 1 || (kind == "33" && scale.numel() == m)),
              "scale: expected a contiguous float32 tensor on ", z.device(), " with 1 element",
              kind == "33" ? " or out_features" : "", ", got ", scale.scalar_type(), " ", shape_str(scale));

  const c10::cuda::CUDAGuard guard(z.device());
  const at::Tensor dy = dy_in.contiguous();  // autograd may hand an expanded or strided gradient
  const int64_t planes = split ? 2 : 1;
  at::Tensor dz, dzt;  // (sizes in int64: N·M passes 2³¹ at 65537 × 32768)
  explain_oom(
      [&] {
        dz = at::empty({planes, n, m}, z.options());
        dzt = at::empty({planes, m, n}, z.options());
      },
      [&] {
        return "z: this backward needs " + mib(2 * planes * n * m * (int64_t)sizeof(float)) +
               " of GPU memory for dZ' and its transpose (" + std::to_string(2 * planes) + " x " +
               float32_shape(n, m) + ")";
      });
  at::Tensor dgamma = at::empty({m}, z.options()), dbeta = at::empty({m}, z.options()),
             dscale_cols = at::empty({m}, z.options());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(z.get_device()).stream();
  const int64_t n_r = aligned_floats(n), n_part = aligned_floats(4 * backward_tiles((int)n) * m);
  at::Tensor captured;
  const Scratch scratch =
      stream_scratch(z, stream, is_capturing(stream), aligned_floats((m + 31) / 32), n_r + n_part + 4 * m, captured);

  BackwardProblem p;
  p.dy = dy.data_ptr<float>();
  p.y = y.data_ptr<float>();
  p.z = z.data_ptr<float>();
  p.scale = scale.data_ptr<float>();
  p.gamma = gamma.data_ptr<float>();
  p.beta = beta.data_ptr<float>();
  p.r = scratch.floats;
  p.part = scratch.floats + n_r;
  p.coef = p.part + n_part;
  p.counters = scratch.counters;
  p.dgamma = dgamma.data_ptr<float>();
  p.dbeta = dbeta.data_ptr<float>();
  p.dscale_cols = dscale_cols.data_ptr<float>();
  p.dz = dz.data_ptr<float>();
  p.dzt = dzt.data_ptr<float>();
  p.n = (int)n;
  p.m = (int)m;
  p.kind = kind == "84" ? 84 : 33;
  p.scale_len = (int)scale.numel();
  p.split = split;
  p.eps = (float)eps;

  const char* poison = std::getenv("FUSEDLIB_POISON");
  if (poison && poison[0] == '1') {  // correctness tests: every unwritten element reads NaN
    C10_CUDA_CHECK(cudaMemsetAsync(scratch.floats, 0xFF, (n_r + n_part + 4 * m) * sizeof(float), stream));
    for (at::Tensor* t : {&dz, &dzt, &dgamma, &dbeta, &dscale_cols})
      C10_CUDA_CHECK(cudaMemsetAsync(t->data_ptr(), 0xFF, t->nbytes(), stream));
  }
  const char* err = fl_train_backward(&p, stream);
  TORCH_CHECK(err == nullptr, "fusedlib backward kernels: ", err ? err : "");
  return {dz, dzt, dgamma, dbeta, dscale_cols};
}

// X − x̄ (1, N, K), or its TF32 parts (2, N, K) with split: the X operand of dW = dZ'ᵀ(X − x̄)
// (x̄ the column mean of X over the batch), on the current stream.
at::Tensor centered_x(const at::Tensor& x, bool split) {
  using namespace fl;
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.dim() == 2 && x.is_contiguous() && x.size(0) > 0,
              "x: expected a contiguous float32 CUDA tensor (batch, in_features), got ", x.scalar_type(), " ",
              shape_str(x), " on ", x.device());
  const int64_t n = x.size(0), k = x.size(1);
  TORCH_CHECK(dims_fit({n, k}), "x: batch and in_features must each be ", dims_limit(), ", got ", shape_str(x));
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t planes = split ? 2 : 1;
  at::Tensor out = explain_oom([&] { return at::empty({planes, n, k}, x.options()); }, [&] {
    return "x: this backward needs " + mib(planes * n * k * (int64_t)sizeof(float)) +
           " of GPU memory for X - mean(X) (" + std::to_string(planes) + " x " + float32_shape(n, k) + ")";
  });
  at::Tensor scratch = at::empty({((n + 511) / 512 + 1) * k}, x.options());
  const char* err = fl_center_x(x.data_ptr<float>(), out.data_ptr<float>(), scratch.data_ptr<float>(), (int)n,
                                (int)k, split, c10::cuda::getCurrentCUDAStream(x.get_device()).stream());
  TORCH_CHECK(err == nullptr, "fusedlib centered_x kernels: ", err ? err : "");
  return out;
}

// W's TF32 parts (2, M, K) [rna(W); rna(W − rna(W))] (algebra.tf32_split), made from W as it is
// at this call, on the current stream: 3xTF32's W operand of dX = dZ'·W in the backward.
at::Tensor tf32_parts(const at::Tensor& w) {
  using namespace fl;
  TORCH_CHECK(w.is_cuda() && w.scalar_type() == at::kFloat && w.dim() == 2 && w.is_contiguous(),
              "weight: expected a contiguous float32 CUDA tensor (out_features, in_features), got ", w.scalar_type(),
              " ", shape_str(w), " on ", w.device());
  TORCH_CHECK(dims_fit({w.size(0), w.size(1)}), "weight: out_features and in_features must each be ", dims_limit(), ", got ",
              shape_str(w));
  const c10::cuda::CUDAGuard guard(w.device());
  at::Tensor out = at::empty({2, w.size(0), w.size(1)}, w.options());
  if (w.numel() == 0) return out;
  const char* err = fl_tf32_parts(w.data_ptr<float>(), out.data_ptr<float>(), (int)w.size(0), (int)w.size(1),
                                  c10::cuda::getCurrentCUDAStream(w.get_device()).stream());
  TORCH_CHECK(err == nullptr, "fusedlib tf32_parts kernel: ", err ? err : "");
  return out;
}
