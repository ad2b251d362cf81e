"""Figures and the README table from synthetic results that follow the CSV contracts."""
import json

import pytest

from fusedlib import cli
from fusedlib.lab import figures
from fusedlib.lab import bench
from fusedlib.reference import PRESETS, parse_shape

ENV = {"gpu": "synthetic", "torch": "x", "cuda": "x", "commit": "x"}
STAMP = "2026-01-01T00:00:00+00:00"


def _row(problem, shape, mode, prec, impl, ms, stamp=STAMP, rel_err=1e-6):
    """A bench.csv row of ``ms`` (median, min and max) written at ``stamp``."""
    row = bench.make_row(problem, shape, mode, prec, impl, (ms,) * 3, 50, rel_err, ENV)
    row["timestamp"] = stamp
    return row
FIGURES = ("roofline", "throughput", "in_features", "breakdown", "ladder")
README = """# title

text before

<!-- results-table:begin -->
old table
<!-- results-table:end -->

text after
"""


def _synthetic_results(path, profile=True):
    """bench.csv at the presets and on both sweeps, env.json, and (optionally) profile.csv."""
    shapes = {"84": ["84", "v0", "1024x1024->1024", "1024x2048->2048", "256x4096->4096", "1024x4096->4096"],
              "33": ["33", "v0", "1024x2048->2048", "256x4096->4096", "1024x4096->4096"], "39": ["39"]}
    for problem, names in shapes.items():
        for name in names:
            shape = parse_shape(name)
            for mode in ("train", "eval"):
                for prec in ("fp32", "tf32", "3xtf32"):
                    for impl in bench.IMPLS:
                        if not bench.available(impl, prec):
                            continue
                        ms = 1e-9 * shape.batch * shape.in_features * shape.out_features * (1 if prec == "fp32" else 0.2)
                        row = bench.make_row(problem, shape, mode, prec, impl, (ms, ms, ms), 50, 1e-6, ENV)
                        row["timestamp"] = STAMP     # one run (a real table's rows share one timestamp)
                        bench.append_row(path / "bench.csv", row)
    (path / "env.json").write_text(json.dumps({
        "gpu": "synthetic", "measured": {"copy_gbytes_per_s": 3000, "gemm_fp32_tflops": 51, "gemm_tf32_tflops": 412},
        "datasheet": bench.DATASHEET_H100}))
    if profile:
        rows = []
        for problem in ("84", "33", "39"):
            table = bench.Table(problem, PRESETS[problem], "train", "fp32", ())
            for impl in bench.STAGE_IMPLS:
                kernels = [(f"void fl::gemm_{impl}<64>(fl::Problem)", 1, 2000.0), ("fl::row_pass(float const*)", 1, 30.0)]
                rows += bench.profile_rows(table, impl, kernels)
        bench.append_rows(path / "profile.csv", rows, bench.PROFILE_COLUMNS)


@pytest.mark.parametrize("profile", [True, False])
def test_figures_in_three_formats(tmp_path, profile):
    _synthetic_results(tmp_path, profile)
    paths = figures.make_all(tmp_path, tmp_path / "figures")
    for name in FIGURES + ("cancellation",):
        for fmt in figures.FORMATS:
            f = tmp_path / "figures" / f"{name}.{fmt}"
            assert f in paths and f.stat().st_size > 1000
    assert len(paths) == 18
    svg = (tmp_path / "figures" / "breakdown.svg").read_text()
    assert ("predicted" in svg) != profile
    if not profile:  # the predicted breakdown: a bar for every stage at every precision, in 3 panels
        texts = _svg_texts(tmp_path / "figures" / "breakdown.svg")
        assert [texts.count(stage) for stage in bench.STAGE_IMPLS] == [3 * 3] * 4
        assert [texts.count(prec) for prec in ("fp32", "tf32", "3xtf32")] == [3 * 4] * 3


