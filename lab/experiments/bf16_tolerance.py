"""How tight KernelBench's bf16 check (allclose, atol = rtol = 1e-2, against eager bf16) is for
problem 33/39 (Linear -> x scale -> BatchNorm1d), measured against valid bf16 implementations
of the same model, not only against fusedlib:

* ``split-K eager``: eager bf16, its Linear summed as two halves of K in float32 (what another
  GEMM algorithm does), then rounded to bf16 as eager rounds it;
* ``correctly rounded eager``: eager bf16, its Linear in float64 before its one rounding (the
  most accurate bf16 Linear there is);
* ``eager's rounding points``: Z and Z∘s rounded to bf16, BatchNorm in float32 over the rounded
  Z∘s, Y rounded (how eager rounds, without its kernels);
* ``torch.compile``: the same model in bf16 through PyTorch's compiler (Inductor fuses the scale
  and BatchNorm into its own kernels, rounding where it chooses);
* ``fusedlib fused``: the fused module in bf16 (docs/design.md §15: Z' rounded once, Z∘s and
  BatchNorm in float32).

Inputs as KernelBench's get_inputs (torch.rand: every column's mean is large against its
spread, so a rounding of Z∘s moves the normalised output by up to ulp(Z∘s)/σ). Prints, per
shape, how many seeds of each fail the check and the worst max |difference|.

    python lab/experiments/bf16_tolerance.py [--device cuda] [--seeds 6] [--shape KxMxN ...]
"""
import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def emulate(ref, x):
    f = torch.float32
    z = (x.to(f) @ ref.gemm.weight.to(f).T + ref.gemm.bias.to(f)).to(x.dtype).to(f)
    zs = (z * ref.scale.to(f)).to(x.dtype).to(f)
    mu, var = zs.mean(0), zs.var(0, unbiased=False)
    return ((zs - mu) / torch.sqrt(var + ref.bn.eps) * ref.bn.weight.to(f) + ref.bn.bias.to(f)).to(x.dtype)


def main(argv=None) -> int:
    import fusedlib
    from upstream import Upstream33
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--shape", action="append", help="KxMxN: in_features x out_features x batch")
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shape or ["64x48x32", "1024x512x256", "8192x256x1024"]]
    dev, dt = torch.device(args.device), torch.bfloat16

    def model(x, w, b, s, gamma, beta):  # the reference's train forward, its modules as functions
        return torch.nn.functional.batch_norm(torch.nn.functional.linear(x, w, b) * s, None, None, gamma, beta,
                                              training=True, eps=1e-5)
    compiled = torch.compile(model)
    for k, m, n in shapes:
        fails, worst = {}, {}
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            ref = Upstream33(k, m, (m,)).to(device=dev, dtype=dt)
            torch.manual_seed(seed)
            new = fusedlib.from_reference(Upstream33(k, m, (m,)), stage="fused", precision="tf32").to(device=dev, dtype=dt)
            x = torch.rand(n, k, generator=torch.Generator().manual_seed(seed)).to(device=dev, dtype=dt)
            with torch.no_grad():
                want = ref(x).float()
                f = torch.float32
                w, b, xf, h = ref.gemm.weight.to(f), ref.gemm.bias.to(f), x.to(f), k // 2
                z_split = (xf[:, :h] @ w[:, :h].T + xf[:, h:] @ w[:, h:].T + b).to(dt)
                z_exact = (x.double() @ ref.gemm.weight.double().T + ref.gemm.bias.double()).to(dt)
                outs = {"split-K eager": ref.bn(z_split * ref.scale), "correctly rounded eager": ref.bn(z_exact * ref.scale),
                        "eager's rounding points": emulate(ref, x),
                        "torch.compile": compiled(x, ref.gemm.weight, ref.gemm.bias, ref.scale, ref.bn.weight, ref.bn.bias),
                        "fusedlib fused": new(x)}
            for key, out in outs.items():
                d = (out.float() - want).abs().max().item()
                worst[key] = max(worst.get(key, 0.0), d)
                fails[key] = fails.get(key, 0) + (not torch.allclose(out.float(), want, atol=1e-2, rtol=1e-2))
        print(f"{args.device} 33 in bf16, in {k} out {m} batch {n}, {args.seeds} seeds: "
              + "; ".join(f"{key} fails {fails[key]} (worst {worst[key]:.4f})" for key in fails), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
