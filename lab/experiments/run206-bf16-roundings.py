"""run206 (CPU; issue 36, item 3): why KernelBench's bf16 evaluation fails 33 and 39 (0/5 in
validation.json, max |diff| 0.0625 against atol = rtol = 1e-2) while the fused stage is closer
to float64 than eager bf16 is (1.7e-3 against 5.0e-3), and what passes. Eager bf16 rounds twice
before BatchNorm (the Linear's Z to bf16, then Z∘s to bf16); the fused stage keeps both in
fp32 and rounds once at the end, so it differs from eager's output by up to two bf16 ulps,
which allclose(1e-2, 1e-2) refuses below |y| ≈ 5. Emulating the two roundings (statistics from
the rounded values) stays within allclose of eager and within eager's error against float64.
Five seeds (KernelBench's five trials), 33 at 1024 × 2048 → 2048 (CPU bf16 Linear: fp32
accumulation, one rounding, as cuBLAS), with two inputs: randn (zero-mean columns) and rand
(KernelBench's get_inputs: every column's mean large against its spread, where one bf16 step of
Z∘s moves the normalised output most; docs/design.md §15). Prints one row a seed and input."""
import torch

from fusedlib.reference import get_inputs, make_reference

n, k, m = 1024, 2048, 2048
for kind, seed in [(kind, seed) for kind in ("randn", "rand") for seed in range(5)]:
    r16 = make_reference("33", k, m, seed=seed).train().to(torch.bfloat16)
    x16 = get_inputs(f"{n}x{k}:{m}", kind, torch.Generator().manual_seed(100 + seed)).to(torch.bfloat16)
    with torch.no_grad():
        eager = r16(x16).float()
        W, b, s = r16.gemm.weight.float(), r16.gemm.bias.float(), r16.scale.float()
        g, beta, eps = r16.bn.weight.float(), r16.bn.bias.float(), r16.bn.eps

        def bn(t):
            return (t - t.mean(0)) / torch.sqrt(t.var(0, unbiased=False) + eps) * g + beta

        z = x16.float() @ W.t() + b
        once = bn(z * s).to(torch.bfloat16).float()
        emulated = bn((z.to(torch.bfloat16).float() * s).to(torch.bfloat16).float()).to(torch.bfloat16).float()
        t64 = (x16.double() @ r16.gemm.weight.double().t() + r16.gemm.bias.double()) * r16.scale.double()
        y64 = (t64 - t64.mean(0)) / torch.sqrt(t64.var(0, unbiased=False) + eps) * r16.bn.weight.double() \
            + r16.bn.bias.double()
    err = lambda y: ((y.double() - y64).norm() / y64.norm()).item()
    row = [f"{kind:5s} seed {seed}", f"eager err {err(eager):.2e}"]
    for name, y in (("one rounding", once), ("eager's roundings", emulated)):
        row.append(f"{name}: max|diff| {(y - eager).abs().max():.4f}, allclose {torch.allclose(y, eager, atol=1e-2, rtol=1e-2)}, "
                   f"err {err(y):.2e}")
    print(" | ".join(row), flush=True)