def test_throughput_without_sweeps_says_how_to_measure_them(tmp_path):
    """A bench.csv of the KernelBench shapes alone: one line naming the command, not empty panels."""
    for problem in ("84", "33"):
        for impl in ("fused", "eager"):
            bench.append_row(tmp_path / "bench.csv", _row(problem, PRESETS[problem], "train", "tf32", impl, 0.4))
    (tmp_path / "env.json").write_text(json.dumps({"gpu": "synthetic"}))
    table, _, _ = figures.load_results(tmp_path)
    paths = figures.throughput(table, tmp_path)
    text = " ".join(_svg_texts(tmp_path / "throughput.svg")).replace("- -", "--")  # (SVG comments split "--")
    assert len(paths) == len(figures.FORMATS)
    assert "holds no size sweep" in text and "--sweep batch --sweep features" in text
    assert "tf32: against batch" not in text  # no per-precision panels


def test_in_features_sweep_shapes():
    """--sweep in_features: K alone at batch 1024 -> 8192 out_features (84's other two sizes)."""
    assert bench.sweep_shapes("in_features", in_features=(2048, 4096)) == [parse_shape("1024x2048->8192"),
                                                                          parse_shape("1024x4096->8192")]
    with pytest.raises(ValueError, match="in_features"):
        bench.sweep_shapes("out_features")


def test_gemm_time_lines_recover_the_lines(tmp_path):
    """Medians made exactly a + b·K give back a and b; a point moved off its line shows in the
    residual column; the KernelBench shape of another problem and eval rows are not mixed in."""
    lines = {"fused": (50.0, 22.5), "gemm_only": (2.0, 22.0), "naive": (150.0, 23.0)}
    for k in (2048, 4096, 8192, 16384):
        for impl, (a, b) in lines.items():
            us = a + b * k / 1024 + (10.0 if impl == "naive" and k == 4096 else 0.0)
            for problem, mode in (("84", "train"), ("84", "eval"), ("33", "train")):
                bench.append_row(tmp_path / "bench.csv", _row(problem, parse_shape(f"1024x{k}->8192"), mode, "bf16", impl,
                                                              us / 1e3 * (1 if (problem, mode) == ("84", "train") else 3)))
    (tmp_path / "env.json").write_text("{}")
    table = figures.load_results(tmp_path)[0]
    fits = figures.gemm_time_lines(table).set_index("impl")
    assert list(fits.precision.unique()) == ["bf16"] and set(fits.index) == set(lines)
    for impl in ("fused", "gemm_only"):
        a, b = lines[impl]
        assert fits.loc[impl, "a_us"] == pytest.approx(a, abs=1e-6)
        assert fits.loc[impl, "b_us_per_1024"] == pytest.approx(b, rel=1e-9)
        assert fits.loc[impl, "max_residual_pct"] < 1e-6 and fits.loc[impl, "points"] == 4
        assert fits.loc[impl, "b_err_us_per_1024"] < 1e-6 and fits.loc[impl, "a_err_us"] < 1e-6  # on its line
    assert fits.loc["naive", "max_residual_pct"] > 1.0 and fits.loc["naive", "b_err_us_per_1024"] > 0.1
    ratio, err = figures.slope_ratio(fits.reset_index(), "bf16", "fused")
    assert ratio == pytest.approx(22.5 / 22.0, rel=1e-9) and err < 1e-6
    paths = figures.in_features_lines(table, tmp_path)
    assert len(paths) == len(figures.FORMATS)
    assert any("fused: 50 µs + 22.50 µs per 1024 of K" in t for t in _svg_texts(tmp_path / "in_features.svg"))


