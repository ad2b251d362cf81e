"""Every stage's CPU algebra against PyTorch's reference modules, and the identities of
docs/design.md §3 (bias cancellation, folds, Chan's merge, online softmax, cancellation)."""
import copy

import pytest
import torch
from torch.nn.utils.fusion import fuse_linear_bn_eval

import fusedlib
from fusedlib import algebra
from fusedlib.reference import get_inputs, make_reference, parse_shape

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


def _bn_state(ref):
    return algebra.BNState(ref.bn.weight, ref.bn.bias, ref.bn.running_mean, ref.bn.running_var,
                           ref.bn.num_batches_tracked, ref.bn.momentum, ref.bn.eps)


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
@pytest.mark.parametrize("stage", algebra.STAGES)
def test_tensor_core_precisions(problem, stage):
    """Every stage's GEMM runs at the module's precision: tf32 shows TF32's error (and stays
    within its budget), 3xtf32 is fp32-class but not the fp32 computation."""
    ref = _model(problem, 256, 96, dtype=torch.float32)
    ref64 = copy.deepcopy(ref).double()
    x = torch.rand(64, 256)
    y64 = ref64(x.double())
    ys = {}
    for precision in algebra.PRECISIONS:
        fused = fusedlib.from_reference(ref, stage=stage, precision=precision)
        ys[precision] = fused(x)
    errs = {p: _rel(y.double(), y64) for p, y in ys.items()}
    assert errs["fp32"] < 1e-5 and errs["3xtf32"] < 1e-5
    assert 1e-5 < errs["tf32"] < 5e-3
    assert not torch.equal(ys["3xtf32"], ys["fp32"])


@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("stage", algebra.STAGES)
@pytest.mark.parametrize("precision", algebra.PRECISIONS)
def test_every_stage_and_precision_matches_float64(problem, stage, precision):
    """Every stage at every precision through the float32 module, 3 train steps then one
    eval step: output and running buffers within check.BUDGET of a float64 reference."""
    from fusedlib.check import BUDGET
    ref = _model(problem, 70, 200, dtype=torch.float32)
    ref64 = copy.deepcopy(ref).double()
    fused = fusedlib.from_reference(ref, stage=stage, precision=precision)
    assert fused.stage == stage and fused.precision == precision
    g = torch.Generator().manual_seed(7)
    for step in range(4):
        if step == 3:
            fused.eval()
            ref64.eval()
        x = torch.rand(130, 70, generator=g)
        y, y64 = fused(x), ref64(x.double())
        assert torch.isfinite(y).all()
        assert _rel(y.double(), y64) <= BUDGET[precision], step
    for name in ("running_mean", "running_var"):
        assert _rel(getattr(fused.bn, name).double(), getattr(ref64.bn, name)) <= max(BUDGET[precision], 1e-5), name
    assert int(fused.bn.num_batches_tracked) == 3


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
    bn = _bn_state(ref)
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
    bn = _bn_state(ref)
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


def test_tile_rows_follow_the_precision_and_the_grid():
    """The GEMM's row tile (hence the statistics tiles), the same for every stage: 128 on the
    tensor-core paths; on the SIMT path (fp32) the largest square tile with at least
    MIN_GRID tiles, else the smallest."""
    assert algebra.SIMT_TILES == (128, 64, 32) and algebra.MIN_GRID == 132 and algebra.TC_TILE_ROWS == 128
    assert algebra.tile_rows(1024, 8192, "fp32") == 128     # 84/33: 8·64 = 512 tiles of 128
    assert algebra.tile_rows(1024, 8192) == 128             # fp32 is the default
    assert algebra.tile_rows(16384, 4096, "fp32") == 128    # 39
    assert algebra.tile_rows(128, 512, "fp32") == 32        # v0: 1·4 tiles of 128, 2·8 = 16 of 64
    assert algebra.tile_rows(1152, 1920, "fp32") == 128     # 9·15 = 135 tiles of 128
    assert algebra.tile_rows(1024, 2048, "fp32") == 64      # 8·16 = 128 < 132 tiles of 128
    assert algebra.tile_rows(640, 1000, "fp32") == 64       # 10·16 = 160 tiles of 64
    assert algebra.tile_rows(576, 1000, "fp32") == 64       # 9·16 = 144
    assert algebra.tile_rows(512, 1000, "fp32") == 32       # 8·16 = 128 < 132
    assert algebra.tile_rows(2, 3, "fp32") == 32
    for precision in ("tf32", "3xtf32"):
        for n, m in ((1024, 8192), (16384, 4096), (128, 512), (2, 3)):
            assert algebra.tile_rows(n, m, precision) == 128
    with pytest.raises(ValueError, match="precision"):
        algebra.tile_rows(8, 8, "bf16")
    with pytest.raises(ValueError, match="n, m"):
        algebra.tile_rows(0, 8)


