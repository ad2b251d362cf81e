"""The notebooks' summation-order emulation (fusedlib.course.ffma_chain_matmul)."""
import pytest
import torch

from fusedlib import course


def _xw(n=5, k=37, m=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g), torch.randn(m, k, generator=g)


def test_exact_on_integers():
    """Small integers: every partial sum is exact in float32, so any order gives X Wᵀ."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-8, 9, (6, 50), generator=g).float()
    w = torch.randint(-8, 9, (3, 50), generator=g).float()
    for step in (None, 1, 4, 16):
        assert torch.equal(course.ffma_chain_matmul(x, w, step), x @ w.T)


def test_one_step_covering_k_is_the_chain():
    """A K step as long as K: the partial is the whole chain, added once to zero."""
    x, w = _xw()
    assert torch.equal(course.ffma_chain_matmul(x, w, 37), course.ffma_chain_matmul(x, w))
    assert torch.equal(course.ffma_chain_matmul(x, w, 64), course.ffma_chain_matmul(x, w))


def test_rounds_to_float32_within_the_chain_bound():
    """float32 result, error within the classic bound K·u·Σ|x||w| (u = 2⁻²⁴), and not the
    float64 product itself (so it does round)."""
    x, w = _xw(k=300)
    exact = x.double() @ w.double().T
    bound = 300 * 2.0 ** -24 * (x.double().abs() @ w.double().abs().T)
    for step in (None, 16):
        z = course.ffma_chain_matmul(x, w, step)
        assert z.dtype == torch.float32
        assert ((z.double() - exact).abs() <= bound).all()
    assert not torch.equal(course.ffma_chain_matmul(x, w).double(), exact)


def test_summation_order_lab_records():
    df = course.summation_order_lab(shapes=("2x16->3",), seeds=range(2), steps=(None, 4))
    assert set(df["summation"]) == {"PyTorch fp32", "one FFMA chain", "two-level, step 4"}
    assert len(df) == 6 and (df.rel_err > 0).all() and (df.rel_err < 1e-3).all()


def test_toward_zero_rounds_every_sum_down_in_magnitude():
    """Truncating accumulation never exceeds the round-to-nearest result in magnitude for
    positive products, and differs from it once sums need rounding."""
    g = torch.Generator().manual_seed(3)
    x, w = torch.rand(4, 200, generator=g), torch.rand(3, 200, generator=g)
    nearest = course.ffma_chain_matmul(x, w).double()
    truncated = course.ffma_chain_matmul(x, w, rounding="toward_zero").double()
    exact = x.double() @ w.double().T
    assert (truncated <= exact).all() and not torch.equal(truncated, nearest)
    # exact sums are left alone: integers
    xi, wi = torch.randint(0, 5, (3, 40), generator=g).float(), torch.randint(0, 5, (2, 40), generator=g).float()
    assert torch.equal(course.ffma_chain_matmul(xi, wi, rounding="toward_zero"), xi @ wi.T)
    with pytest.raises(ValueError, match="rounding"):
        course.ffma_chain_matmul(x, w, rounding="up")


def test_accumulation_lab_growth_laws():
    df = course.accumulation_lab(ks=(128, 2048), rows=8, cols=8, window=64)
    errs = df.pivot(index="K", columns="accumulation", values="rel_err")
    assert set(errs.columns) == {"round to nearest (FFMA chain)", "truncating (tensor-core model)",
                                 "truncating, promoted every 64"} and list(errs.index) == [128, 2048]
    growth = errs.loc[2048] / errs.loc[128]
    assert growth["truncating (tensor-core model)"] > 8          # ~K: 16× more K
    assert growth["truncating, promoted every 64"] < 3           # flat
    assert (errs["round to nearest (FFMA chain)"] < errs["truncating (tensor-core model)"]).all()


def test_pass_rule_lab_reproduces_the_recorded_gpu_failure():
    """Problem 33 at 2x64->3, seed 2, offset inputs: the emulated two-level sum gives the error
    the GPU suite recorded for the naive stage (same order of operations in the GEMM), and the
    per-case budget is applied as check.run_case applies it."""
    import json
    from pathlib import Path

    record = json.loads((Path(__file__).resolve().parent.parent / "results/h100/validation.json").read_text())
    gpu = [c for c in record["cases"] if (c["problem"], c["stage"], c["mode"], c["precision"], c["shape"],
                                          c["seed"]) == ("33", "naive", "train", "fp32", "2x64->3", 2)]
    assert len(gpu) == 1
    df = course.pass_rule_lab("33", seeds=[2])
    row = df.iloc[0]
    assert row.two_level == pytest.approx(gpu[0]["rel_err"], rel=0.05)
    assert row.noise == pytest.approx(gpu[0]["fp32_noise"], rel=0.25)  # CPU BLAS vs cuBLAS orders
    for name in ("pytorch_third", "two_level", "one_chain"):
        assert row[name + "_fails"] == (row[name] > max(1e-5, 2 * row.noise))


def test_ncu_table_reads_the_committed_report():
    """The committed Nsight Compute report of problem 84 in tf32: one column per kernel (the
    counter increment left out), durations converted from ns to µs, grids as launched."""
    t = course.ncu_table("run10-ncu_84_tf32.csv")
    ours = [c for c in t.columns if c.startswith("fl::fused_wgmma_kernel")]
    cublas = [c for c in t.columns if "xmma_gemm" in c]
    assert len(ours) == 1 and len(cublas) == 1 and not any("elementwise" in c for c in t.columns)
    assert 100 < t.loc["Duration (µs)", ours[0]] < 2000        # a 137 GFLOP tf32 GEMM, in µs
    assert t.loc["Grid Size", cublas[0]] == 132                 # cuBLAS: one persistent wave
    with pytest.raises(FileNotFoundError):
        course.ncu_table("no-such-report.csv")