def test_gemm_time_lines_standard_errors(tmp_path):
    """The slopes' and intercepts' standard errors are ordinary least squares': the residuals'
    variance over n − 2 degrees of freedom; slope_ratio propagates the two slopes' errors."""
    import numpy as np
    ks = np.array([2048.0, 4096.0, 8192.0, 16384.0])
    noise = {"fused": [0.8, -1.1, 0.5, -0.2], "gemm_only": [-0.6, 0.9, -0.4, 0.1]}
    lines = {"fused": (30.0, 46.6), "gemm_only": (-6.0, 46.4)}
    for impl, (a, b) in lines.items():
        for k, e in zip(ks, noise[impl]):
            us = a + b * k / 1024 + e
            bench.append_row(tmp_path / "bench.csv", _row("84", parse_shape(f"1024x{int(k)}->8192"), "train", "tf32",
                                                          impl, us / 1e3))
    (tmp_path / "env.json").write_text("{}")
    fits = figures.gemm_time_lines(figures.load_results(tmp_path)[0])
    t = fits.set_index("impl")
    for impl, (a, b) in lines.items():
        us = a + b * ks / 1024 + np.array(noise[impl])
        design = np.stack([np.ones_like(ks), ks], axis=1)
        coef, ssr, *_ = np.linalg.lstsq(design, us, rcond=None)
        cov = ssr[0] / (len(ks) - 2) * np.linalg.inv(design.T @ design)
        assert t.loc[impl, "b_us_per_1024"] == pytest.approx(coef[1] * 1024, rel=1e-9)
        assert t.loc[impl, "b_err_us_per_1024"] == pytest.approx(np.sqrt(cov[1, 1]) * 1024, rel=1e-6)
        assert t.loc[impl, "a_err_us"] == pytest.approx(np.sqrt(cov[0, 0]), rel=1e-6)
    ratio, err = figures.slope_ratio(fits, "tf32", "fused")
    bf, bc = t.loc["fused", "b_us_per_1024"], t.loc["gemm_only", "b_us_per_1024"]
    sf, sc = t.loc["fused", "b_err_us_per_1024"], t.loc["gemm_only", "b_err_us_per_1024"]
    assert ratio == pytest.approx(bf / bc, rel=1e-12)
    assert err == pytest.approx(bf / bc * np.sqrt((sf / bf) ** 2 + (sc / bc) ** 2), rel=1e-12) and err > 0
    with pytest.raises(KeyError):
        figures.slope_ratio(fits, "bf16", "fused")


def test_roofline_draws_the_3xtf32_roof(tmp_path):
    """With 3xtf32 rows the roofline draws 3xTF32's roofs at a third of tf32's, measured and
    datasheet; without them, none."""
    _synthetic_results(tmp_path, profile=False)
    df, env, _ = figures.load_results(tmp_path)
    figures.roofline(df, env, tmp_path / "f")
    texts = _svg_texts(tmp_path / "f" / "roofline.svg")
    assert "3xtf32 roof, tf32 measured / 3: 137 TFLOP/s" in texts                   # 412 / 3
    assert f"3xtf32 roof, tf32 datasheet / 3: {bench.DATASHEET_H100['tf32_tflops'] / 3:.0f} TFLOP/s" in texts
    figures.roofline(df[df.precision != "3xtf32"], env, tmp_path / "g")
    assert not any(t.startswith("3xtf32 roof") for t in _svg_texts(tmp_path / "g" / "roofline.svg"))


def test_in_features_without_the_sweep_says_how_to_measure_it(tmp_path):
    bench.append_row(tmp_path / "bench.csv", _row("84", PRESETS["84"], "train", "bf16", "fused", 0.23))
    (tmp_path / "env.json").write_text("{}")
    assert figures.gemm_time_lines(figures.load_results(tmp_path)[0]).empty
    figures.in_features_lines(figures.load_results(tmp_path)[0], tmp_path)
    text = " ".join(_svg_texts(tmp_path / "in_features.svg")).replace("- -", "--")
    assert "holds no in_features sweep" in text and "--sweep in_features" in text


def _svg_texts(path):
    """The texts of a matplotlib SVG (each drawn text is preceded by a comment holding it)."""
    import re
    return re.findall(r"<!-- (.*?) -->", path.read_text(), flags=re.S)


