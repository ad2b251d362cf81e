"""run58: the SIMT mainloop prototype (run58-simt-proto.cuh) against cuBLAS SGEMM and the engine's
SIMT GEMM (the naive stage's fp32 GEMM kernel, torch.profiler) in one process.

For each variant (BM×BN tile, BK, FLUSH K steps a partial, VEC float4 loads): correctness first
(normwise relative error against float64 on randn and offset inputs, odd shapes for the scalar-load
path, NaN poisoned outputs), then time at the KernelBench shapes (fusedlib.bench.time_round_robin: L2 flush, CUDA events,
50 calls each in 10 rounds). Prints a table; run from the repository root with PYTHONPATH=. and the
engine's build cache in $FUSEDLIB_CACHE."""
import statistics
import sys
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

from fusedlib import bench

HERE = Path(__file__).resolve().parent
# (BM, BN, BK, FLUSH); FLUSH 1 << 20: one partial for the whole K loop, i.e. single-level accumulation
# (what the two-level scheme costs in FADDs and registers)
VARIANTS = [(128, 128, 16, 1), (128, 128, 16, 2), (128, 128, 32, 1), (128, 64, 16, 1), (128, 128, 8, 2),
            (128, 128, 16, 1 << 20)]

binding = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
""" + (HERE / "run58-simt-proto.cuh").read_text() + r"""
template <int BM, int BN, int BK, int FLUSH>
cudaError_t launch(const torch::Tensor& x, const torch::Tensor& w, torch::Tensor& out, bool vec) {
  const int N = x.size(0), K = x.size(1), M = w.size(0);
  cudaStream_t st = c10::cuda::getCurrentCUDAStream();
  if (vec) return proto::launch_sgemm_nt<BM, BN, BK, FLUSH, true>(x.data_ptr<float>(), w.data_ptr<float>(),
                                                                   out.data_ptr<float>(), N, K, M, st);
  return proto::launch_sgemm_nt<BM, BN, BK, FLUSH, false>(x.data_ptr<float>(), w.data_ptr<float>(),
                                                            out.data_ptr<float>(), N, K, M, st);
}