@pytest.mark.parametrize("stage", ["sums", "fused"])
@pytest.mark.parametrize("precision", algebra.PRECISIONS)
def test_statistics_use_the_gemm_tile(monkeypatch, stage, precision):
    """sums and fused merge partials of tile_rows(n, m, precision) rows, whatever the stage."""
    seen = []
    original = algebra.column_stats_chan
    monkeypatch.setattr(algebra, "column_stats_chan", lambda z, rows: seen.append(rows) or original(z, rows))
    ref = _model("84", 16, 40, dtype=torch.float32)
    fusedlib.from_reference(ref, stage=stage, precision=precision)(torch.rand(300, 16))
    assert seen == [algebra.tile_rows(300, 40, precision)] == [32 if precision == "fp32" else 128]


def test_kernel_grid_rule_matches_the_specification():
    """The GEMM dispatcher keeps the numbers of algebra.tile_rows, and the GPU suite's default
    shapes cover both SIMT tiles."""
    from fusedlib.build import KERNEL_DIR
    src = (KERNEL_DIR / "gemm.cuh").read_text()
    assert f"constexpr int kMinGrid = {algebra.MIN_GRID};" in src
    tiles = ", ".join(map(str, algebra.SIMT_TILES))
    assert f"constexpr int kSimtTiles[{len(algebra.SIMT_TILES)}] = {{{tiles}}};" in src
    from fusedlib import check
    from fusedlib.reference import parse_shape
    shapes = [parse_shape(s) for s in ("84", "39") + check.CUDA_SHAPES]
    assert {algebra.tile_rows(s.batch, s.out_features) for s in shapes} == set(algebra.SIMT_TILES)


def test_every_stage_accepts_every_precision():
    for stage in algebra.STAGES:
        for precision in algebra.PRECISIONS:
            algebra.check_stage_precision(stage, precision)
    with pytest.raises(ValueError, match="stage"):
        algebra.check_stage_precision("fastest", "fp32")
    with pytest.raises(ValueError, match="precision"):
        algebra.check_stage_precision("naive", "fp16")



@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_centred_train_forward_equals_fused_in_float64(problem, momentum):
    """[X − x̄; x̄]Wᵀ gives Zc and μ = x̄Wᵀ; the centred forward is the fused stage's train forward
    in exact arithmetic: outputs and running buffers (84 and 33, zero and negative scales)."""
    ref_a, ref_b = _model(problem, 33, 65, momentum=momentum), _model(problem, 33, 65, momentum=momentum)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(7, 33, generator=g, dtype=torch.float64) + 3.0
    zc, mu = algebra.centred_matmul_nt(x, ref_a.gemm.weight)
    z = x @ ref_a.gemm.weight.T
    assert torch.allclose(zc + mu, z, rtol=0, atol=1e-12)
    assert torch.allclose(mu, z.mean(0), rtol=0, atol=1e-12)
    with torch.no_grad():
        for _ in range(2):
            y_c = algebra.centred_train_forward(problem, x, ref_a.gemm.weight, ref_a.gemm.bias, ref_a.scale,
                                                _bn_state(ref_a))
            y_f = algebra.stage_forward(problem, "fused", x, ref_b.gemm.weight, ref_b.gemm.bias, ref_b.scale,
                                        _bn_state(ref_b), training=True)
            ref_a.bn.num_batches_tracked += 1
            ref_b.bn.num_batches_tracked += 1
    assert torch.allclose(y_c, y_f, rtol=0, atol=1e-12)
    assert torch.allclose(ref_a.bn.running_mean, ref_b.bn.running_mean, rtol=0, atol=1e-12)
    assert torch.allclose(ref_a.bn.running_var, ref_b.bn.running_var, rtol=0, atol=1e-12)