def test_ladder_skips_missing_rows(tmp_path):
    """Rows as the first GPU run had them (naive, fold and sums at fp32 only; fused at every
    precision; peers at fp32 and tf32) and none at all for problem 33: the ladder is drawn,
    with a measured bar (and its label) only where a row exists and the predictions everywhere."""
    rows = [("naive", "fp32", 7.71), ("fold", "fp32", 7.52), ("sums", "fp32", 7.46), ("fused", "fp32", 8.83),
            ("fused", "tf32", 0.412), ("fused", "3xtf32", 1.37), ("eager", "fp32", 2.78), ("eager", "tf32", 0.449),
            ("gemm_only", "fp32", 2.66), ("gemm_only", "tf32", 0.331)]
    for problem in ("84", "39"):
        for impl, prec, ms in rows:
            ms = ms * (4 if problem == "39" else 1)
            bench.append_row(tmp_path / "bench.csv", _row(problem, PRESETS[problem], "train", prec, impl, ms))
    # An earlier run of 84 fp32 with another peer and other times: not in the ladder (one run a group).
    for impl, ms in (("naive", 9.99), ("compile_max_autotune", 5.55)):
        bench.append_row(tmp_path / "bench.csv", _row("84", PRESETS["84"], "train", "fp32", impl, ms,
                                                      stamp="2025-12-31T00:00:00+00:00"))
    bench.append_row(tmp_path / "bench.csv",    # another shape and the eval mode: not in the ladder
                     _row("84", PRESETS["v0"], "train", "tf32", "naive", 0.0123, rel_err=1e-3))
    bench.append_row(tmp_path / "bench.csv", _row("84", PRESETS["84"], "eval", "tf32", "sums", 0.0456, rel_err=1e-3))
    env = {"gpu": "synthetic", "measured": {"copy_gbytes_per_s": 3000, "gemm_fp32_tflops": 51, "gemm_tf32_tflops": 412}}
    (tmp_path / "env.json").write_text(json.dumps(env))
    df, _, _ = figures.load_results(tmp_path)
    paths = figures.ladder(df, env, tmp_path / "f")
    assert [p.name for p in paths] == [f"ladder.{fmt}" for fmt in figures.FORMATS]
    assert all(p.stat().st_size > 1000 for p in paths)
    texts = _svg_texts(tmp_path / "f" / "ladder.svg")
    labels = [t.removesuffix(" ms") for t in texts if t.endswith(" ms")]
    assert labels == ["7.71", "7.52", "7.46", "8.83", "0.412", "1.37",      # 84: the six measured stage rows
                      "30.8", "30.1", "29.8", "35.3", "1.65", "5.48"]       # 39 (33: none)
    assert texts.count("no train-mode rows at this shape") == 3             # problem 33's three panels
    assert any("reference of the 3xtf32 panels" in t for t in texts)
    assert any(t.startswith("black dashes: cost-model prediction") for t in texts)
    # % saved on each step that has a measured stage before it (84 and 39 at fp32: three steps each)
    saved = [f"{t}\n{texts[i + 1]}" for i, t in enumerate(texts) if t in ("saves", "costs")]  # an SVG text a line
    assert saved == [figures.saved_label(7.71, 7.52), figures.saved_label(7.52, 7.46), figures.saved_label(7.46, 8.83),
                     figures.saved_label(30.84, 30.08), figures.saved_label(30.08, 29.84),
                     figures.saved_label(29.84, 35.32)]
    assert saved[0] == "saves\n2.5 %" and saved[2] == "costs\n18.4 %"
    assert "9.99" not in texts and "compile_max_autotune" not in " ".join(texts)
    with pytest.raises(KeyError):
        figures.ladder(df, {"gpu": "no ceilings"}, tmp_path / "g")


def test_predicted_ms_is_the_cost_model_at_the_ceilings():
    from fusedlib.lab.costmodel import cost
    env = {"measured": {"copy_gbytes_per_s": 3000, "gemm_fp32_tflops": 50, "gemm_tf32_tflops": 400}}
    s = PRESETS["84"]
    for prec, rate in (("fp32", 50), ("tf32", 400), ("3xtf32", 400 / 3)):
        c = cost("84", "fold", s.batch, s.in_features, s.out_features, "train", prec)
        assert figures.predicted_ms("84", "fold", prec, env) == pytest.approx(c.time_ms(rate, 3000))
    assert figures.predicted_ms("84", "fused", "tf32", env) < figures.predicted_ms("84", "fused", "3xtf32", env)


