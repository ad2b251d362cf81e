"""Figures from a synthetic bench.csv/env.json (the CSV contract), in all three formats."""
import json

import pytest

from fusedlib import bench, figures
from fusedlib.reference import parse_shape

ENV = {"gpu": "synthetic", "torch": "x", "cuda": "x", "commit": "x"}


def _synthetic_results(path):
    shapes = {"84": ["84", "v0", "1024x1024->1024", "1024x8192->8192", "256x4096->4096", "4096x4096->4096"],
              "33": ["33", "1024x2048->2048", "1024x4096->4096"], "39": ["39", "1024x4096->4096"]}
    for problem, plist in shapes.items():
        for s in plist:
            shape = parse_shape(s)
            for impl in figures.STAGE_ORDER + figures.PEERS:
                for prec in ("fp32", "tf32", "3xtf32"):
                    if (prec != "fp32" and impl in ("naive", "fold", "sums")) or (prec == "3xtf32" and impl in figures.PEERS):
                        continue
                    ms = 1e-9 * shape.batch * shape.in_features * shape.out_features * (1 if prec == "fp32" else 0.2)
                    row = bench.make_row(problem, shape, "train", prec, impl, (ms, ms, ms), 50, 1e-6, ENV)
                    bench.append_row(path / "bench.csv", row)
    (path / "env.json").write_text(json.dumps({
        "gpu": "synthetic", "measured": {"copy_gbytes_per_s": 3000, "gemm_fp32_tflops": 51, "gemm_tf32_tflops": 412},
        "datasheet": bench.DATASHEET_H100}))


def test_all_figures_in_three_formats(tmp_path):
    _synthetic_results(tmp_path)
    paths = figures.make_all(tmp_path, tmp_path / "figures")
    assert len(paths) == 12
    for name in ("cancellation", "roofline", "throughput", "breakdown"):
        for fmt in figures.FORMATS:
            f = tmp_path / "figures" / f"{name}.{fmt}"
            assert f in paths and f.stat().st_size > 1000


def test_missing_results_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="bench.csv"):
        figures.make_all(tmp_path, tmp_path)
    assert (tmp_path / "cancellation.svg").exists()  # drawn without GPU results


def test_cancellation_lab_shows_the_textbook_failure():
    from fusedlib.course import cancellation_lab
    lab = cancellation_lab(ratios=(1, 1000))
    err = lab.set_index(["|mean|/std", "method"])["max relative error"]
    assert err[1000, "textbook Σz, Σz²"] > 0.1 > 1e-5 > err[1000, "Chan merge"]
    assert err[1, "textbook Σz, Σz²"] < 1e-4
