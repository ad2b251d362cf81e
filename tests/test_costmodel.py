"""Cost model: counts checked by hand on a small shape, ordering of the stages, roofline arithmetic."""
import pytest

from fusedlib import algebra
from fusedlib.lab.costmodel import EVAL_GEMM, IMPLS, cost

N, K, M = 8, 16, 4          # small shape for hand counts
NK, MK, NM = N * K, M * K, N * M
GEMM_FLOPS = 2 * N * K * M


def _bytes(c, name):
    return next(p.bytes for p in c.passes if p.name == name)


def test_gemm_only_counts_by_hand():
    c = cost("84", "gemm_only", N, K, M)
    assert [p.name for p in c.passes] == ["GEMM + bias (cuBLAS)"]
    assert c.bytes == 4 * (NK + MK + NM + M)            # read X, W, b; write Z
    assert c.flops == GEMM_FLOPS + NM                    # 2NKM + the bias add
    assert c.intensity == c.flops / c.bytes


def test_naive_84_train_pass_by_pass():
    c = cost("84", "naive", N, K, M, "train")
    assert [p.name for p in c.passes] == [
        "GEMM + bias", "column mean", "column variance", "normalize + affine", "scale", "row max",
        "row sum of exp", "softmax normalize", "running buffers"]
    expected = {
        "GEMM + bias": NK + MK + M + NM,
        "column mean": NM + M,                 # read Z, write μ
        "column variance": NM + M + M,         # read Z and μ, write σ²
        "normalize + affine": NM + 4 * M + NM,  # read Z, μ, σ², γ, β; write Z
        "scale": NM + 1 + NM,                  # read Z and s; write Z
        "row max": NM + N,                     # read Z, write N maxima
        "row sum of exp": NM + N + N,          # read Z and maxima, write N sums
        "softmax normalize": NM + 2 * N + NM,  # read Z, maxima, sums; write Y
        "running buffers": 6 * M,
    }
    for name, elems in expected.items():
        assert _bytes(c, name) == 4 * elems, name
    assert c.bytes == 4 * sum(expected.values())
    # FLOPs: GEMM + bias, mean 1, variance 3, normalize 6, scale 1, softmax 1 + 3 + 3 per element
    assert c.flops == GEMM_FLOPS + NM * (1 + 1 + 3 + 6 + 1 + 1 + 3 + 3) + 6 * M


def test_naive_33_scales_before_the_statistics():
    names = [p.name for p in cost("33", "naive", N, K, M, "train").passes]
    assert names == ["GEMM + bias", "scale", "column mean", "column variance", "normalize + affine",
                     "running buffers"]
    assert [p.name for p in cost("33", "naive", N, K, M, "eval").passes] == [
        "GEMM + bias", "scale", "normalize + affine"]


