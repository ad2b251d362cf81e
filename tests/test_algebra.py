"""Every stage's CPU algebra against PyTorch's reference modules, and the identities of
DESIGN.md §3 (bias cancellation, folds, Chan's merge, online softmax, cancellation)."""
import copy

import pytest
import torch
from torch.nn.utils.fusion import fuse_linear_bn_eval

import fusedlib
from fusedlib import algebra
from fusedlib.reference import make_reference

FP32_COMBOS = [(s, "fp32") for s in algebra.STAGES]


def _model(problem, k, m, seed=0, dtype=torch.float64, momentum=0.1):
    ref = make_reference(problem, k, m, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        if problem == "84":
            ref.scale.fill_(1.7)
        else:
            ref.scale[0] = 0.0              # s = 0: BN(Z∘s) = β exactly
            ref.scale[1] = -2.5             # s < 0: sign flip
        ref.bn.weight.copy_(1 + 0.3 * torch.randn(m, generator=g))
        ref.bn.bias.copy_(0.3 * torch.randn(m, generator=g))
    ref.bn.momentum = momentum
    return ref.to(dtype)


def _rel(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("stage,precision", FP32_COMBOS)
@pytest.mark.parametrize("shape", [(7, 33, 65), (2, 64, 3), (130, 70, 200)])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_stage_matches_reference(problem, stage, precision, shape, dtype, tol):
    n, k, m = shape
    ref = _model(problem, k, m, dtype=dtype)
    fused = fusedlib.from_reference(ref, stage=stage, precision=precision)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):  # train steps: batch statistics, running buffers updated
        x = torch.rand(n, k, generator=g, dtype=dtype)
        assert _rel(fused(x), ref(x)) < tol
    for name in ("running_mean", "running_var"):
        assert _rel(getattr(fused.bn, name), getattr(ref.bn, name)) < tol, name
    assert int(fused.bn.num_batches_tracked) == int(ref.bn.num_batches_tracked) == 3
    fused.eval()
    ref.eval()
    x = torch.rand(n, k, generator=g, dtype=dtype)
    assert _rel(fused(x), ref(x)) < tol


@pytest.mark.parametrize("problem", ["84", "33"])
def test_momentum_none_is_cumulative_average(problem):
    ref = _model(problem, 20, 12, momentum=None)
    fused = fusedlib.from_reference(ref, stage="fused")
    g = torch.Generator().manual_seed(2)
    for _ in range(4):
        x = torch.randn(9, 20, generator=g, dtype=torch.float64)
        fused(x)
        ref(x)
    assert _rel(fused.bn.running_var, ref.bn.running_var) < 1e-12
    assert _rel(fused.bn.running_mean, ref.bn.running_mean) < 1e-12


def test_zero_and_negative_scale_exact():
    ref = _model("33", 16, 6)
    fused = fusedlib.from_reference(ref, stage="sums")
    x = torch.rand(10, 16, dtype=torch.float64)
    y = fused(x)
    assert torch.equal(y[:, 0], ref.bn.bias[0].expand(10))  # s_j = 0 gives β_j exactly
    assert _rel(y, ref(x)) < 1e-12


@pytest.mark.parametrize("problem", ["84", "33"])
def test_tensor_core_precisions(problem):
    ref = _model(problem, 256, 96, dtype=torch.float32)
    ref64 = copy.deepcopy(ref).double()
    x = torch.rand(64, 256)
    y64 = ref64(x.double())
    errs = {}
    for precision in ("tf32", "3xtf32"):
        fused = fusedlib.from_reference(ref, stage="fused", precision=precision)
        errs[precision] = _rel(fused(x).double(), y64)
    assert errs["3xtf32"] < 1e-5
    assert 1e-5 < errs["tf32"] < 5e-3


def test_precision_rounding_helpers():
    t = torch.tensor([1 + 2 ** -11, 1 + 3 * 2 ** -12, -(1 + 2 ** -11)], dtype=torch.float32)
    assert torch.equal(algebra.round_tf32(t), torch.tensor([1 + 2 ** -10, 1 + 2 ** -10, -(1 + 2 ** -10)]))
    assert torch.equal(algebra.truncate_tf32(t), torch.tensor([1.0, 1.0, -1.0]))
    x, w = torch.randn(40, 300), torch.randn(30, 300)
    exact = x.double() @ w.double().t()
    assert _rel(algebra.matmul_nt(x, w, "3xtf32").double(), exact) < 1e-6
    with pytest.raises(ValueError, match="precision"):
        algebra.matmul_nt(x, w, "bf16")


def test_bias_cancels_in_train_mode():
    x, w = torch.randn(50, 8, dtype=torch.float64), torch.randn(6, 8, dtype=torch.float64)
    b = torch.randn(6, dtype=torch.float64)
    z, zp = x @ w.t() + b, x @ w.t()
    assert torch.allclose(z - z.mean(0), zp - zp.mean(0), atol=1e-12)


def test_chan_merge_equals_two_pass():
    z = torch.randn(1000, 7, dtype=torch.float64) * 3 + 5
    mean2, var2 = algebra.column_stats_two_pass(z)
    for tile in (1, 64, 128, 999, 2000):
        mean, var = algebra.column_stats_chan(z, tile)
        assert torch.allclose(mean, mean2, rtol=1e-13) and torch.allclose(var, var2, rtol=1e-12)


def test_online_softmax_equals_three_pass():
    v = torch.randn(5, 3000, dtype=torch.float64) * 20
    for tile in (1, 100, 1024, 5000):
        assert torch.allclose(algebra.softmax_online(v, tile), algebra.softmax_three_pass(v), rtol=1e-12)
    assert torch.allclose(algebra.softmax_three_pass(v), torch.softmax(v, 1), rtol=1e-12)


def test_eval_fold_matches_fuse_linear_bn_eval():
    ref = _model("84", 12, 9)
    ref.train()
    ref(torch.rand(20, 12, dtype=torch.float64))
    ref.eval()
    ref.scale.data.fill_(1.0)  # fuse_linear_bn_eval folds BN alone (scale 1)
    bn = algebra.BNState(ref.bn.weight, ref.bn.bias, ref.bn.running_mean, ref.bn.running_var,
                         ref.bn.num_batches_tracked, ref.bn.momentum, ref.bn.eps)
    a, c = algebra.eval_coefficients("84", bn, ref.scale, torch.float64)
    w2, b2 = algebra.fold_linear(ref.gemm.weight, ref.gemm.bias, a, c)
    torch_fused = fuse_linear_bn_eval(ref.gemm, ref.bn)
    assert torch.allclose(w2, torch_fused.weight, rtol=1e-12)
    assert torch.allclose(b2, torch_fused.bias, rtol=1e-12, atol=1e-12)


def test_eval_fold_33_matches_fuse_linear_bn_eval_of_the_scaled_linear():
    """33 in eval mode: BN(Z∘s) folds like fuse_linear_bn_eval applied to Linear(diag(s)W, s∘b)."""
    ref = _model("33", 12, 9)
    g = torch.Generator().manual_seed(4)
    for _ in range(2):
        ref(torch.randn(20, 12, generator=g, dtype=torch.float64))
    ref.eval()
    s = ref.scale.detach()
    scaled = torch.nn.Linear(12, 9).double().eval()
    with torch.no_grad():
        scaled.weight.copy_(s[:, None] * ref.gemm.weight)
        scaled.bias.copy_(s * ref.gemm.bias)
    torch_fused = fuse_linear_bn_eval(scaled, ref.bn)
    bn = algebra.BNState(ref.bn.weight, ref.bn.bias, ref.bn.running_mean, ref.bn.running_var,
                         ref.bn.num_batches_tracked, ref.bn.momentum, ref.bn.eps)
    a, c = algebra.eval_coefficients("33", bn, ref.scale, torch.float64)
    w2, b2 = algebra.fold_linear(ref.gemm.weight, ref.gemm.bias, a, c)
    assert torch.allclose(w2, torch_fused.weight, rtol=1e-12, atol=1e-15)
    assert torch.allclose(b2, torch_fused.bias, rtol=1e-12, atol=1e-12)
    assert torch.equal(w2[0], torch.zeros(12, dtype=torch.float64))  # s_0 = 0: column 0 is β_0 alone


def test_cancellation_textbook_vs_chan():
    """|mean|/std ≈ 1e3: Σz/Σz² loses most digits in float32, Chan's merge does not."""
    g = torch.Generator().manual_seed(0)
    z64 = 1000.0 + torch.randn(4096, 16, generator=g, dtype=torch.float64)
    z = z64.float()
    _, var_ref = algebra.column_stats_two_pass(z.double())  # exact variance of the float32 data
    _, var_text = algebra.column_stats_textbook(z, 128)
    _, var_chan = algebra.column_stats_chan(z, 128)
    text_err = ((var_text.double() - var_ref).abs() / var_ref).max().item()
    chan_err = ((var_chan.double() - var_ref).abs() / var_ref).max().item()
    assert text_err > 1e-2
    assert chan_err < 1e-5


def test_batch_of_one_in_train_mode_raises_like_pytorch():
    ref = _model("84", 4, 3)
    fused = fusedlib.from_reference(ref, stage="naive")
    x = torch.rand(1, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        ref(x)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        fused(x)
    fused.eval()
    assert fused(x).shape == (1, 3)


def test_fused_fp32_tile_follows_the_grid():
    """The fused fp32 GEMM's tile (and so its statistics tiles): the largest square tile with
    at least MIN_GRID tiles, else the smallest; the kernel source uses the same numbers."""
    from pathlib import Path

    from fusedlib.build import KERNEL_DIR
    assert algebra.tile_rows("fused", 1024, 8192, "fp32") == 128      # 84: 512 tiles
    assert algebra.tile_rows("fused", 16384, 4096, "fp32") == 128     # 39
    assert algebra.tile_rows("fused", 256, 4096, "fp32") == 64        # 64 tiles of 128, 256 of 64
    assert algebra.tile_rows("fused", 128, 512, "fp32") == 32         # v0: 4 tiles of 128, 16 of 64
    assert algebra.tile_rows("fused", 2, 3, "fp32") == 32
    assert algebra.tile_rows("fused", 128, 512, "tf32") == 128        # tensor-core paths: 128-row tiles
    assert algebra.tile_rows("sums", 128, 512, "fp32") == 64
    src = Path(KERNEL_DIR / "04_fused.cu").read_text()
    assert f"constexpr int kMinGrid = {algebra.MIN_GRID};" in src
    assert "launch_simt_gemm<32, 32, 16, 2, 2, EPI>" in src and "fills_grid(p, 64)" in src
    assert algebra.FUSED_FP32_TILES == (128, 64, 32)
    from fusedlib import check
    from fusedlib.reference import parse_shape
    shapes = [parse_shape(s) for s in ("84", "39") + check.CUDA_SHAPES]
    assert {algebra.tile_rows("fused", s.batch, s.out_features) for s in shapes} == {128, 64, 32}  # GPU suite covers each
