// Host helpers shared by the operators' CUDA kernels (torch_op.cuh: the stages' forward;
// torch_backward.cuh: the fused backward): argument checks with Python-style shapes and the
// per-stream scratch.
#pragma once
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "common.cuh"
#include "torch_collectives.cuh"

namespace fl {

// A tensor's shape as Python prints it: (8, 64), (10,). (Numbers in messages go through
// std::to_string: streaming an int64 into TORCH_CHECK's message crashes this nvcc build.)
inline std::string shape_str(const at::Tensor& t) {
  std::string s = "(";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + (t.dim() == 1 ? ",)" : ")");
}

// Whether t is what check_vector accepts (the check without its message).
inline bool is_vector(const at::Tensor& t, int64_t m, const at::Tensor& x) {
  return t.device() == x.device() && t.scalar_type() == at::kFloat && t.dim() == 1 && t.size(0) == m &&
         t.is_contiguous();
}

inline void check_vector(const at::Tensor& t, const char* name, int64_t m, const at::Tensor& x) {
  TORCH_CHECK(t.device() == x.device(), name, ": expected a tensor on ", x.device(), ", got one on ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kFloat, name, ": the CUDA kernels take float32, got ", t.scalar_type());
  TORCH_CHECK(t.dim() == 1 && t.size(0) == m, name, ": expected shape (" + std::to_string(m) + ",), got ",
              shape_str(t));
  TORCH_CHECK(t.is_contiguous(), name, ": expected a contiguous tensor");
}

// Each of `in` in dtypes[i] (docs/design.md §15: a 16-bit module's scale, γ and β as the train
// backward's kernels read them, float32; the forward's kernels read its vectors in their dtype,
// common.cuh Vec). When every one changes dtype, all
// from one dtype to one, on one device: one cat and one cast for all of them (two launches however
// many; the results views of one buffer, each in its input's shape); otherwise each on its own, a
// tensor already in its dtype returned as it is. Nothing is kept between calls.
inline std::vector<at::Tensor> cast_vectors(const std::vector<at::Tensor>& in, const std::vector<at::ScalarType>& dtypes) {
  bool together = in.size() > 1;
  for (size_t i = 0; i < in.size() && together; ++i)
    together = in[i].scalar_type() != dtypes[i] && in[i].scalar_type() == in[0].scalar_type() &&
               dtypes[i] == dtypes[0] && in[i].device() == in[0].device();
  std::vector<at::Tensor> out;
  if (!together) {
    for (size_t i = 0; i < in.size(); ++i) out.push_back(in[i].to(dtypes[i]));
    return out;
  }
  std::vector<at::Tensor> flat;
  std::vector<int64_t> sizes;
  for (const at::Tensor& t : in) {
    flat.push_back(t.reshape(-1));
    sizes.push_back(t.numel());
  }
  const std::vector<at::Tensor> parts = at::cat(flat).to(dtypes[0]).split_with_sizes(sizes);
  for (size_t i = 0; i < in.size(); ++i) out.push_back(parts[i].view(in[i].sizes()));
  return out;
}

// A count of floats rounded up to 4 (16 bytes), so that every part starts TMA-aligned.
inline int64_t aligned_floats(int64_t n) { return (n + 3) / 4 * 4; }

// Sizes: each of N, K and M at most kMaxDim (common.cuh: the kernels keep a single dimension
// in an int); their products (N·M outputs, N·K, M·K) are not limited, only by memory.
inline bool dims_fit(std::initializer_list<int64_t> dims) {
  return std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d <= kMaxDim; });
}
inline std::string dims_limit() {
  return "at most " + std::to_string(kMaxDim) +
         " (2^31 - 2^16: the kernels index one dimension in 32 bits; products of them are not limited)";
}

// Bytes as whole MiB (rounded up), for messages; a float32 (rows, cols) tensor as "(rows, cols) float32".
inline std::string mib(int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }
inline std::string float32_shape(int64_t rows, int64_t cols) {
  return "(" + std::to_string(rows) + ", " + std::to_string(cols) + ") float32";
}

// alloc() (a function allocating a call's tensors), as it is; where the caching allocator cannot
// find the memory, the same error type (torch.OutOfMemoryError) with what the call needs first:
// need() (a message naming the tensors and bytes), then the device's free and total memory
// (cudaMemGetInfo, asked on this failure path only: an allocation that succeeds costs nothing
// more), then the allocator's own message.
template <class Alloc, class Need>
auto explain_oom(Alloc&& alloc, Need&& need) -> decltype(alloc()) {
  try {
    return alloc();
  } catch (const c10::OutOfMemoryError& e) {
    size_t free_bytes = 0, total_bytes = 0;
    std::string device = "the device's free memory is unknown";
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
      device = "the device has " + mib((int64_t)free_bytes) + " free of " + mib((int64_t)total_bytes);
    else
      (void)cudaGetLastError();  // (clears it)
    C10_THROW_ERROR(OutOfMemoryError, need() + "; " + device + ". " + e.what_without_backtrace());
  }
}

// The scratch of a call (forward or backward): column-tile counters (zero between calls: the last tile of each
// column block resets its own) and floats (tile partials, coefficients). Eager calls share
// one per (device, stream), kept between calls like cuBLAS's workspace: calls on one stream
// run in order, calls on two streams never share it, and a grown scratch returns the old one
// to the caching allocator, which reuses it in that stream's order. A call being captured in a
// CUDA graph gets its own from the graph's memory pool instead, its counters zeroed in the
// graph, so a graph never refers to memory this cache may free. Its floats start 16-byte aligned
// there too (after aligned_floats(n_count) words), as an eager call's do: the register-row softmax
// tests the coefficients' alignment, and a captured call must take the path an eager call takes,
// with the same bits.
struct Scratch {
  unsigned int* counters;
  float* floats;
};

inline bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

inline Scratch stream_scratch(const at::Tensor& x, cudaStream_t stream, bool capturing, int64_t n_count,
                              int64_t n_floats, at::Tensor& captured) {
  if (capturing) {
    const int64_t head = aligned_floats(n_count);
    captured = at::empty({head + n_floats}, x.options().dtype(at::kFloat));  // (x may be bf16/fp16)
    C10_CUDA_CHECK(cudaMemsetAsync(captured.data_ptr(), 0, n_count * sizeof(float), stream));
    return {reinterpret_cast<unsigned int*>(captured.data_ptr<float>()), captured.data_ptr<float>() + head};
  }
  static std::mutex mu;  // the map is never destroyed: no tensor outlives the CUDA runtime at exit
  static auto* cache = new std::map<std::pair<int, cudaStream_t>, std::pair<at::Tensor, at::Tensor>>;
  const std::lock_guard<std::mutex> lock(mu);
  auto& [counters, floats] = (*cache)[{x.get_device(), stream}];
  if (!counters.defined() || counters.numel() < n_count)
    counters = at::zeros({std::max<int64_t>(n_count, 256)}, x.options().dtype(at::kInt));
  if (!floats.defined() || floats.numel() < n_floats) floats = at::empty({n_floats}, x.options().dtype(at::kFloat));
  return {reinterpret_cast<unsigned int*>(counters.data_ptr<int>()), floats.data_ptr<float>()};
}

}  // namespace fl