def _offset_gemm_case(sh, seed):
    """Offset inputs X (float32), a weight W scaled as nn.Linear's, and X Wᵀ in float64."""
    g = torch.Generator().manual_seed(seed)
    x = get_inputs(sh, "offset", g)
    w = torch.randn(sh.out_features, sh.in_features, generator=g) / sh.in_features ** 0.5
    return x, w, x.double() @ w.double().T


def _centred_error(v, z64):
    """Normwise error of v − mean(v) against (X Wᵀ − its mean) in float64: what BatchNorm normalises."""
    want = z64 - z64.mean(0)
    return ((v - v.mean(0)).double() - want).norm().item() / want.norm().item()


@pytest.mark.parametrize("precision", ["fp32", "3xtf32"])
@pytest.mark.parametrize("shape", ["2x64->3", "7x33->65", "257x1000->999"])
def test_centred_gemm_resolves_offset_inputs(precision, shape):
    """Offset inputs (column |mean|/std ≈ 1e3, the validation's failing kind): Z' − mean(Z') from
    X Wᵀ loses the digits the offset cancels (normwise ≈ 1e-4 in fp32 and 3xTF32); from the
    centred GEMM it keeps them (≤ 1e-6), at least 100× closer to float64."""
    sh = parse_shape(shape)
    for seed in range(3):
        x, w, z64 = _offset_gemm_case(sh, seed)
        plain = algebra.matmul_nt(x, w, precision)
        zc, _ = algebra.centred_matmul_nt(x, w, precision)
        err = {name: _centred_error(v, z64) for name, v in (("plain", plain), ("centred", zc))}
        assert err["centred"] <= 1e-6, err
        assert err["centred"] * 100 <= err["plain"], err


