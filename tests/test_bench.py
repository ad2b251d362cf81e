"""Benchmark harness parts that run without a GPU: CSV contract, rows, scoped TF32."""
import csv

import pytest
import torch

from fusedlib import bench
from fusedlib.reference import parse_shape

ENV = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "cuda": "13.0", "commit": "abc1234"}


def test_gpu_slug():
    assert bench.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert bench.gpu_slug("NVIDIA H200") == "h200"
    assert bench.gpu_slug("Tesla V100-SXM2") == "teslav100sxm2"


def test_row_follows_contract_and_cost_model(tmp_path):
    shape = parse_shape("84")
    row = bench.make_row("84", shape, "train", "tf32", "fused", (0.5, 0.45, 0.6), 50, 3e-4, ENV)
    assert list(row) == bench.COLUMNS
    assert row["tflops"] == pytest.approx(137.5e9 / 0.5e-3 / 1e12, rel=0.01)  # ≈ 137.5 GFLOP in 0.5 ms
    assert row["gbytes_per_s"] > 0 and row["median_ms"] == 0.5 and row["iters"] == 50
    path = tmp_path / "bench.csv"
    bench.append_row(path, row)
    bench.append_row(path, {**row, "impl": "eager"})
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["impl"] for r in rows] == ["fused", "eager"]
    assert list(rows[0]) == bench.COLUMNS
    assert path.read_text().count("median_ms") == 1  # one header
    with pytest.raises(ValueError, match="columns"):
        bench.append_row(path, {"problem": "84"})


def test_peer_precision_is_scoped_and_restored():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    with bench.peer_precision("tf32"):
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    with pytest.raises(RuntimeError):
        with bench.peer_precision("tf32"):
            raise RuntimeError("boom")
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


def test_bench_without_gpu_exits_2(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from fusedlib import cli
    assert cli.main(["bench", "--problem", "84"]) == 2
    assert "CUDA" in capsys.readouterr().err


def test_readme_results_table(tmp_path):
    import pandas as pd

    from fusedlib import report
    shape = parse_shape("84")
    path = tmp_path / "bench.csv"
    for impl, ms in (("eager", 2.0), ("compile", 1.6), ("gemm_only", 0.8), ("fused", 1.0)):
        bench.append_row(path, bench.make_row("84", shape, "train", "fp32", impl, (ms, ms, ms), 50, 1e-6, ENV))
    bench.append_row(path, bench.make_row("84", shape, "train", "3xtf32", "fused", (0.5,) * 3, 50, 1e-6, ENV))
    table = report.results_table(pd.read_csv(path, dtype={"problem": str}))
    assert "| 84 @1024×8192→8192 | train | fp32 | fused | 1.000 | 2.00× | 1.60× | 1.25 | 1.0e-06 |" in table
    assert "| 84 @1024×8192→8192 | train | 3xtf32 | fused | 0.500 | 4.00× | 3.20× | 0.62 | 1.0e-06 |" in table
    readme = "a\n<!-- results-table:begin -->\nold\n<!-- results-table:end -->\nb"
    out = report.render_readme(readme, table, report.TABLE_BEGIN, report.TABLE_END)
    assert "old" not in out and out.startswith("a\n") and out.endswith("b") and table in out
    with pytest.raises(ValueError, match="markers"):
        report.render_readme("no markers", table, report.TABLE_BEGIN, report.TABLE_END)


def test_dry_run_of_the_whole_harness_on_cpu(tmp_path):
    """The bench loop end to end on the CPU algebra: every table, every impl that exists at
    each precision, one row each, errors of the right size."""
    import pandas as pd

    from fusedlib import cli
    out = tmp_path / "bench.csv"
    rc = cli.main(["bench", "--device", "cpu", "--out", str(out), "--problem", "84,39", "--shape", "9x40->24",
                   "--impl", "naive,fused,eager,gemm_only", "--iters", "3", "--warmup", "1"])
    assert rc == 0
    df = pd.read_csv(out, dtype={"problem": str})
    assert list(df.columns) == bench.COLUMNS
    # per problem and mode: fp32 (4 impls) + tf32 (fused, eager, gemm_only) + 3xtf32 (fused)
    assert len(df) == 2 * 2 * (4 + 3 + 1)
    fp32 = df[(df.precision != "tf32") & (df.impl != "gemm_only")]
    assert (fp32.rel_err < 1e-5).all() and (df.median_ms > 0).all()
    assert set(df[df.precision == "3xtf32"].impl) == {"fused"}
    assert cli.main(["bench", "--device", "cpu"]) == 2  # a dry run needs --out