def test_predicted_ms_of_16bit_at_the_bf16_rate():
    """bf16/fp16 predictions: the GEMM at env.json's gemm_bf16_tflops, or at twice tf32's
    without it; the same cost model as the table (2-byte X, W, Y)."""
    from fusedlib.lab.costmodel import cost
    env = {"measured": {"copy_gbytes_per_s": 3000, "gemm_fp32_tflops": 50, "gemm_tf32_tflops": 400}}
    s = PRESETS["84"]
    for prec in ("bf16", "fp16"):
        c = cost("84", "fused", s.batch, s.in_features, s.out_features, "train", prec)
        assert figures.predicted_ms("84", "fused", prec, env) == pytest.approx(c.time_ms(800, 3000))
        measured = {"measured": {**env["measured"], "gemm_bf16_tflops": 600}}
        assert figures.predicted_ms("84", "fused", prec, measured) == pytest.approx(c.time_ms(600, 3000))
    assert figures.predicted_ms("84", "fused", "bf16", env) < figures.predicted_ms("84", "fused", "tf32", env)
    assert [r[2] for r in figures.bf16_roofs(env)] == ["2 × the measured tf32 (bf16 not measured)"]
    assert [r[:2] for r in figures.bf16_roofs({**measured, "datasheet": bench.DATASHEET_H100})] == [
        (600, "-"), (989.0, ":")]


def test_ladder_and_roofline_draw_16bit_rows(tmp_path):
    """With bf16 rows (no fp16) at the KernelBench shapes the ladder gets a fourth column of
    panels (titles "... bf16", eager and the GEMM alone in bf16 as its lines) and the roofline
    bf16 points and roofs; the 3xtf32 panels keep their fp32 stand-in."""
    _synthetic_results(tmp_path, profile=False)
    for problem in ("84", "33", "39"):
        for impl in bench.IMPLS:
            ms = {"eager": 0.5, "gemm_only": 0.25}.get(impl, 0.3) * (2 if problem == "39" else 1)
            bench.append_row(tmp_path / "bench.csv", _row(problem, PRESETS[problem], "train", "bf16", impl, ms,
                                                          rel_err=3e-3))
    df, env, _ = figures.load_results(tmp_path)
    figures.ladder(df, env, tmp_path / "f")
    texts = _svg_texts(tmp_path / "f" / "ladder.svg")
    assert [t for t in texts if t.endswith(", bf16")] == [f"{p} @{PRESETS[p]}, bf16".replace(">", "&gt;")
                                                         for p in ("84", "33", "39")]
    assert not any(t.endswith(", fp16") for t in texts)
    assert texts.count("0.3 ms") == 2 * 4 and texts.count("0.6 ms") == 4        # the stages of 84 and 33, of 39
    assert any(t.startswith("bf16/fp16 predictions: the GEMM at 2 × the measured tf32 rate") for t in texts)
    assert any("reference of the 3xtf32 panels" in t for t in texts)
    figures.roofline(df, env, tmp_path / "f")
    texts = _svg_texts(tmp_path / "f" / "roofline.svg")
    assert "bf16" in texts and "fp16" not in texts                               # the marker's legend entry
    assert any(t.startswith("bf16 roof, 2 × the measured tf32") for t in texts)
    assert any(t.startswith("bf16 roof, datasheet: 989") for t in texts)


def test_figures_without_16bit_rows_draw_no_16bit_column(tmp_path):
    _synthetic_results(tmp_path, profile=False)
    df, env, _ = figures.load_results(tmp_path)
    figures.ladder(df, env, tmp_path / "f")
    figures.roofline(df, env, tmp_path / "f")
    for name in ("ladder", "roofline"):
        assert not any("bf16" in t or "fp16" in t for t in _svg_texts(tmp_path / "f" / f"{name}.svg")), name