def test_shifted_gemm_is_the_first_row_plus_its_deviations():
    """[x₀; X[1:] − x₀]Wᵀ: row 0 gives z₀ = x₀Wᵀ, the rest D = (X − x₀)Wᵀ, D's row 0 exactly 0."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(9, 20, generator=g, dtype=torch.float64) + 5.0
    w = torch.randn(11, 20, generator=g, dtype=torch.float64)
    d, z0 = algebra.shifted_matmul_nt(x, w)
    assert torch.equal(d[0], torch.zeros(11, dtype=torch.float64))
    assert torch.allclose(d + z0, x @ w.T, rtol=0, atol=1e-12)
    assert torch.allclose(z0, x[0] @ w.T, rtol=0, atol=1e-12)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "3xtf32"])
def test_train_gemm_shifts_exactly_the_fp32_class_precisions(precision):
    """train_gemm, the kernels' train-mode GEMM: fp32 and 3xTF32 shifted by the first row
    (Z's row 0 exactly 0, Z + z₀ = X Wᵀ), tf32 as matmul_nt with z₀ = 0."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 24, generator=g) + 3.0
    w = torch.randn(10, 24, generator=g)
    z, z0 = algebra.train_gemm(x, w, precision)
    if precision in algebra.SHIFTED_PRECISIONS:
        d, d0 = algebra.shifted_matmul_nt(x, w, precision)
        assert torch.equal(z, d) and torch.equal(z0, d0) and torch.equal(z[0], torch.zeros(10))
        assert torch.allclose((z + z0).double(), x.double() @ w.double().T, rtol=1e-5, atol=1e-4)
    else:
        assert torch.equal(z, algebra.matmul_nt(x, w, precision)) and torch.equal(z0, torch.zeros(10))
    assert algebra.SHIFTED_PRECISIONS == ("fp32", "3xtf32")


@pytest.mark.parametrize("problem", ["84", "33"])
def test_first_row_centring_equals_fused_in_float64(problem):
    """The first-row shift gives the fused stage's train forward in exact arithmetic too."""
    ref_a, ref_b = _model(problem, 33, 65), _model(problem, 33, 65)
    x = torch.randn(7, 33, generator=torch.Generator().manual_seed(8), dtype=torch.float64) - 2.0
    with torch.no_grad():
        y_c = algebra.centred_train_forward(problem, x, ref_a.gemm.weight, ref_a.gemm.bias, ref_a.scale,
                                            _bn_state(ref_a), centre="first_row")
        y_f = algebra.stage_forward(problem, "fused", x, ref_b.gemm.weight, ref_b.gemm.bias, ref_b.scale,
                                    _bn_state(ref_b), training=True)
    assert torch.allclose(y_c, y_f, rtol=0, atol=1e-12)
    assert torch.allclose(ref_a.bn.running_mean, ref_b.bn.running_mean, rtol=0, atol=1e-12)
    assert torch.allclose(ref_a.bn.running_var, ref_b.bn.running_var, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="centre"):
        algebra.centred_train_forward(problem, x, ref_a.gemm.weight, ref_a.gemm.bias, ref_a.scale,
                                      _bn_state(ref_a), centre="median")


@pytest.mark.parametrize("precision", ["fp32", "3xtf32", "tf32"])
@pytest.mark.parametrize("shape", ["2x64->3", "7x33->65", "257x1000->999"])
def test_first_row_shift_resolves_offset_inputs_as_the_mean_does(precision, shape):
    """On offset inputs the first-row shift keeps D − mean(D) as close to float64 as the mean
    centring keeps Zc − mean(Zc) (the worst of 3 seeds within 2×; each ≤ 1e-6 in fp32/3xTF32,
    ≤ 2e-3 in tf32, where X Wᵀ is 0.2–0.8 off), and the mean z₀ + mean(D) within 1e-6 (tf32
    2e-3) of float64's."""
    sh = parse_shape(shape)
    tol = 2e-3 if precision == "tf32" else 1e-6
    worst = {"first_row": 0.0, "mean": 0.0}
    for seed in range(3):
        x, w, z64 = _offset_gemm_case(sh, seed)
        d, z0 = algebra.shifted_matmul_nt(x, w, precision)
        zc, _ = algebra.centred_matmul_nt(x, w, precision)
        err = {name: _centred_error(v, z64) for name, v in (("first_row", d), ("mean", zc))}
        assert err["first_row"] <= tol and err["mean"] <= tol, err
        worst = {k: max(worst[k], err[k]) for k in worst}
        mu = z0.double() + d.double().mean(0)
        assert (mu - z64.mean(0)).norm().item() <= tol * z64.mean(0).norm().item()
    assert worst["first_row"] <= 2 * worst["mean"], worst


@pytest.mark.parametrize("problem", ["84", "33"])
def test_centred_train_forward_is_accurate_on_offset_inputs(problem):
    """The fp32 centred forward (both centrings) against float64 on offset inputs: outputs
    within 1e-5 normwise, where the fused stage's X Wᵀ forward is 10× further off at least."""
    sh = parse_shape("7x33->65")
    ref64 = _model(problem, sh.in_features, sh.out_features)
    g = torch.Generator().manual_seed(2)
    x = get_inputs(sh, "offset", g).double()
    with torch.no_grad():
        want = copy.deepcopy(ref64)(x)
        errs = {}
        for name in ("mean", "first_row", "fused"):
            ref = copy.deepcopy(ref64).float()
            args = (x.float(), ref.gemm.weight, ref.gemm.bias, ref.scale, _bn_state(ref))
            y = (algebra.stage_forward(problem, "fused", *args, training=True) if name == "fused"
                 else algebra.centred_train_forward(problem, *args, centre=name))
            errs[name] = ((y.double() - want).norm() / want.norm()).item()
    for name in ("mean", "first_row"):
        assert errs[name] <= 1e-5, errs
        assert errs[name] * 10 <= errs["fused"], errs


def test_chan_merge_order_is_fixed_and_fp32_class():
    torch.manual_seed(3)
    z = torch.rand(1000, 9) * 2 + 30  # float32, far from zero: the order shows in the last bits
    n, mean, m2 = algebra.tile_partials(z, 7)  # T = 143: quarters of 35–36 tiles, chains of 4–5
    got_mean, got_var = algebra.chan_merge(n, mean, m2)
    mean2, var2 = algebra.column_stats_two_pass(z.double())
    assert torch.allclose(got_mean.double(), mean2, rtol=1e-6) and torch.allclose(got_var.double(), var2, rtol=1e-4)
    # the same order spelled out: quarters, chains within (the means about the quarter's first),
    # each left to right
    quarters = []
    for q in range(4):
        qlo, qhi = 143 * q // 4, 143 * (q + 1) // 4
        chains = []
        for g in range(8):
            lo, hi = qlo + (qhi - qlo) * g // 8, qlo + (qhi - qlo) * (g + 1) // 8
            if lo < hi:
                chains.append(algebra._in_order([(n[t], mean[t] - mean[qlo], m2[t]) for t in range(lo, hi)]))
        cn, cmean, cm2 = algebra._in_order(chains)
        quarters.append((cn, cmean + mean[qlo], cm2))
    acc = algebra._in_order(quarters)
    assert torch.equal(acc[1], got_mean) and torch.equal(acc[2] / acc[0], got_var)
    # another order (left to right over all tiles) gives other last bits
    seq = algebra._in_order([(n[t], mean[t], m2[t]) for t in range(143)])
    assert not (torch.equal(seq[1], got_mean) and torch.equal(seq[2] / seq[0], got_var))


def test_chan_merge_runs_keep_long_chains_fp32_class(monkeypatch):
    """131 072 row tiles (16.8M rows of 128): chains of 4096 tiles. Merged tile by tile, each
    chain adds a tile's M2 (≈ 127) to a sum that grows to ≈ 5·10⁵, and the roundings bias the
    variance by ≈ 1.4e-6; in runs of MERGE_RUN tiles (the kernels' order) it stays at the fp32
    class of the partials themselves."""
    g = torch.Generator().manual_seed(5)
    tiles = 131_072
    n = torch.full((tiles,), 128.0)
    mean = 3 + torch.randn(tiles, 4, generator=g) / 128 ** 0.5
    m2 = 127 * (1 + torch.randn(tiles, 4, generator=g) * (2 / 127) ** 0.5)
    nd, rows = n.double(), n.double().sum()
    want_mean = (nd[:, None] * mean.double()).sum(0) / rows
    want_var = (m2.double().sum(0) + (nd[:, None] * (mean.double() - want_mean) ** 2).sum(0)) / rows

    def var_err() -> float:
        got_mean, got_var = algebra.chan_merge(n, mean, m2)
        assert (got_mean.double() - want_mean).abs().max() <= 1e-6
        return ((got_var.double() - want_var) / want_var).abs().max().item()

    blocked = var_err()
    monkeypatch.setattr(algebra, "MERGE_RUN", tiles)  # one run a chain: tile by tile
    sequential = var_err()
    assert blocked <= 5e-7 and sequential >= 4 * blocked, (blocked, sequential)
