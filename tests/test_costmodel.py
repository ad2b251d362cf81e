"""Cost model: hand-checked counts, ordering of the stages, roofline arithmetic."""
import pytest

from fusedlib.costmodel import IMPLS, cost


def test_gemm_only_counts_by_hand():
    n, k, m = 8, 16, 4
    c = cost("84", "gemm_only", n, k, m)
    assert c.bytes == 4 * (n * k + m * k + n * m + m)
    assert c.flops == 2 * n * k * m + n * m
    assert c.intensity == c.flops / c.bytes


@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("shape", [(1024, 8192, 8192), (16384, 4096, 4096), (128, 1024, 512)])
def test_each_stage_moves_fewer_bytes(kind, shape):
    b = {impl: cost(kind, impl, *shape).bytes for impl in IMPLS}
    assert b["naive"] > b["fold"] > b["sums"] >= b["fused"] > b["gemm_only"]
    assert b["eager"] > b["compile"] > b["gemm_only"]


def test_naive_84_train_passes():
    n, k, m = 4, 8, 16
    c = cost("84", "naive", n, k, m)
    names = [p.name for p in c.passes]
    assert names[:3] == ["GEMM + bias", "column mean", "column variance"]
    assert "row max" in names and "row sum of exp" in names and names[-1] == "running buffers"
    nm = n * m
    assert c.passes[1].bytes == 4 * (nm + m)  # mean: read Z, write μ


def test_eval_has_no_statistics_and_3xtf32_reads_split_operands():
    train = cost("33", "fused", 256, 512, 128, "train")
    evals = cost("33", "fused", 256, 512, 128, "eval")
    assert all("statistics" not in p.name for p in evals.passes)
    assert evals.bytes < train.bytes
    split = cost("33", "fused", 256, 512, 128, "train", "3xtf32")
    assert split.bytes > train.bytes and split.passes[0].name == "split X into TF32 parts"


def test_time_adds_each_pass_at_its_roof():
    c = cost("84", "fold", 1024, 8192, 8192)
    t = c.time_ms(tflops=400.0, gbytes_per_s=3000.0)
    gemm = c.passes[0]
    expected = max(gemm.flops / 400e12, gemm.bytes / 3000e9) + sum(p.bytes / 3000e9 for p in c.passes[1:])
    assert t == pytest.approx(expected * 1e3, rel=1e-3)


def test_errors():
    with pytest.raises(ValueError, match="impl"):
        cost("84", "magic", 1, 1, 1)
    with pytest.raises(ValueError, match="kind"):
        cost("39", "fused", 1, 1, 1)
    with pytest.raises(ValueError, match="mode"):
        cost("84", "fused", 1, 1, 1, mode="infer")