torch::Tensor sgemm(torch::Tensor x, torch::Tensor w, int64_t variant, bool poison) {
  TORCH_CHECK(x.is_cuda() && w.is_cuda() && x.scalar_type() == torch::kFloat && w.scalar_type() == torch::kFloat,
              "x, w: float32 CUDA tensors");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
              "x (N, K), w (M, K) contiguous");
  auto out = poison ? torch::full({x.size(0), w.size(0)}, NAN, x.options()) : torch::empty({x.size(0), w.size(0)}, x.options());
  const bool vec = x.size(1) % 4 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0;
  cudaError_t err;
  switch (variant) {
    case 0: err = launch<128, 128, 16, 1>(x, w, out, vec); break;
    case 1: err = launch<128, 128, 16, 2>(x, w, out, vec); break;
    case 2: err = launch<128, 128, 32, 1>(x, w, out, vec); break;
    case 3: err = launch<128, 64, 16, 1>(x, w, out, vec); break;
    case 4: err = launch<128, 128, 8, 2>(x, w, out, vec); break;
    case 5: err = launch<128, 128, 16, 1 << 20>(x, w, out, vec); break;
    default: TORCH_CHECK(false, "variant: 0..5");
  }
  TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
  return out;
}
"""
ext = load_inline("run58_simt_proto", cpp_sources="torch::Tensor sgemm(torch::Tensor x, torch::Tensor w, int64_t variant, bool poison);",
                  cuda_sources=binding, functions=["sgemm"], extra_cuda_cflags=["-O3", "-Xptxas=-v"], verbose=False)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def inputs(n, k, m, kind, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    w = torch.randn(m, k, generator=g) / k ** 0.5
    if kind == "offset":
        x = torch.randn(1, k, generator=g, dtype=torch.float64) + 1e-3 * torch.randn(n, k, generator=g, dtype=torch.float64)
        x = x.float()
    else:
        x = torch.randn(n, k, generator=g)
    return x.to(dev), w.to(dev)


print("== correctness (normwise relative error against float64; cuBLAS fp32 beside)")
bad = 0
for shape in [(7, 33, 65), (257, 1000, 999), (1000, 999, 1001), (129, 64, 130), (1024, 8192, 8192)]:
    for kind in ("randn", "offset"):
        x, w = inputs(*shape, kind)
        want = x.double() @ w.double().t()
        ref = rel(x @ w.t(), want)
        errs = []
        for v in range(len(VARIANTS)):
            y = ext.sgemm(x, w, v, True)
            e = rel(y, want) if torch.isfinite(y).all() else float("nan")
            errs.append(e)
            bad += VARIANTS[v][3] < 1 << 20 and not (e <= max(2 * ref, 1e-6))
        print(f"{shape[0]}x{shape[1]}->{shape[2]:<6} {kind:6s} cuBLAS {ref:.2e}  ours " + " ".join(f"{e:.2e}" for e in errs))
# an input not 16-B aligned: the scalar-load path
x, w = inputs(256, 516, 260, "randn")
xs = torch.empty(256 * 516 + 1, device=dev)[1:].view(256, 516).copy_(x)
e = rel(ext.sgemm(xs, w, 0, True), x.double() @ w.double().t())
print(f"offset pointer (scalar loads): {e:.2e}")
bad += not (e < 1e-6)
print(f"correctness: {bad} failures")

def engine_simt_ms(n, k, m):
    """The engine's SIMT GEMM kernel time (the naive stage's fp32 GEMM), torch.profiler."""
    try:
        import fusedlib
        from fusedlib.reference import make_reference
        from torch.profiler import ProfilerActivity, profile
        mod = fusedlib.from_reference(make_reference("84", k, m, seed=0).to(dev).eval(), stage="naive", precision="fp32")
        x = torch.randn(n, k, device=dev)
        with torch.no_grad():
            for _ in range(3):
                mod(x)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    mod(x)
                torch.cuda.synchronize()
        ts = [e.device_time for e in prof.events() if "simt_gemm_kernel" in e.name]
        return statistics.median(ts) / 1e3 if ts else float("nan")
    except Exception as exc:  # the engine is a comparison only
        print("engine:", exc)
        return float("nan")


print("\n== time (ms, median of 50 in 10 rounds, L2 flushed); TFLOP/s in brackets")
rows = []
for n, k, m in [(1024, 8192, 8192), (16384, 4096, 4096), (4096, 4096, 4096), (128, 1024, 512)]:
    x, w = inputs(n, k, m, "randn")
    flops = 2 * n * k * m
    fns = {"cublas": (lambda x: x @ w.t(), "fp32")}
    fns.update({f"v{v}": (lambda x, v=v: ext.sgemm(x, w, v, False), None) for v in range(len(VARIANTS))})
    t = bench.time_round_robin(fns, x, iters=50, rounds=10)   # the harness's protocol: L2 flush, events, rounds
    cub, ours = t["cublas"][0], [t[f"v{v}"][0] for v in range(len(VARIANTS))]
    eng = engine_simt_ms(n, k, m)
    rows.append((f"{n}x{k}->{m}", cub, eng, ours))
    print(f"{n}x{k}->{m}: cuBLAS {cub:.3f} ({flops / cub / 1e9:.1f})  engine {eng:.3f}  " +
          "  ".join(f"v{v} {t:.3f} ({flops / t / 1e9:.1f})" for v, t in enumerate(ours)))

print("\nvariants: " + ", ".join(f"v{i} = {bm}x{bn} BK {bk} FLUSH {f}" for i, (bm, bn, bk, f) in enumerate(VARIANTS)))
print("| shape | cuBLAS | engine today | " + " | ".join(f"v{i}" for i in range(len(VARIANTS))) + " | best / cuBLAS |")
print("|---|---|---|" + "---|" * len(VARIANTS) + "---|")
for shape, cub, eng, ours in rows:
    print(f"| {shape} | {cub:.3f} | {eng:.3f} | " + " | ".join(f"{t:.3f}" for t in ours) + f" | {min(ours) / cub:.2f} |")
sys.exit(1 if bad else 0)