def test_missing_results_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="bench.csv"):
        figures.make_all(tmp_path, tmp_path)
    assert (tmp_path / "cancellation.svg").exists()  # drawn without GPU results
    (tmp_path / "env.json").write_text("{}")          # half a run: env.json without bench.csv
    rc = cli.main(["figures", "--results", str(tmp_path), "--out", str(tmp_path / "f"), "--no-readme"])
    assert rc == 2 and "bench.csv not found" in capsys.readouterr().err


def test_no_gpu_results_yet_draws_what_it_can(tmp_path, capsys, monkeypatch):
    """Before any GPU run (no bench.csv, no env.json): the cancellation figure, a note, exit 0,
    and the README left alone."""
    monkeypatch.setattr(figures, "FORMATS", ("svg",))  # the formats have a test of their own
    readme = tmp_path / "README.md"
    readme.write_text(README)
    results = tmp_path / "results"
    results.mkdir()
    rc = cli.main(["figures", "--results", str(results), "--out", str(tmp_path / "f"), "--readme", str(readme)])
    assert rc == 0 and "no GPU results yet" in capsys.readouterr().err
    stems = ["cancellation"] + list(figures.diagram_figures())
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == sorted(f"{s}.{f}" for s in stems for f in figures.FORMATS)
    assert readme.read_text() == README


def test_wrong_columns_are_refused(tmp_path):
    _synthetic_results(tmp_path, profile=False)
    (tmp_path / "bench.csv").write_text("problem,impl,ms\n84,fused,1.0\n")
    with pytest.raises(ValueError, match="columns"):
        figures.load_results(tmp_path)


def test_figures_command_regenerates_the_readme_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(figures, "FORMATS", ("png",))  # the formats have a test of their own
    _synthetic_results(tmp_path, profile=False)
    readme = tmp_path / "README.md"
    readme.write_text(README)
    argv = ["figures", "--results", str(tmp_path), "--out", str(tmp_path / "f"), "--readme", str(readme)]
    assert cli.main(argv) == 0
    for name in FIGURES:
        assert (tmp_path / "f" / f"{name}.png").stat().st_size > 0
    text = readme.read_text()
    assert "old table" not in text and text.startswith("# title") and text.endswith("text after\n")
    # synthetic times: fp32 at 84's shape all 68.7 ms, tf32 a fifth of that
    assert "| 84 @1024×8192→8192 | train | fp32 | fused | 68.719 | 1.00× | 1.00× | 1.00 | 1.0e-06 |" in text
    assert "| 84 @1024×8192→8192 | train | tf32 | fused | 13.744 | 1.00× | 1.00× | 1.00 |" in text
    assert "| 84 @1024×8192→8192 | train | 3xtf32 | fused | 13.744 | 5.00× | 5.00× | 0.20 |" in text
    assert "256×4096→4096" not in text                       # sweeps stay in the figures
    lines = [line for line in text.splitlines() if line.startswith("| 84 @1024×8192→8192 | train | fp32")]
    assert [line.split("|")[4].strip() for line in lines] == list(bench.IMPLS)
    import pandas as pd

    from fusedlib.lab import report
    assert not report.update_results_table(readme, pd.read_csv(tmp_path / "bench.csv", dtype={"problem": str}))
    readme.write_text("no markers here\n")
    capsys.readouterr()
    assert cli.main(argv) == 2 and "markers" in capsys.readouterr().err     # refused before drawing
    assert readme.read_text() == "no markers here\n"


