"""run58: what a centred train-mode forward (the GEMM on X − x̄, notebook 08 "The failing cases:
offset inputs") would add on the H100, measured with the harness's protocol
(fusedlib.lab.bench.time_round_robin: L2 flush, CUDA events, rounds) at the KernelBench shapes:

* x̄, the column mean of X (one read of X), and X − x̄ written (the centring pass);
* μ = x̄Wᵀ + b for the running mean: a matrix-vector product over W, alone, and on a second
  stream beside the TF32 and fp32 GEMMs (does the GEMMs' compute hide its W read?).

Run from the repository root with PYTHONPATH=. (no fusedlib kernels are built)."""
import torch

from fusedlib.lab import bench

dev = "cuda"
side = torch.cuda.Stream()
rows = []
for name, (n, k, m) in {"84/33": (1024, 8192, 8192), "39": (16384, 4096, 4096)}.items():
    x = torch.randn(n, k, device=dev)
    w = torch.randn(m, k, device=dev) / k ** 0.5
    b = torch.randn(m, device=dev)
    xbar = x.mean(0)

    def with_side_gemv(x):
        """The GEMM on the current stream, μ = x̄Wᵀ + b on a second one, joined after."""
        ready = torch.cuda.Event()
        ready.record()
        with torch.cuda.stream(side):
            side.wait_event(ready)
            mu = torch.addmv(b, w, xbar)
        z = x @ w.t()
        torch.cuda.current_stream().wait_stream(side)
        return z, mu

    fns = {
        "x̄ (column mean of X)": (lambda x: x.mean(0), None),
        "X − x̄ (centring pass)": (lambda x: x - xbar, None),
        "μ = x̄Wᵀ + b (GEMV)": (lambda x: torch.addmv(b, w, xbar), "fp32"),
        "TF32 GEMM": (lambda x: x @ w.t(), "tf32"),
        "TF32 GEMM + GEMV on a second stream": (with_side_gemv, "tf32"),
        "fp32 GEMM": (lambda x: x @ w.t(), "fp32"),
        "fp32 GEMM + GEMV on a second stream": (with_side_gemv, "fp32"),
    }
    t = bench.time_round_robin(fns, x, iters=50, rounds=10)
    for impl, (med, lo, hi, host) in t.items():
        rows.append((name, impl, med, lo))

print("| shape | work | median ms | min ms |")
print("|---|---|---|---|")
for name, impl, med, lo in rows:
    print(f"| {name} | {impl} | {med:.4f} | {lo:.4f} |")
