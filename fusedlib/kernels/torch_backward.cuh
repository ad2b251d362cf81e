// The host side of the fused backward's kernels (backward.cu), exported to Python as
// `backward_passes` (and `centered_x`, X's operand of dW) and called by the CUDA kernel of torch.ops.fusedlib.train_backward
// (fusedlib/ops.py), which adds the two GEMMs. Argument checks, outputs, the stream's
// scratch (row terms, tile partials, coefficients, column-tile counters: shared with the
// forwards on the same stream, which run in order), the three launches on the current
// CUDA stream; nothing waits for the GPU.
#pragma once
#include "torch_common.cuh"

// Data parallelism (docs/design.md §14; fusedlib/cuda.py): the passes' two phases around one
// all-reduce (backward_passes_group).
struct BackwardSync {
  int phase;                 // 1: up to this rank's sums; 2: from the ranks' totals
  const at::Tensor* x;       // (N, K) this rank's x (phase 1: its Σ_i X into the message)
  const at::Tensor* stats;   // (2, M) the forward's global μ and σ² of Z
  const at::Tensor* local;   // (4·M + N) this rank's sums (4, M) and the row terms (N, 84)
  const at::Tensor* message; // (2·M + K + 1) phase 1: written; phase 2: the ranks' totals
};

// dZ' (P, N, M) and dZ'ᵀ (P, M, N) (P = 2, the TF32 parts, when split), dγ, dβ (M) and
// the scale's gradient per column (M), from dY, the forward's Y and its saved Z (N, M).
// dY and Y both bf16 or both fp16 (the 16-bit forward's output; 33 reads no Y; one process, no
// split): read as they are, dZ' (1, N, M) in their dtype and no dZ'ᵀ (an empty tensor;
// docs/design.md §15); any other mix of dtypes is read in float32. Z float32, or (one process, no
// split) in bf16 or fp16: a 16-bit module's Z' as the sums and fused forwards keep it.
// sync: one phase of a data-parallel backward (phase 1 returns nothing).
static std::vector<at::Tensor> backward_passes_impl(const at::Tensor& dy_in, const at::Tensor& y_in, const at::Tensor& z,
                                                    const at::Tensor& scale, const at::Tensor& gamma,
                                                    const at::Tensor& beta, c10::string_view kind, double eps,
                                                    bool split, const BackwardSync* sync) {
  using namespace fl;
  const bool z16 = z.scalar_type() == at::kBFloat16 || z.scalar_type() == at::kHalf;
  TORCH_CHECK(z.is_cuda() && (z.scalar_type() == at::kFloat || (z16 && !split && !sync)) && z.dim() == 2 &&
                  z.is_contiguous() && z.size(0) > (sync ? 0 : 1),
              "z: expected a contiguous float32 CUDA tensor (batch ≥ 2, out_features)",
              split || sync ? "" : ", or bfloat16 or float16", ", got ", z.scalar_type(), " ", shape_str(z), " on ",
              z.device());
  const at::TensorOptions f32 = z.options().dtype(at::kFloat);  // the gradients' and the scratch's
  const int64_t n = z.size(0), m = z.size(1);
  TORCH_CHECK(dims_fit({n, m}), "z: batch and out_features must each be ", dims_limit(), ", got ", shape_str(z));
  TORCH_CHECK(kind == "84" || kind == "33", "kind: expected '84' or '33', got '", std::string(kind), "'");
  const auto floating = [](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
  };
  for (const auto& [t, name] : {std::pair{&dy_in, "dy"}, std::pair{&y_in, "y"}})
    TORCH_CHECK(t->device() == z.device() && floating(*t) && t->sizes() == z.sizes(), name,
                ": expected a float32, bfloat16 or float16 ", shape_str(z), " tensor on ", z.device(), ", got ",
                t->scalar_type(), " ", shape_str(*t), " on ", t->device());
  TORCH_CHECK(y_in.is_contiguous(), "y: expected a contiguous tensor");
  // (33 reads no Y: the caller may pass Z in its place)
  const bool sixteen = dy_in.scalar_type() != at::kFloat && (kind == "33" || dy_in.scalar_type() == y_in.scalar_type()) &&
                       !split && !sync;
  const at::Tensor y = sixteen || kind == "33" || y_in.scalar_type() == at::kFloat ? y_in : y_in.to(at::kFloat);
  check_vector(gamma, "gamma", m, z);
  check_vector(beta, "beta", m, z);
  TORCH_CHECK(scale.device() == z.device() && scale.scalar_type() == at::kFloat && scale.is_contiguous() &&
                  (scale.numel() == 1 || (kind == "33" && scale.numel() == m)),
              "scale: expected a contiguous float32 tensor on ", z.device(), " with 1 element",
              kind == "33" ? " or out_features" : "", ", got ", scale.scalar_type(), " ", shape_str(scale));

  const c10::cuda::CUDAGuard guard(z.device());
  // (autograd may hand an expanded or strided gradient)
  const at::Tensor dy = sixteen || dy_in.scalar_type() == at::kFloat ? dy_in.contiguous() : dy_in.to(at::kFloat).contiguous();
  const int64_t planes = split ? 2 : 1;
  const at::TensorOptions dz_options = sixteen ? z.options().dtype(dy.scalar_type()) : f32;
  int64_t k = 0;
  if (sync) {
    k = sync->x->size(1);
    TORCH_CHECK(sync->x->device() == z.device() && sync->x->scalar_type() == at::kFloat && sync->x->is_contiguous() &&
                    sync->x->dim() == 2 && sync->x->size(0) == n,
                "x: expected a contiguous float32 (", std::to_string(n), ", in_features) tensor on ", z.device());
    for (const auto& [t, name, size] : {std::tuple{sync->stats, "stats", 2 * m}, {sync->local, "local", 4 * m + n},
                                        {sync->message, "message", 2 * m + k + 1}})
      TORCH_CHECK(t->device() == z.device() && t->scalar_type() == at::kFloat && t->is_contiguous() &&
                      t->numel() == size,
                  name, ": expected a contiguous float32 tensor of ", std::to_string(size), " elements on ", z.device());
  }
  at::Tensor dz, dzt;  // (sizes in int64: N·M passes 2³¹ at 65537 × 32768)
  if (!sync || sync->phase == 2)
  explain_oom(
      [&] {
        dz = at::empty({planes, n, m}, dz_options);
        dzt = sixteen ? at::empty({0}, dz_options) : at::empty({planes, m, n}, f32);
      },
      [&] {
        if (sixteen)
          return "z: this backward needs " + mib(n * m * (int64_t)dy.element_size()) + " of GPU memory for dZ' (" +
                 std::to_string(n) + " x " + std::to_string(m) + " " + std::string(c10::toString(dy.scalar_type())) +
                 ")";
        return "z: this backward needs " + mib(2 * planes * n * m * (int64_t)sizeof(float)) +
               " of GPU memory for dZ' and its transpose (" + std::to_string(2 * planes) + " x " +
               float32_shape(n, m) + ")";
      });
  const bool outputs = !sync || sync->phase == 2;
  at::Tensor dgamma, dbeta, dscale_cols;
  if (outputs) {
    dgamma = at::empty({m}, f32);
    dbeta = at::empty({m}, f32);
    dscale_cols = at::empty({m}, f32);
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(z.get_device()).stream();
  const int64_t n_r = aligned_floats(n), n_part = aligned_floats(4 * backward_tiles((int)n) * m);
  at::Tensor captured;
  const Scratch scratch =
      stream_scratch(z, stream, is_capturing(stream), aligned_floats((m + 31) / 32), n_r + n_part + 4 * m, captured);

  BackwardProblem p;
  p.dy = static_cast<const float*>(dy.const_data_ptr());  // (a 16-bit dY and Y: their elements' address, p.operand)
  p.y = static_cast<const float*>(y.const_data_ptr());
  p.z = static_cast<const float*>(z.const_data_ptr());  // (a 16-bit Z: its elements' address, p.z_type)
  p.z_type = z.scalar_type() == at::kBFloat16 ? OPERAND_BF16
             : z.scalar_type() == at::kHalf   ? OPERAND_FP16
                                              : OPERAND_FP32;
  p.scale = scale.data_ptr<float>();
  p.gamma = gamma.data_ptr<float>();
  p.beta = beta.data_ptr<float>();
  p.r = sync ? sync->local->data_ptr<float>() + 4 * m : scratch.floats;  // (sync: kept for phase 2)
  p.part = scratch.floats + n_r;
  p.coef = p.part + n_part;
  p.counters = scratch.counters;
  p.dgamma = outputs ? dgamma.data_ptr<float>() : nullptr;
  p.dbeta = outputs ? dbeta.data_ptr<float>() : nullptr;
  p.dscale_cols = outputs ? dscale_cols.data_ptr<float>() : nullptr;
  p.dz = outputs ? static_cast<float*>(dz.data_ptr()) : nullptr;
  p.dzt = outputs && !sixteen ? dzt.data_ptr<float>() : nullptr;
  p.operand = !sixteen ? OPERAND_FP32 : dy.scalar_type() == at::kBFloat16 ? OPERAND_BF16 : OPERAND_FP16;
  p.n = (int)n;
  p.m = (int)m;
  p.kind = kind == "84" ? 84 : 33;
  p.scale_len = (int)scale.numel();
  p.split = split;
  p.eps = (float)eps;
  p.sync_phase = sync ? sync->phase : 0;
  p.k = (int)k;
  p.stats = sync ? sync->stats->data_ptr<float>() : nullptr;
  p.local = sync ? sync->local->data_ptr<float>() : nullptr;
  p.message = sync && sync->phase == 1 ? sync->message->data_ptr<float>() : nullptr;
  p.total = sync && sync->phase == 2 ? sync->message->data_ptr<float>() : nullptr;

  const char* poison = std::getenv("FUSEDLIB_POISON");
  if (poison && poison[0] == '1') {  // correctness tests: every unwritten element reads NaN
    C10_CUDA_CHECK(cudaMemsetAsync(scratch.floats, 0xFF, (n_r + n_part + 4 * m) * sizeof(float), stream));
    if (outputs)
      for (at::Tensor* t : {&dz, &dzt, &dgamma, &dbeta, &dscale_cols})
        C10_CUDA_CHECK(cudaMemsetAsync(t->data_ptr(), 0xFF, t->nbytes(), stream));
  }
  const char* err = fl_train_backward(&p, stream);
  TORCH_CHECK(err == nullptr, "fusedlib backward kernels: ", err ? err : "");
  if (sync && sync->phase == 1) {  // this rank's Σ_i X and N after S1, S2 in the message
    at::Tensor chunks = at::empty({(n + 511) / 512 * k}, z.options());
    err = fl_x_sums(sync->x->data_ptr<float>(), sync->message->data_ptr<float>() + 2 * m, chunks.data_ptr<float>(),
                    (int)n, (int)k, stream);
    TORCH_CHECK(err == nullptr, "fusedlib backward kernels: ", err ? err : "");
    return {};
  }
  return {dz, dzt, dgamma, dbeta, dscale_cols};
}

std::vector<at::Tensor> backward_passes(const at::Tensor& dy, const at::Tensor& y, const at::Tensor& z,
                                        const at::Tensor& scale, const at::Tensor& gamma, const at::Tensor& beta,
                                        c10::string_view kind, double eps, bool split) {
  return backward_passes_impl(dy, y, z, scale, gamma, beta, kind, eps, split, nullptr);
}

// The whole backward of a bf16/fp16 module's train step in one call (docs/design.md §15; the
// CUDA kernel of torch.ops.fusedlib.train_backward calls it for x and weight both bf16 or both
// fp16, one process): the vectors scale, γ, β cast to float32 (cast_vectors: one cat and one
// cast when all three are in one 16-bit dtype), the three passes on dY and Y as they come (dY
// in neither float32 nor x's dtype is read in float32 so that dZ' is rounded once, to x's
// dtype), then dX = dZ'·W (need_dx; else an empty tensor) and dW = dZ'ᵀ·X on cuBLAS's 16-bit
// GEMMs (float32 accumulation; dZ'ᵀ a view), and the vectors' gradients back in their dtypes
// (one cast each). A float32 weight (autocast's master weight, the forward having run on its
// 16-bit copy: fusedlib.ops.StageFunction) takes dW = dZ'ᵀ·X as the 16-bit GEMM's float32 sums
// (cuBLAS's float32 output: no 16-bit dW and no cast of it back to float32) and, for dX, the
// weight rounded to x's dtype again, as the forward's GEMM read it.
// Returns (dX, dW, dbias (zeros: batch statistics cancel the Linear's bias), dscale, dγ, dβ),
// as the Python route it replaces, whose aten calls it makes in the same order (the same values
// bit for bit), without their Python calls: the host time of a 16-bit train step.
std::vector<at::Tensor> backward_sixteen(const at::Tensor& dy_in, const at::Tensor& y, const at::Tensor& z,
                                         const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scale,
                                         const at::Tensor& gamma, const at::Tensor& beta, c10::string_view kind,
                                         double eps, bool need_dx) {
  const at::ScalarType dtype = x.scalar_type();
  const bool master = weight.scalar_type() == at::kFloat;  // autocast's float32 weight
  TORCH_CHECK((dtype == at::kBFloat16 || dtype == at::kHalf) && (weight.scalar_type() == dtype || master),
              "x, weight: expected x bfloat16 or float16 and weight of the same dtype or float32, got ", dtype,
              " and ", weight.scalar_type());
  const std::vector<at::Tensor> f32 = fl::cast_vectors({scale, gamma, beta}, {at::kFloat, at::kFloat, at::kFloat});
  const at::Tensor dy = dy_in.scalar_type() == at::kFloat || dy_in.scalar_type() == dtype ? dy_in : dy_in.to(at::kFloat);
  std::vector<at::Tensor> out = backward_passes_impl(dy, y, z, f32[0], f32[1], f32[2], kind, eps, false, nullptr);
  const at::Tensor dz = out[0][0].scalar_type() == dtype ? out[0][0] : out[0][0].to(dtype);
  const at::Tensor dx = need_dx ? at::mm(dz, master ? weight.to(dtype) : weight) : x.new_empty({0});
  const at::Tensor dweight = master ? at::mm(dz.t(), x.contiguous(), at::kFloat) : at::mm(dz.t(), x.contiguous());
  const at::Tensor dscale = scale.numel() == 1 ? out[4].sum().reshape(scale.sizes()) : out[4].reshape(scale.sizes());
  // each cast on its own: an operator's returns may not be views of one another (torch.library)
  return {dx, dweight, at::zeros_like(gamma), dscale.to(scale.scalar_type()), out[2].to(gamma.scalar_type()),
          out[3].to(beta.scalar_type())};
}

// (Also the CUDA kernel of torch.ops.fusedlib.backward_sixteen, whose schema fusedlib/ops.py
// defines: the way the 16-bit train forward's C++ autograd node, torch_op.cuh, reaches it.)
TORCH_LIBRARY_IMPL(fusedlib, CUDA, m) { m.impl("backward_sixteen", &backward_sixteen); }

// Data parallelism (docs/design.md §14): backward_passes' outputs over a batch spread across the
// ranks of process group group_name, about the forward's global μ, σ² of Z (stats, (2, M)), in
// two phases around one all-reduce, all on the current stream. Phase 1 writes this rank's sums
// (4·M + N floats, kept for phase 2) and the message [S1; S2; Σ_i X; N] (2·M + K + 1 floats,
// x (N, K) this rank's input); after the all-reduce of the message, phase 2 gives dZ' from the
// ranks' totals, and dγ, dβ and the scale's terms this rank's part of them. Returns
// backward_passes' five outputs and the message's tail [Σ X; N] over the ranks (K + 1), from
// which centered_x_about centres X on the global x̄.
std::vector<at::Tensor> backward_passes_group(const at::Tensor& dy, const at::Tensor& y, const at::Tensor& z,
                                              const at::Tensor& scale, const at::Tensor& gamma, const at::Tensor& beta,
                                              c10::string_view kind, double eps, bool split, const at::Tensor& x,
                                              const at::Tensor& stats, const std::string& group_name) {
  const int64_t n = z.size(0), m = z.size(1), k = x.size(1);
  at::Tensor local = at::empty({4 * m + n}, z.options()), message = at::empty({2 * m + k + 1}, z.options());
  BackwardSync sync{1, &x, &stats, &local, &message};
  backward_passes_impl(dy, y, z, scale, gamma, beta, kind, eps, split, &sync);
  fl::Collectives(group_name).all_reduce_sum(message);
  sync.phase = 2;
  std::vector<at::Tensor> out = backward_passes_impl(dy, y, z, scale, gamma, beta, kind, eps, split, &sync);
  out.push_back(message.narrow(0, 2 * m, k + 1));
  return out;
}

// X − x̄ (1, N, K), or its TF32 parts (2, N, K) with split: the X operand of dW = dZ'ᵀ(X − x̄)
// (x̄ the column mean of X over the batch), on the current stream. Data parallelism: total (the
// ranks' Σ_i X, K floats, then N: the message's tail after the all-reduce) gives the global x̄.
at::Tensor centered_x_impl(const at::Tensor& x, bool split, const at::Tensor* total) {
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
  if (total)
    TORCH_CHECK(total->device() == x.device() && total->scalar_type() == at::kFloat && total->is_contiguous() &&
                    total->numel() == k + 1,
                "total: expected a contiguous float32 tensor of in_features + 1 elements on ", x.device());
  const char* err = fl_center_x(x.data_ptr<float>(), out.data_ptr<float>(), scratch.data_ptr<float>(), (int)n,
                                (int)k, split, total ? total->data_ptr<float>() : nullptr,
                                c10::cuda::getCurrentCUDAStream(x.get_device()).stream());
  TORCH_CHECK(err == nullptr, "fusedlib centered_x kernels: ", err ? err : "");
  return out;
}

at::Tensor centered_x(const at::Tensor& x, bool split) { return centered_x_impl(x, split, nullptr); }

at::Tensor centered_x_about(const at::Tensor& x, bool split, const at::Tensor& total) {
  return centered_x_impl(x, split, &total);
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