def test_speedups_against_hand_made_rows(tmp_path):
    import pandas as pd

    from fusedlib.lab import report
    path = tmp_path / "bench.csv"
    shape = parse_shape("39")
    for impl, ms, prec in (("eager", 11.5, "fp32"), ("compile", 11.4, "fp32"), ("gemm_only", 10.8, "fp32"),
                           ("eager", 2.1, "tf32"), ("compile", 1.7, "tf32"), ("gemm_only", 1.55, "tf32"),
                           ("fused", 1.7, "tf32"), ("fused", 4.6, "3xtf32")):
        bench.append_row(path, bench.make_row("39", shape, "train", prec, impl, (ms,) * 3, 50, 2e-6, ENV))
    table = report.results_table(pd.read_csv(path, dtype={"problem": str}))
    assert "| 39 @16384×4096→4096 | train | tf32 | fused | 1.700 | 1.24× | 1.00× | 1.10 | 2.0e-06 |" in table
    assert "| 39 @16384×4096→4096 | train | 3xtf32 | fused | 4.600 | 2.50× | 2.48× | 0.43 | 2.0e-06 |" in table


def test_cancellation_lab_shows_the_textbook_failure():
    from fusedlib.lab.course import cancellation_lab
    lab = cancellation_lab(ratios=(1, 1000))
    err = lab.set_index(["|mean|/std", "method"])["max relative error"]
    assert err[1000, "textbook Σz, Σz²"] > 0.1 > 1e-5 > err[1000, "Chan merge"]
    assert err[1, "textbook Σz, Σz²"] < 1e-4


def test_one_run_takes_the_latest_run_of_each_group(tmp_path):
    """Two runs of one group (the earlier with a peer the later lacks) and one run of another:
    only the later run's rows of the first group, all rows of the second."""
    import pandas as pd
    early, late = "2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00"
    for impl, ms in (("fused", 2.0), ("compile_max_autotune", 3.0)):
        bench.append_row(tmp_path / "bench.csv", _row("84", PRESETS["84"], "train", "fp32", impl, ms, early))
    bench.append_row(tmp_path / "bench.csv", _row("84", PRESETS["84"], "train", "fp32", "fused", 1.0, late))
    bench.append_row(tmp_path / "bench.csv", _row("84", PRESETS["84"], "train", "tf32", "fused", 0.5, early))
    df = figures.one_run(pd.read_csv(tmp_path / "bench.csv", dtype={"problem": str}))
    assert sorted(zip(df.precision, df.impl, df.median_ms)) == [("fp32", "fused", 1.0), ("tf32", "fused", 0.5)]


def test_saved_label():
    assert figures.saved_label(4.0, 3.0) == "saves\n25.0 %"
    assert figures.saved_label(4.0, 5.0) == "costs\n25.0 %"


def test_export_is_byte_reproducible(tmp_path, monkeypatch):
    """Two exports of a results figure, the cancellation figure and two diagrams (one of each
    kind of drawing: bars, a tree; all share _save's metadata) give identical files (no dates,
    fixed SVG hash salt)."""
    _synthetic_results(tmp_path, profile=False)
    df, env, _ = figures.load_results(tmp_path)
    every = figures.diagram_figures()
    some = {stem: every[stem] for stem in ("traffic_fused", "chan_merge_tree")}
    monkeypatch.setattr(figures, "diagram_figures", lambda: some)
    for out in ("a", "b"):
        figures.ladder(df, env, tmp_path / out)
        figures.cancellation(tmp_path / out)
        figures.export_diagrams(tmp_path / out)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert len(names) == 3 * (2 + len(some))
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_figure_functions_leave_the_backend_alone():
    """A notebook's backend is kept: drawing a figure neither switches matplotlib's backend nor
    registers the Figure with pyplot (run in a fresh process with another backend set)."""
    import subprocess
    import sys
    code = ("import matplotlib; matplotlib.use('svg'); import matplotlib.pyplot as plt\n"
            "from fusedlib.lab import figures\nfrom fusedlib.lab.course import cancellation_lab\n"
            "fig = figures.cancellation_figure(cancellation_lab(ratios=(1, 10)))\n"
            "from matplotlib.figure import Figure\n"
            "assert isinstance(fig, Figure) and matplotlib.get_backend() == 'svg' and plt.get_fignums() == []\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