def test_sums_and_fused_partials_by_hand():
    """Both stages run the same GEMM tile: 7 tiles of 32 rows at fp32 (small grid), 2 of 128
    on tensor cores; the same compulsory bytes, one kernel fewer for fused."""
    n, k, m = 200, 16, 4
    nm = n * m
    for precision, tiles in (("fp32", 7), ("tf32", 2)):
        assert -(-n // algebra.tile_rows(n, m, precision)) == tiles
        partials = 2 * tiles * m                                           # written, then read back
        sums = cost("33", "sums", n, k, m, "train", precision)
        assert sums.passes[0].bytes == 4 * (n * k + m * k + nm + partials)  # Z' and (mean, M2) per tile
        assert _bytes(sums, "finalize (Chan merge, coefficients, running buffers)") == 4 * (partials + 6 * m + 4 * m)
        assert sums.passes[-1].bytes == 4 * (nm + 2 * m + nm)              # read Z', a, c; write Y
        fused = cost("33", "fused", n, k, m, "train", precision)
        assert fused.passes[0].bytes == 4 * (n * k + m * k + 2 * partials + 6 * m + nm + 4 * m)
        assert len(fused.passes) == 2 == len(sums.passes) - 1               # GEMM kernel + one row pass
        assert fused.bytes == sums.bytes and fused.flops == sums.flops


def test_row_passes_read_z_once():
    for impl in ("fold", "sums", "fused"):
        last = cost("84", impl, 64, 32, 60000, "train").passes[-1]        # even rows too wide for shared memory
        assert last.read_bytes == 4 * (64 * 60000 + 2 * 60000) and last.write_bytes == 4 * 64 * 60000


@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("shape", [(1024, 8192, 8192), (16384, 4096, 4096), (128, 1024, 512), (257, 1000, 999)])
@pytest.mark.parametrize("precision", ["fp32", "tf32", "3xtf32"])
def test_each_stage_moves_fewer_bytes(kind, shape, precision):
    b = {impl: cost(kind, impl, *shape, "train", precision).bytes for impl in IMPLS}
    assert b["naive"] > b["fold"] > b["sums"] == b["fused"] > b["gemm_only"]   # sums and fused: one tile
    assert b["eager"] > b["compile"] == b["compile_max_autotune"] > b["gemm_only"]
    e = {impl: cost(kind, impl, *shape, "eval", precision).bytes for impl in IMPLS}
    assert e["naive"] > e["fold"] >= e["sums"] == e["fused"] >= e["gemm_only"]
    for impl in IMPLS:
        c = cost(kind, impl, *shape, "train", precision)
        assert c.flops >= 2 * shape[0] * shape[1] * shape[2]
        assert c.intensity == pytest.approx(c.flops / c.bytes)
        assert c.bytes == pytest.approx(sum(p.bytes for p in c.passes))


def test_tile_counts_follow_the_precision():
    """At 640×1000→1000 the SIMT tile is 64 rows (10 tiles), the tensor-core tile 128 (5 tiles):
    fp32 writes and reads twice the partials of tf32. At 84's shape both are 128 rows."""
    n, k, m = 640, 1000, 1000
    fp32, tf32 = cost("84", "sums", n, k, m), cost("84", "sums", n, k, m, "train", "tf32")
    assert fp32.bytes - tf32.bytes == 4 * 2 * (2 * 10 * m - 2 * 5 * m)
    n, k, m = 1024, 8192, 8192
    assert cost("84", "sums", n, k, m).bytes == cost("84", "sums", n, k, m, "train", "tf32").bytes


@pytest.mark.parametrize("stage", ["naive", "fold", "sums", "fused"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_3xtf32_moves_the_bytes_of_tf32_in_every_stage(stage, mode):
    """3xtf32 splits X and W into TF32 parts on the chip at every call (nothing precomputed):
    the same passes and the same DRAM bytes as tf32 on both tensor-core paths (few row tiles)."""
    n, k, m = 256, 512, 128
    split = cost("33", stage, n, k, m, mode, "3xtf32")
    tf32 = cost("33", stage, n, k, m, mode, "tf32")                   # same 128-row tiles
    assert [p.name for p in split.passes] == [p.name for p in tf32.passes]  # no split pass
    assert split.bytes == tf32.bytes and split.flops == tf32.flops     # useful GEMM FLOPs unchanged
    assert cost("33", stage, n, 510, m, mode, "3xtf32").bytes == cost("33", stage, n, 510, m, mode, "tf32").bytes
    # tf32 moves fp32's bytes, but for the partials of its taller tiles (sums and fused, train)
    fp32 = cost("33", stage, n, k, m, mode, "fp32")
    tiles = {p: -(-n // algebra.tile_rows(n, m, p)) for p in ("fp32", "tf32")}
    assert tiles == {"fp32": 8, "tf32": 2}                            # 8 tiles of 32 rows (small grid)
    statistics = stage in ("sums", "fused") and mode == "train"
    assert fp32.bytes - tf32.bytes == (4 * 2 * 2 * m * (tiles["fp32"] - tiles["tf32"]) if statistics else 0)


@pytest.mark.parametrize("peer", ["eager", "compile", "compile_max_autotune", "gemm_only"])
def test_peers_do_not_change_with_precision(peer):
    costs = [cost("84", peer, 256, 512, 128, "train", p) for p in ("fp32", "tf32", "3xtf32")]
    assert len({c.bytes for c in costs}) == 1 and len({c.flops for c in costs}) == 1
    assert not any(p.name.startswith("split") for c in costs for p in c.passes)


def test_eval_has_no_statistics():
    train = cost("33", "fused", 256, 512, 128, "train")
    evals = cost("33", "fused", 256, 512, 128, "eval")
    assert [p.name for p in evals.passes] == [EVAL_GEMM]
    assert evals.bytes == cost("33", "gemm_only", 256, 512, 128).bytes    # Y straight from the GEMM
    assert evals.bytes < train.bytes


def test_time_adds_each_pass_at_its_roof():
    c = cost("84", "fold", 1024, 8192, 8192)
    t = c.time_ms(tflops=400.0, gbytes_per_s=3000.0)
    expected = sum(max(p.flops / 400e12, p.bytes / 3000e9) for p in c.passes)
    assert t == pytest.approx(expected * 1e3)
    gemm = c.passes[0]
    assert gemm.flops / 400e12 > gemm.bytes / 3000e9                       # the GEMM is compute-bound


def test_table_and_dict_views():
    c = cost("84", "sums", 1024, 8192, 8192)
    rows = c.table()
    assert [r["pass"] for r in rows] == [p.name for p in c.passes]
    assert sum(r["MB"] for r in rows) == pytest.approx(c.bytes / 1e6)
    d = c.as_dict()
    assert d["flops"] == c.flops and d["bytes"] == c.bytes and len(d["passes"]) == len(c.passes)


def test_errors():
    with pytest.raises(ValueError, match="impl"):
        cost("84", "magic", 1, 1, 1)
    with pytest.raises(ValueError, match="kind"):
        cost("39", "fused", 1, 1, 1)
    with pytest.raises(ValueError, match="mode"):
        cost("84", "fused", 1, 1, 1, mode="infer")
    with pytest.raises(ValueError, match="precision"):
        cost("84", "fused", 1, 1, 1, precision="fp8")
    with pytest.raises(ValueError, match="shape"):
        cost("84", "fused", 0, 1, 1)


@pytest.mark.parametrize("stage", ["naive", "fold", "sums", "fused"])
def test_3xtf32_pass_over_w_where_row_tiles_are_many(stage, monkeypatch):
    """On the Hopper path 3xtf32 makes W's parts by a pass from W_PASS_ROW_TILES row tiles on
    (39's 16384 rows: 128): the pass reads W and writes both parts, the GEMM reads both parts
    instead of W, 4·M·K floats more than tf32; at 1024 rows (8 row tiles), on the mma.sync path
    and with the switch set to smem, the bytes of tf32. The rule is the kernels'."""
    from fusedlib import engine
    from fusedlib.build import KERNEL_DIR
    assert f"constexpr int kWPassRowTiles = {engine.W_PASS_ROW_TILES};" in (KERNEL_DIR / "gemm_wgmma.cuh").read_text()
    monkeypatch.delenv(engine.W_SPLIT_VAR, raising=False)
    k, m = 4096, 4096
    many = cost("33", stage, 16384, k, m, "train", "3xtf32")
    assert many.passes[0].name == "W's TF32 parts (3xtf32 pass)"
    assert many.bytes - cost("33", stage, 16384, k, m, "train", "tf32").bytes == 4 * 4 * m * k
    for n, path in ((1024, "wgmma"), (16384, "mma")):
        assert cost("33", stage, n, k, m, "train", "3xtf32", path).bytes == cost("33", stage, n, k, m, "train", "tf32").bytes
    monkeypatch.setenv(engine.W_SPLIT_VAR, "smem")
    assert cost("33", stage, 16384, k, m, "train", "3xtf32").bytes == cost("33", stage, 16384, k, m, "train", "tf32").bytes
    monkeypatch.setenv(engine.W_SPLIT_VAR, "pass")
    assert cost("33", stage, 1024, k, m, "train", "3xtf32").passes[0].name.startswith("W's TF32 parts")


@pytest.mark.parametrize("stage", ["naive", "fold", "sums", "fused"])
def test_3xtf32_pass_over_x_where_the_gemm_swaps(stage, monkeypatch):
    """On the Hopper path 3xtf32 swaps the operands where the batch is at most a quarter of
    out_features and the 128 × 128 tiles number at least SWAP_MIN_TILES (84's and 33's 1024 × 8192
    → 8192: 512): a pass reads X and writes both parts, the GEMM reads both parts instead of X,
    4·N·K floats more than tf32; not at 39's shape (W's pass), at a shape of too few tiles, on the
    mma.sync path, or with the switch set to smem. The rule is the kernels'."""
    from fusedlib import engine
    from fusedlib.build import KERNEL_DIR
    src = (KERNEL_DIR / "gemm_wgmma.cuh").read_text()
    assert f"constexpr int kSwapMinTiles = {engine.SWAP_MIN_TILES};" in src
    assert "return 4L * n <= m && (long)ceil_div(n, kSplitSwap) * ceil_div(m, kWgBM) >= kSwapMinTiles" in src
    monkeypatch.delenv(engine.W_SPLIT_VAR, raising=False)
    n, k, m = 1024, 8192, 8192
    swapped = cost("84", stage, n, k, m, "train", "3xtf32")
    assert swapped.passes[0].name == "X's TF32 parts (3xtf32 pass)"
    assert swapped.bytes - cost("84", stage, n, k, m, "train", "tf32").bytes == 4 * 4 * n * k
    for shape, path in (((1024, k, m), "mma"), ((16384, 4096, 4096), "wgmma"), ((256, k, 4096), "wgmma"),
                        ((4096, k, m), "wgmma")):
        assert not engine.x_parts_pass("3xtf32", path, shape[0], shape[2]), (shape, path)
        assert cost("84", stage, *shape, "train", "3xtf32", path).passes[0].name != "X's TF32 parts (3xtf32 pass)"
    assert cost("84", stage, n, k, m, "train", "3xtf32").passes == swapped.passes
    for peer in ("eager", "compile", "gemm_only"):
        assert cost("84", peer, n, k, m, "train", "3xtf32").bytes == cost("84", peer, n, k, m, "train", "tf32").bytes
    monkeypatch.setenv(engine.W_SPLIT_VAR, "smem")
    assert cost("84", stage, n, k, m, "train", "3xtf32").bytes == cost("84", stage, n, k, m, "train", "tf32").bytes
    monkeypatch.setenv(engine.W_SPLIT_VAR, "swap")
    assert cost("84", stage, 300, 64, 100, "train", "3xtf32").passes[0].name == "X's TF32 parts (3xtf32 pass)"


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_16bit_bytes_by_hand(dtype):
    """bf16/fp16: X, W and Y at 2 bytes an element; naive's and fold's Z in float32, sums' and
    fused's Z' in the dtype in train mode (algebra.Z16_STAGES), the peers' Z in the dtype; vectors
    and the statistics' partials at 4 bytes; FLOPs unchanged. The stages' GEMM tile is tf32's."""
    g = cost("84", "gemm_only", N, K, M, "train", dtype)
    assert g.bytes == 2 * (NK + MK + NM) + 4 * M and g.flops == GEMM_FLOPS + NM
    naive = cost("84", "naive", N, K, M, "train", dtype)
    assert _bytes(naive, "GEMM + bias") == 2 * (NK + MK) + 4 * M + 4 * NM      # Z kept in float32
    assert _bytes(naive, "softmax normalize") == 4 * (NM + 2 * N) + 2 * NM     # Y in the dtype
    assert _bytes(naive, "row max") == 4 * (NM + N)
    eager = cost("84", "eager", N, K, M, "train", dtype)
    assert _bytes(eager, "softmax") == 2 * (NM + NM)                          # eager's Z and Y: 16-bit
    y33 = cost("33", "fused", N, K, M, "eval", dtype)
    assert y33.bytes == 2 * (NK + MK + NM) + 4 * M                           # Y straight from the GEMM
    n, k, m = 640, 1000, 1000
    assert cost("84", "sums", n, k, m, "train", dtype).passes[0].write_bytes == 2 * n * m + 4 * 2 * 5 * m  # 5 tiles of 128
    for impl in IMPLS:
        assert cost("84", impl, N, K, M, "train", dtype).flops == cost("84", impl, N, K, M, "train", "tf32").flops


@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_16bit_saves_the_operand_bytes(kind, mode):
    """At 84's shape every implementation moves fewer bytes in bf16 than at tf32; the stages save
    exactly half of X's, W's and Y's bytes, and in train mode sums and fused half of Z''s too (one
    write, one read), and the ladder's order of bytes holds."""
    from fusedlib.algebra import Z16_STAGES
    from fusedlib.lab.costmodel import ELEMENT_BYTES
    n, k, m = 1024, 8192, 8192
    for impl in IMPLS:
        assert cost(kind, impl, n, k, m, mode, "bf16").bytes < cost(kind, impl, n, k, m, mode, "tf32").bytes
    for stage in ("naive", "fold", "sums", "fused"):
        saved = cost(kind, stage, n, k, m, mode, "tf32").bytes - cost(kind, stage, n, k, m, mode, "bf16").bytes
        z_saved = 2 * n * m if mode == "train" and stage in Z16_STAGES else 0
        assert saved == (4 - ELEMENT_BYTES["bf16"]) * (n * k + m * k + n * m + z_saved)
    b = {impl: cost(kind, impl, n, k, m, mode, "bf16").bytes for impl in IMPLS}
    assert b["naive"] > b["fold"] >= b["sums"] == b["fused"] >= b["gemm_only"]


def test_gemm_rate_of_16bit_and_its_source():
    """bf16/fp16 at the measured bf16 rate when env.json has it, else twice tf32's, and the
    caller is told which; at the same ceilings the GEMM's predicted time halves against tf32."""
    from fusedlib.lab.costmodel import gemm_tflops
    ceil = {"bandwidth": 3000.0, "fp32": 50.0, "tf32": 400.0}
    assert gemm_tflops("bf16", ceil) == (800.0, "2 × tf32") == gemm_tflops("fp16", ceil)
    assert gemm_tflops("bf16", {**ceil, "bf16": 700.0}) == (700.0, "bf16")
    assert gemm_tflops("3xtf32", ceil) == (pytest.approx(400.0 / 3), "tf32 / 3")
    with pytest.raises(ValueError, match="precision"):
        gemm_tflops("fp8", ceil)
    n, k, m = 1024, 8192, 8192
    tf32 = cost("84", "fused", n, k, m, "train", "tf32")
    bf16 = cost("84", "fused", n, k, m, "train", "bf16")
    t_tf32 = tf32.passes[0].flops / (gemm_tflops("tf32", ceil)[0] * 1e12)
    t_bf16 = bf16.passes[0].flops / (gemm_tflops("bf16", ceil)[0] * 1e12)
    assert t_bf16 == pytest.approx(t_tf32 / 2)                                # compute-bound GEMM: half
    whole = {p: c.time_ms(gemm_tflops(p, ceil)[0], ceil["bandwidth"]) for p, c in (("tf32", tf32), ("bf16", bf16))}
    assert whole["bf16"] < whole["tf32"]
    gemm_share = {p: c.passes[0].flops / (gemm_tflops(p, ceil)[0] * 1e12) * 1e3 / whole[p]
                  for p, c in (("tf32", tf32), ("bf16", bf16))}
    assert gemm_share["bf16"] < gemm_share["tf32"]                            # the other passes weigh more
    from fusedlib.lab.course import gemm_rate
    assert gemm_rate("bf16", ceil) == 800.0 and gemm_rate("tf32", ceil) == 400.0
