"""run40: what the fused backward's GEMMs and passes cost on the H100 (issue 12's design):
cuBLAS dX = dZ'·W and dW = dZ'ᵀ·X in fp32 and TF32, the transposes the engine's NT layout
would need, and one elementwise pass reading three N×M tensors and writing one; median of
20 calls, CUDA events, at 84's and 39's KernelBench shapes."""
import statistics

import torch


def ms(fn, calls=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


for name, (n, k, m) in {"84": (1024, 8192, 8192), "39": (16384, 4096, 4096)}.items():
    x, w = torch.rand(n, k, device="cuda"), torch.rand(m, k, device="cuda") / k ** 0.5
    dz, y, dy = (torch.randn(n, m, device="cuda") for _ in range(3))
    row = {}
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        tag = "tf32" if tf32 else "fp32"
        row[f"dX {tag}"] = ms(lambda: dz @ w)
        row[f"dW {tag}"] = ms(lambda: dz.t() @ x)
        row[f"Z' {tag}"] = ms(lambda: x @ w.t())
    torch.backends.cuda.matmul.allow_tf32 = False
    row["W.t() copy"] = ms(lambda: w.t().contiguous())
    row["dZ'.t() copy"] = ms(lambda: dz.t().contiguous())
    row["X.t() copy"] = ms(lambda: x.t().contiguous())
    a = torch.rand(m, device="cuda")
    row["pass: 3 reads, 1 write"] = ms(lambda: torch.addcmul(a * y, dy, dz))
    print(name, f"N={n} K={k} M={m}", " | ".join(f"{k_} {v:.3f}" for k_, v in row.items()), flush=True)
