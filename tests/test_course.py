"""The notebooks' helpers (fusedlib.lab.course): summation-order and accumulation emulation, kernel
sources (every call in the notebooks resolves), the engine's path table, predictions and measurements."""
from pathlib import Path

import pytest
import torch

from fusedlib.lab import course


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


def test_pass_rule_lab_against_the_recorded_gpu_case():
    """Problem 33 at 2x64->3, seed 2, offset inputs: the emulated two-level sum over X itself (the
    SIMT GEMM's order of operations) fails the per-case budget, applied as check.run_case applies
    it; the GPU suite's record of the naive stage, whose train-mode GEMM runs on X shifted by its
    first row, passes it and is over 100× closer to float64; the noise estimates agree."""
    import json
    from pathlib import Path

    from fusedlib.lab.records import RESULTS_GPU
    record = json.loads((Path(__file__).resolve().parent.parent / "results" / RESULTS_GPU / "validation.json").read_text())
    gpu = [c for c in record["cases"] if (c["problem"], c["stage"], c["mode"], c["precision"], c["shape"],
                                          c["seed"], c["path"]) == ("33", "naive", "train", "fp32", "2x64->3", 2, "simt")]
    assert len(gpu) == 1
    df = course.pass_rule_lab("33", seeds=[2])
    row = df.iloc[0]
    assert row.noise == pytest.approx(gpu[0]["fp32_noise"], rel=0.25)  # CPU BLAS vs cuBLAS orders
    assert row.two_level_fails and row.two_level > max(1e-5, 2 * row.noise)
    assert gpu[0]["passed"] and gpu[0]["rel_err"] * 100 <= row.two_level
    for name in ("pytorch_third", "two_level", "one_chain"):
        assert row[name + "_fails"] == (row[name] > max(1e-5, 2 * row.noise))


def test_ncu_table_reads_the_committed_report():
    """The committed Nsight Compute report of problem 84 in tf32: one column per kernel (the
    counter increment left out), durations converted from ns to µs, grids as launched."""
    t = course.ncu_table("tf32-84")
    ours = [c for c in t.columns if c.startswith("fl::fused_wgmma_kernel")]
    cublas = [c for c in t.columns if "xmma_gemm" in c]
    assert len(ours) == 1 and len(cublas) == 1 and not any("elementwise" in c for c in t.columns)
    assert 100 < t.loc["Duration (µs)", ours[0]] < 2000        # a 137 GFLOP tf32 GEMM, in µs
    assert t.loc["Grid Size", cublas[0]] == 132                 # cuBLAS: one persistent wave
    with pytest.raises(FileNotFoundError):
        course.ncu_table("no-such-report.csv")


def test_ncu_versus_puts_two_reports_side_by_side(monkeypatch, tmp_path):
    """The SIMT GEMM against cuBLAS SGEMM (run67): ours first, the ratio of the durations;
    (None, None) where a report is not committed."""
    table, ratio = course.ncu_versus("simt-fp32", "cublas-fp32")
    ours, cublas = table.columns
    assert ours.startswith("simt_gemm_kernel") and "xmma_gemm" in cublas
    assert ratio == pytest.approx(table.loc["Duration (µs)", ours] / table.loc["Duration (µs)", cublas])
    assert 1.0 < ratio < 3.0 and table.loc["Grid Size", ours] == 512
    assert course.ncu_versus("simt-fp32", "no-such-report.csv") == (None, None)


def test_ncu_versus_with_clocks_tells_clock_from_cycles():
    """run141: the fold stage's tf32 GEMM against cuBLAS's at the GPU's own clocks. With
    ``clocks`` the SM clock (GHz) and elapsed cycles join the rows; duration = cycles / clock."""
    table, ratio = course.ncu_versus("persistent-tf32-clocks", "cublas-tf32-clocks", clocks=True)
    assert list(table.index[-2:]) == list(course.NCU_CLOCKS)
    for kernel in table.columns:
        cycles, ghz = table.loc["Elapsed Cycles", kernel], table.loc["SM Frequency", kernel]
        assert 1.0 < ghz < 2.1 and cycles / ghz / 1e3 == pytest.approx(table.loc["Duration (µs)", kernel], rel=0.01)
    assert "Elapsed Cycles" not in course.ncu_versus("persistent-tf32-clocks", "cublas-tf32-clocks")[0].index


def test_curated_tables_quote_the_development_notes():
    """Every number of the tables curated from results/h100/NOTES.md (course.CURATED) is
    written there as in the notes, so the course's copy cannot drift from them; the folder's
    README names each table."""
    import csv
    folder = course.results_dir(course.NOTES_GPU)
    notes, readme = (folder / "NOTES.md").read_text(), (folder / "README.md").read_text()
    for name in course.CURATED:
        assert f"`{name}.csv`" in readme, name
        with (folder / f"{name}.csv").open(newline="") as f:
            rows = list(csv.DictReader(f))
        assert rows and len(course.curated(name)) == len(rows)
        numeric = [c for c in rows[0] if c.startswith(("ms_", "gemm_us", "rel_err_3x", "time_", "energy_", "power_",
                                                       "sm_clock"))]
        for row in rows:
            for column in numeric:
                assert row[column] == "" or row[column] in notes, (name, column, row[column])


def test_curated_reads_a_table_or_says_it_is_absent(monkeypatch, tmp_path):
    (tmp_path / "gemm_energy.csv").write_text("shape,impl,round,time_us\n1x2->3,ours,1,4.5\n")
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    assert course.curated("gemm_energy").time_us.tolist() == [4.5]
    assert course.curated("simt_versions") is None and course.versions() is None and course.versions_plot() is None
    with pytest.raises(KeyError, match="name: expected one of"):
        course.curated("NOTES")


# ---------------------------------------------------------------- kernel sources in the notebooks
NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _kernel_source_calls(path):
    """Every ``course.kernel_source(...)`` call in the notebook's code cells, as (args, kwargs)
    of literals (IPython magics and shell lines left out before parsing)."""
    import ast
    import json
    calls = []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(code)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "kernel_source"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "course"):
                calls.append(([ast.literal_eval(a) for a in node.args],
                              {k.arg: ast.literal_eval(k.value) for k in node.keywords}))
    return calls


def test_the_notebooks_show_kernel_sources():
    assert NOTEBOOKS and sum(len(_kernel_source_calls(p)) for p in NOTEBOOKS) >= 15


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_kernel_source_call_in_the_notebooks_resolves(path):
    """Each call names an existing file and finds its start and end markers (kernel_source
    raises otherwise), and the excerpt begins at the start marker (``before`` lines above it)
    and reaches the end marker."""
    for args, kwargs in _kernel_source_calls(path):
        text = course.kernel_source(*args, **kwargs)
        body = text.removeprefix("```cuda\n").removesuffix("\n```").splitlines()
        start = args[1] if len(args) > 1 else kwargs.get("start")
        end = args[2] if len(args) > 2 else kwargs.get("end")
        if start:
            assert start in body[kwargs.get("before", 0)], (path.name, start)
        if end:
            after = kwargs.get("after", args[3] if len(args) > 3 else 0)
            assert end in body[len(body) - 1 - after], (path.name, end, after)


def test_kernel_source_raises_on_a_missing_marker():
    whole = course.kernel_source("fused")
    assert whole.startswith("```cuda\n") and "fl_fused_forward" in whole
    with pytest.raises(ValueError, match="start marker"):
        course.kernel_source("gemm.cuh", "no such line in the file")
    with pytest.raises(ValueError, match="end marker"):
        course.kernel_source("gemm.cuh", "template <class Epi>", "no such line in the file")
    with pytest.raises(FileNotFoundError):
        course.kernel_source("no_such_file.cuh")


def test_kernel_source_takes_lines_above_the_start():
    """``before`` lines above the start marker's line (a kernel's template line), at most to the
    file's first line."""
    whole = course.kernel_source("gemm.cuh", history=True).splitlines()[1:-1]
    at = next(k for k, line in enumerate(whole) if "template <class Epi>" in line)
    assert at > 0
    got = course.kernel_source("gemm.cuh", "template <class Epi>", before=1, history=True).splitlines()[1:-1]
    assert got == whole[at - 1:]
    got = course.kernel_source("gemm.cuh", "template <class Epi>", before=at + 9, history=True).splitlines()[1:-1]
    assert got == whole


# ---------------------------------------------------------------- engine paths and predictions
def test_gemm_paths_table_follows_the_engine():
    t = course.gemm_paths_table()
    assert list(t.columns) == ["GPUs", "fp32", "tf32", "3xtf32"]
    assert (t["fp32"] == "simt").all()
    assert t.loc["sm_75", "tf32"] == t.loc["sm_75", "3xtf32"] == "unsupported"
    assert t.loc["sm_90a", "tf32"] == t.loc["sm_90a", "3xtf32"] == "wgmma"
    for arch in ("sm_80", "sm_86", "sm_89", "sm_100", "sm_120"):
        assert t.loc[arch, "tf32"] == t.loc[arch, "3xtf32"] == "mma"
    assert course.gemm_paths_table([(9, 0)], k=3).loc["sm_90a", "tf32"] == "mma"   # TMA needs K % 4 == 0


def test_gemm_paths_table_ignores_the_switch(monkeypatch):
    """The table shows the default choice, whatever FUSEDLIB_GEMM_PATH says."""
    monkeypatch.setenv("FUSEDLIB_GEMM_PATH", "mma")
    assert course.gemm_paths_table([(9, 0)]).loc["sm_90a", "tf32"] == "wgmma"


def test_prediction_by_precision_matches_prediction():
    table, ms = course.prediction_by_precision("naive", "84")
    for precision in ("fp32", "tf32", "3xtf32"):
        passes, total = course.prediction("naive", "84", precision=precision)
        assert ms[precision] == pytest.approx(total)
        assert table[f"ms {precision}"].sum() == pytest.approx(total)
        assert table[f"MB {precision}"].notna().sum() == len(passes)
    # the same passes and bytes at every precision but 3xtf32's pass over X (the swapped GEMM at
    # this shape: X's two TF32 parts written before the GEMM, which reads them instead of X)
    parts = "X's TF32 parts (3xtf32 pass)"
    assert table.index[0] == parts and table.loc[parts, ["MB fp32", "MB tf32"]].isna().all()
    others = table.drop(index=parts)
    assert others[[f"MB {p}" for p in ("fp32", "tf32", "3xtf32")]].notna().all().all()
    gemm = others.index[0]
    x_mb = 1024 * 8192 * 4 / 1e6
    assert table.loc[parts, "MB 3xtf32"] == pytest.approx(3 * x_mb)
    assert "GEMM" in gemm and table.loc[gemm, "MB tf32"] == table.loc[gemm, "MB fp32"]
    assert table.loc[gemm, "MB 3xtf32"] == pytest.approx(table.loc[gemm, "MB tf32"] + x_mb)


def test_measurement_table_marks_what_was_not_measured(tmp_path, monkeypatch):
    """A stage × precision missing from bench.csv gives a row with NaN times, shown as
    NOT_MEASURED, and a sentence that says so; the measured rows keep their numbers."""
    import pandas as pd
    bench = course.measured()
    if bench is None or course.at_presets(bench).query("impl == 'fold' and precision == 'fp32'").empty:
        pytest.skip("no committed fold fp32 timings at the KernelBench shapes")
    bench[~((bench.impl == "fold") & (bench.precision == "tf32"))].to_csv(tmp_path / "bench.csv", index=False)
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    table = course.measurement_table("fold", ("fp32", "tf32"))
    assert len(table) == 2 * len(course.PROBLEMS)
    tf32, fp32 = table[table.precision == "tf32"], table[table.precision == "fp32"]
    assert tf32["fold ms"].isna().all() and fp32["fold ms"].notna().all()
    assert (table["predicted ms"] > 0).all()
    view = course.measurement_view(table)
    assert (view.loc[tf32.index, "fold ms"] == course.NOT_MEASURED).all()
    assert not (view.loc[fp32.index, "fold ms"] == course.NOT_MEASURED).any()
    text = course.measurement_md("fold", ("fp32", "tf32"))
    assert text.count(course.NOT_MEASURED) == len(course.PROBLEMS)
    assert pd.isna(table["rel_err"]).sum() == len(course.PROBLEMS)


def test_ladder_md_lists_every_stage_in_order(tmp_path, monkeypatch):
    """One line per problem and precision, the stages in ladder order; a stage missing from
    bench.csv reads NOT_MEASURED, a problem and precision without any stage says so, and
    without bench.csv one sentence says that."""
    from fusedlib.algebra import STAGES
    bench = course.measured()
    if bench is None or course.at_presets(bench).query("impl in @STAGES and precision == 'fp32'").empty:
        pytest.skip("no committed fp32 stage timings at the KernelBench shapes")
    keep = ~((bench.impl == "sums") & (bench.precision == "fp32")) & ~((bench.impl.isin(STAGES)) & (bench.precision == "tf32"))
    bench[keep].to_csv(tmp_path / "bench.csv", index=False)
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    text = course.ladder_md(("fp32", "tf32"))
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == 2 * len(course.PROBLEMS)
    fp32 = [line for line in lines if ", fp32:" in line]
    tf32 = [line for line in lines if ", tf32:" in line]
    for line in fp32:
        positions = [line.index(f"`{s}`") for s in STAGES]
        assert positions == sorted(positions) and f"`sums` {course.NOT_MEASURED}" in line
    assert all(line.endswith(f"tf32: {course.NOT_MEASURED}.") for line in tf32)
    (tmp_path / "bench.csv").unlink()
    assert course.NO_RESULTS in course.ladder_md()


def test_versions_ladder_from_the_curated_table():
    """The committed versions: v1 … v10 in order, forward times in ms (NaN where only the GEMM
    kernel was timed, v5), each falling from v1 to v10; the figure draws one line a precision
    per problem (and cuBLAS's lines where bench.csv holds its GEMM)."""
    import pandas as pd
    table = course.versions()
    assert list(table.version) == [f"v{i}" for i in range(1, 11)]
    assert set(course.VERSION_COLUMNS.values()) <= set(table.columns)
    v5 = table.set_index("version").loc["v5"]
    assert all(pd.isna(v5[c]) for c in course.VERSION_COLUMNS.values()) and v5.gemm_us_84_tf32 > 0
    for column in course.VERSION_COLUMNS.values():
        assert table[column].iloc[-1] < table[column].iloc[0] / 2, column
    fig = course.versions_plot()
    assert len(fig.axes) == 2 and all(len(ax.get_lines()) >= 2 for ax in fig.axes)


def test_step_table_takes_one_run_and_the_percent_saved(tmp_path, monkeypatch):
    """Stage sums against fold from hand-made rows: two runs of 84 fp32 (only the later one
    counts), % saved = (before − after) / before, negative when the step costs time, NaN where
    a stage is missing; step_md says "saves" and "costs" accordingly."""
    from fusedlib.lab import bench
    from fusedlib.reference import PRESETS
    env = {"gpu": "synthetic", "torch": "x", "cuda": "x", "commit": "x"}

    def row(problem, prec, impl, ms, stamp):
        r = bench.make_row(problem, PRESETS[problem], "train", prec, impl, (ms,) * 3, 50, 1e-6, env)
        r["timestamp"] = stamp
        return r

    early, late = "2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00"
    for r in (row("84", "fp32", "fold", 9.0, early), row("84", "fp32", "sums", 1.0, early),
              row("84", "fp32", "fold", 4.0, late), row("84", "fp32", "sums", 3.0, late),
              row("84", "tf32", "fold", 0.5, late), row("84", "tf32", "sums", 0.6, late),
              row("33", "fp32", "fold", 4.0, late)):
        bench.append_row(tmp_path / "bench.csv", r)
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    t = course.step_table("sums", ("fp32", "tf32")).set_index(["problem", "precision"])
    assert t.loc[("84", "fp32"), "% saved"] == pytest.approx(25.0)
    assert t.loc[("84", "tf32"), "% saved"] == pytest.approx(-20.0)
    assert t["% saved"].isna().sum() == 4 and (t["% saved predicted"] > 0).all()
    text = course.step_md("sums", ("fp32", "tf32"))
    assert "saves **25.0 %**" in text and "costs **20.0 %**" in text and text.count(course.NOT_MEASURED) == 4
    with pytest.raises(ValueError, match="first stage"):
        course.step_table("naive")


# ---------------------------------------------------------------- notebooks 05–06 and the appendix
def test_fused_versus_sums_from_the_committed_profile():
    """One row per problem and precision; the merge's cost is fused's GEMM minus sums' GEMM, the
    launch saved is sums' finalize, the forward difference comes from bench.csv; at 39 in 3xTF32
    the merge costs more than the finalize it replaces (what notebook 05 states)."""
    vs = course.fused_versus_sums()
    assert list(vs.index) == [(p, q) for p in course.PROBLEMS for q in ("fp32", "tf32", "3xtf32")]
    assert (vs["merge cost µs"] == vs["fused GEMM µs"] - vs["sums GEMM µs"]).all()
    assert (vs["launch saved µs"] == vs["sums finalize µs"]).all() and (vs["sums finalize µs"] > 0).all()
    assert vs["fused − sums µs"].to_numpy() == pytest.approx(1e3 * (vs["fused ms"] - vs["sums ms"]).to_numpy())
    assert vs.loc[("39", "3xtf32"), "merge cost µs"] > vs.loc[("39", "3xtf32"), "launch saved µs"]


def test_saved_table_is_the_percent_of_time_saved():
    t = course.saved_table("fused")
    assert t["% saved vs naive"].to_numpy() == pytest.approx(100 * (1 - t["fused ms"] / t["naive ms"]).to_numpy())
    assert t["% saved vs sums"].to_numpy() == pytest.approx(100 * (1 - t["fused ms"] / t["sums ms"]).to_numpy())
    assert {"naive ms", "fold ms", "% saved vs naive"} <= set(course.saved_table("fold").columns)  # fold's previous is naive
    with pytest.raises(ValueError, match="stage"):
        course.saved_table("naive")


def test_peer_spread_over_repeated_configurations(tmp_path, monkeypatch):
    """bench.csv's run and the repeats under peers/ together: the spread max/min − 1 of each
    configuration's medians, the largest and the median over configurations per peer; the
    stages and the v0 shape are left out; None where nothing was timed twice."""
    import pandas as pd
    monkeypatch.setattr(course, "results_dir", lambda gpu="h100": tmp_path)
    cols = ["problem", "batch", "in_features", "out_features", "mode", "precision", "impl", "median_ms"]
    kb84, kb39, v0 = (1024, 8192, 8192), (16384, 4096, 4096), (128, 1024, 512)
    pd.DataFrame([("84", *kb84, "train", "fp32", "eager", 2.0), ("39", *kb39, "train", "fp32", "eager", 10.0),
                  ("84", *kb84, "train", "fp32", "fused", 1.0), ("84", *v0, "train", "fp32", "eager", 0.1)],
                 columns=cols).to_csv(tmp_path / "bench.csv", index=False)
    assert course.peer_spread() is None  # one run: nothing to compare
    (tmp_path / "peers").mkdir()
    pd.DataFrame([("84", *kb84, "train", "fp32", "eager", 2.5), ("39", *kb39, "train", "fp32", "eager", 10.5),
                  ("84", *kb84, "train", "fp32", "fused", 9.0), ("84", *v0, "train", "fp32", "eager", 9.0),
                  ("39", *kb39, "train", "fp32", "eager", 9.8)],
                 columns=cols).to_csv(tmp_path / "peers" / "bench.csv", index=False)
    s = course.peer_spread()
    assert list(s.index) == ["eager"]
    assert s.loc["eager", "configurations"] == 2
    assert s.loc["eager", "largest"] == pytest.approx(25.0)            # 84: 2.5 / 2.0
    assert s.loc["eager", "median"] == pytest.approx((25.0 + 100 * (10.5 / 9.8 - 1)) / 2)
    assert course.peer_spread(mode="eval") is None


def test_sync_summary_one_row_per_world_problem_precision():
    """course.sync_summary on synthetic sync.csv rows: the cost of synchronising, the ratio to
    nn.SyncBatchNorm and the weak-scaling efficiency, the latest run of each (no NCCL share: it
    counts DDP's all-reduce and waiting too)."""
    import pandas as pd
    rows = []
    for world, local, sync, syncbn in ((1, 2.0, 2.0, 3.0), (2, 2.2, 2.25, 3.5), (2, 9.0, 2.2, 9.0)):
        for impl, ms in (("fused-local", local), ("fused-sync", sync), ("eager-syncbn", syncbn)):
            rows.append({"world": world, "problem": "84", "precision": "tf32", "impl": impl, "median_ms": ms})
    s = course.sync_summary(pd.DataFrame(rows))
    assert len(s) == 1  # world 1 is the baseline; world 2's earlier run replaced by the later
    r = s.iloc[0]
    assert r["fused-sync ms"] == 2.2 and abs(r["sync cost %"] - 100 * (2.2 / 9.0 - 1)) < 1e-9
    assert abs(r["× eager-syncbn"] - 2.2 / 9.0) < 1e-12 and "NCCL share %" not in s.columns
    assert abs(r["weak-scaling efficiency"] - 2.0 / 2.2) < 1e-12
    assert abs(r["weak-scaling efficiency, own statistics"] - 2.0 / 9.0) < 1e-12
    assert "loop: sync cost %" not in s.columns  # a CSV without loop_ms
    for row in rows:  # steps back to back: 10 % less each
        row["loop_ms"] = 0.9 * row["median_ms"]
    r = course.sync_summary(pd.DataFrame(rows)).iloc[0]
    assert abs(r["loop: sync cost %"] - 100 * (2.2 / 9.0 - 1)) < 1e-9 and abs(r["loop: × eager-syncbn"] - 2.2 / 9.0) < 1e-12
    assert "no broadcast: sync cost %" not in course.sync_summary(pd.DataFrame(rows)).columns
    for world, ms in ((2, 2.1), (2, 1.8)):  # without DDP's buffer broadcast: the later run counts
        for impl, factor in (("fused-sync-nobcast", 1.0), ("eager-syncbn-nobcast", 3.0)):
            rows.append({"world": world, "problem": "84", "precision": "tf32", "impl": impl,
                         "median_ms": factor * ms, "loop_ms": 0.9 * factor * ms})
    r = course.sync_summary(pd.DataFrame(rows)).iloc[0]
    assert abs(r["no broadcast: sync cost %"] - 100 * (1.8 / 9.0 - 1)) < 1e-9  # loop_ms over fused-local's
    assert abs(r["no broadcast: × eager-syncbn"] - 1 / 3) < 1e-12


# ---------------------------------------------------------------- the 16-bit precisions (notebooks 05, 06)
def _results_with_16bit(tmp_path, monkeypatch, sixteen: bool = True, env_measured: dict | None = None):
    """A results folder holding the committed env.json (its bf16 rate left out, ``env_measured``
    merged into its measured ceilings) and bench.csv without its bf16/fp16 rows, plus, if ``sixteen``, bf16 rows
    made from the tf32 rows at the KernelBench shapes (times × 0.6); FUSEDLIB_RESULTS points at it."""
    import json
    monkeypatch.delenv("FUSEDLIB_RESULTS", raising=False)  # the committed results
    bench, env = course.measured(), course.env()
    if bench is None or env is None:
        pytest.skip("no committed bench.csv and env.json")
    measured = {k: v for k, v in env["measured"].items() if k != "gemm_bf16_tflops"}  # then merged as asked
    env = {**env, "measured": {**measured, **(env_measured or {})}}
    (tmp_path / "env.json").write_text(json.dumps(env))
    bench = bench[~bench.precision.isin(course.SIXTEEN)]
    if sixteen:
        import pandas as pd
        kb = course.at_presets(bench)
        bf16 = kb[kb.precision == "tf32"].assign(precision="bf16")
        bf16 = bf16.assign(median_ms=bf16.median_ms * 0.6)
        bench = pd.concat([bench, bf16], ignore_index=True)
    bench.to_csv(tmp_path / "bench.csv", index=False)
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    return bench


def test_pass_share_splits_the_prediction_into_the_gemm_and_the_passes():
    for problem in course.PROBLEMS:
        for precision in ("tf32", "bf16"):
            s = course.pass_share("fused", problem, precision)
            assert s["GEMM ms"] > 0 and s["passes ms"] > 0
            assert s["GEMM ms"] + s["passes ms"] == pytest.approx(s["total ms"])
            assert s["total ms"] == pytest.approx(course.prediction("fused", problem, precision=precision)[1])
            assert 0 < s["passes %"] < 50
        assert course.pass_share("gemm_only", problem, "bf16")["passes %"] == 0


def test_in_bf16_naive_passes_weigh_more_and_the_fused_row_pass_halves():
    """The GEMM is faster in bf16; naive's passes over float32 Z are not, so their share of the time
    grows, and so does the % of naive's time fusion saves; the fused stage's row pass reads Z' in the
    dtype (algebra.Z16_STAGES), so its time halves with its bytes, as eager's passes over its
    bf16 Z do."""
    t = course.pass_share_table(("naive", "eager", "fused"))
    assert list(t.index) == [(p, q) for p in course.PROBLEMS for q in ("tf32", "bf16")]
    for problem in course.PROBLEMS:
        tf32, bf16 = t.loc[(problem, "tf32")], t.loc[(problem, "bf16")]
        assert bf16["fused GEMM ms"] < tf32["fused GEMM ms"]
        assert bf16["naive passes %"] > tf32["naive passes %"], problem
        assert bf16["fused: % saved vs naive"] > tf32["fused: % saved vs naive"] > 0
        for impl in ("eager", "fused"):
            assert bf16[f"{impl} passes ms"] == pytest.approx(tf32[f"{impl} passes ms"] / 2, rel=0.01), (problem, impl)
            # their share moves only as far as the GEMM's bf16 rate differs from twice its tf32 rate
            # (the measured ceilings), less than the share of naive's passes over float32 Z
            assert (abs(bf16[f"{impl} passes %"] - tf32[f"{impl} passes %"])
                    < bf16["naive passes %"] - tf32["naive passes %"]), (problem, impl)
    text = course.pass_share_md()
    # a prediction, said as one: the model "expects", it does not state what the records show
    assert text.startswith("**Predicted**") and text.count("expects") == 3 and "bf16" in text
    assert text.count("to grow at every shape") == 1
    with pytest.raises(ValueError, match="two"):
        course.pass_share_md(("fp32", "tf32", "bf16"))


def test_direction_reads_each_shape():
    both = {("84", 0): 1, ("84", 1): 2, ("33", 0): 2, ("33", 1): 1, ("39", 0): 1, ("39", 1): 3}
    assert course._direction(both) == "grows at 84 and 39 and shrinks at 33"
    assert course._direction(both, verb=True) == "grow at 84 and 39 and shrink at 33"
    assert course._direction({(p, i): i for p in course.PROBLEMS for i in (0, 1)}) == "grows at every shape"
    assert course._direction({(p, i): -i for p in course.PROBLEMS for i in (0, 1)}, verb=True) == "shrink at every shape"


def test_measured_pass_share_md_reads_its_directions_from_the_records(tmp_path, monkeypatch):
    """Every "grows"/"shrinks" of the measured bullets follows from the numbers rendered beside it:
    eager's share (profile.csv) and fused's saving over eager (bench.csv); None without the records."""
    import re
    monkeypatch.delenv("FUSEDLIB_RESULTS", raising=False)
    prof, ms = course.profile(), course.preset_times()
    if prof is None or ms is None or not ((prof.precision == "bf16") & (prof.impl == "eager")).any():
        pytest.skip("no committed bf16 profile")
    text = course.measured_pass_share_md()
    assert text.startswith("**Measured**")
    eager = {(p, i): course.kernel_pass_share("eager", p, q) for p in course.PROBLEMS for i, q in enumerate(("tf32", "bf16"))}
    assert f"Their share of eager's kernel time {course._direction(eager)}:" in text
    lead = {(p, i): course.pct_saved(ms(p, "eager", q), ms(p, "fused", q))
            for p in course.PROBLEMS for i, q in enumerate(("tf32", "bf16"))}
    assert f"The saving {course._direction(lead)};" in text
    for p in course.PROBLEMS:
        assert f"{lead[p, 0]:.1f} % → {lead[p, 1]:.1f} % at {p}" in text
    ratio = float(re.search(r"bf16 rate is (\d+\.\d+) times its tf32 rate", text).group(1))
    assert ratio == pytest.approx(course.bf16_roof()[0] / course.ceilings()["tf32"], abs=0.01)
    with pytest.raises(ValueError, match="two"):
        course.measured_pass_share_md(("tf32",))
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    assert course.measured_pass_share_md() is None


def test_predicted_ladder_saves_more_in_bf16():
    from fusedlib.algebra import STAGES
    ladder = course.predicted_ladder()
    assert list(ladder.columns[:4]) == list(STAGES)
    for problem in course.PROBLEMS:
        assert ladder.loc[(problem, "bf16"), "fused"] < ladder.loc[(problem, "tf32"), "fused"]
        saved = ladder.loc[problem, "% saved, naive → fused"]
        assert saved["bf16"] > saved["tf32"] > 0


def test_bf16_roof_says_where_its_rate_comes_from(tmp_path, monkeypatch):
    _results_with_16bit(tmp_path, monkeypatch, sixteen=False)
    tf32 = course.ceilings()["tf32"]
    rate, source = course.bf16_roof()
    assert rate == pytest.approx(2 * tf32) and source.startswith("twice")  # env.json without a bf16 rate
    assert "twice the measured tf32" in course.bf16_roof_md() and "989" in course.bf16_roof_md()
    _results_with_16bit(tmp_path, monkeypatch, sixteen=False, env_measured={"gemm_bf16_tflops": 700.0})
    rate, source = course.bf16_roof()
    assert rate == 700.0 and source.startswith("cuBLAS's bf16 GEMM measured")
    assert "**700 TFLOP/s**" in course.bf16_roof_md()
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path / "absent"))
    rate, source = course.bf16_roof()
    assert rate == 989.0 and "datasheet" in source


def test_measured_16bit_is_empty_without_16bit_rows(tmp_path, monkeypatch):
    """No bf16/fp16 row (or no bench.csv): an empty table with the same columns, and one line
    naming the command that measures them."""
    _results_with_16bit(tmp_path, monkeypatch, sixteen=False)
    table = course.measured_16bit()
    assert table.empty and "fused ms" in table.columns and "fused predicted ms" in table.columns
    note = course.sixteen_bit_note()
    assert course.NOT_MEASURED in note and "`make results-16bit`" in note and "\n" not in note
    (tmp_path / "bench.csv").unlink()
    assert course.measured_16bit().empty and course.sixteen_bit_note() == note


def test_measured_16bit_puts_the_rows_beside_the_prediction(tmp_path, monkeypatch):
    bench = _results_with_16bit(tmp_path, monkeypatch)
    table = course.measured_16bit()
    assert course.sixteen_bit_note() is None
    assert list(table.index) == [(p, "bf16") for p in course.PROBLEMS]  # no fp16 rows: no fp16 line
    kb = course.at_presets(bench)
    for problem in course.PROBLEMS:
        row = table.loc[(problem, "bf16")]
        want = kb[(kb.problem == problem) & (kb.precision == "bf16") & (kb.impl == "fused")].median_ms
        assert row["fused ms"] == pytest.approx(float(want.iloc[0]))
        assert row["fused predicted ms"] == pytest.approx(course.prediction("fused", problem, precision="bf16")[1])
        assert row["% saved naive → fused"] == pytest.approx(course.pct_saved(row["naive ms"], row["fused ms"]))


def test_sixteen_bit_time_md_adds_up_the_records(tmp_path, monkeypatch):
    """The bf16 forward's time taken apart from the committed records: the GEMM, the row pass and
    the conversions from profile.csv, the wait as the bench time less those kernels; None where
    profile.csv or bench.csv lacks the row."""
    import re
    monkeypatch.delenv("FUSEDLIB_RESULTS", raising=False)
    prof, bench = course.profile(), course.measured()
    if prof is None or bench is None or not ((prof.precision == "bf16") & (prof.impl == "fused")).any():
        pytest.skip("no committed bf16 profile")
    text = course.sixteen_bit_time_md("84", "bf16")
    total, gemm, row, conv = re.search(
        r"takes \*\*(\d+) µs\*\*.*epilogue \*\*(\d+) µs\*\*, the row pass (\d+) µs, "
        r"and (?:\d+ dtype conversions? (\d+) µs|no dtype conversion)", text).groups()
    total, gemm, row, conv = float(total), float(gemm), float(row), float(conv or 0)
    kb = course.at_presets(bench)
    want = 1e3 * float(kb[(kb.problem == "84") & (kb.impl == "fused") & (kb.precision == "bf16")].median_ms.iloc[0])
    assert total == round(want)
    idle = re.search(r"For the other \*\*(-?\d+) µs\*\*", text)
    assert idle is None or abs(float(idle.group(1)) - (total - gemm - row - conv)) <= 2  # (each rounded)
    # against tf32: the shares rendered, and the word that compares them read from them
    m = re.search(r"\(\*\*(\d+\.\d) %\*\* of this forward\) against [\d.]+ µs \((\d+\.\d) % of the tf32 one\): "
                  r"(a larger|a smaller|the same) share", text)
    if m:
        share, share_tf32 = float(m.group(1)), float(m.group(2))
        assert m.group(3) == ("a larger" if share > share_tf32 else "a smaller" if share < share_tf32 else "the same")
    assert "twice as much" not in text
    assert "Against tf32" not in course.sixteen_bit_time_md("84", "bf16", against="bf16")
    # kernels that read the vectors in their dtype: a profile with no conversion names none, and the
    # time between kernels is the rest
    import shutil
    src = course.results_dir()
    kernels_only = tmp_path / "no_copies"
    kernels_only.mkdir()
    for name in ("bench.csv", "env.json"):
        shutil.copy(src / name, kernels_only / name)
    prof[~prof.kernel.str.contains("copy", case=False)].to_csv(kernels_only / "profile.csv", index=False)
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(kernels_only))
    text = course.sixteen_bit_time_md("84", "bf16")
    assert "no dtype conversion" in text and "conversions and" not in text
    assert round(float(re.search(r"epilogue \*\*(\d+) µs\*\*", text).group(1))) == gemm
    # a profile with a conversion kernel (a widening launch, as the vectors once had) names it and its time
    import pandas as pd
    from fusedlib.reference import PRESETS
    fused = prof[(prof.problem == "84") & (prof.impl == "fused") & (prof.precision == "bf16")
                 & (prof["mode"] == "train") & (prof["shape"] == str(PRESETS["84"]))]
    copy_row = fused.iloc[[0]].assign(kernel="fl::copy_vectors_kernel(fl::VectorCopy)", calls=1,
                                      cuda_time_us_per_call=3.0)
    pd.concat([prof[~prof.kernel.str.contains("copy", case=False)], copy_row]).to_csv(
        kernels_only / "profile.csv", index=False)
    text = course.sixteen_bit_time_md("84", "bf16")
    assert "and 1 dtype conversion 3 µs" in text and "the conversions and the time between kernels" in text
    assert round(float(re.search(r"epilogue \*\*(\d+) µs\*\*", text).group(1))) == gemm
    monkeypatch.delenv("FUSEDLIB_RESULTS")
    _results_with_16bit(tmp_path, monkeypatch, sixteen=False)  # a bench.csv without bf16 rows, no profile.csv
    assert course.sixteen_bit_time_md("84", "bf16") is None


def test_predicted_roofline_16bit_needs_no_results(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path / "absent"))
    fig = course.predicted_roofline_16bit()
    assert len(fig.axes) == 3 and not any("measured" in t.get_text() for t in fig.legends[0].get_texts())
    _results_with_16bit(tmp_path, monkeypatch)
    fig = course.predicted_roofline_16bit()
    assert any(t.get_text() == "bf16, measured" for t in fig.legends[0].get_texts())


def test_every_validated_path_has_a_legend_entry():
    """Each path label the committed GPU validation uses (cases and sanitizer runs) is described in
    course.PATH_LABELS, so the notebooks' legend names none without its meaning."""
    import json
    record = json.loads((course.results_dir() / "validation.json").read_text())
    used = {c["path"] for c in record["cases"]} | {s.get("path", "auto") for s in record["sanitizer"]}
    assert used <= set(course.PATH_LABELS), used - set(course.PATH_LABELS)
    assert course.path_legend(["wgmma", "no-such-path"]).endswith("`no-such-path`.")


def test_stage_validation_counts_and_flags_a_failing_case(tmp_path, monkeypatch):
    """stage_validation's summary counts the stage's cases and names each failing one; the
    bit-identity line says when a check differs; its table has one row per precision and path."""
    import json
    record = json.loads((course.results_dir() / "validation.json").read_text())
    cases = [c for c in record["cases"] if c["stage"] == "sums"]
    cases[0] = dict(cases[0], passed=False)
    det = [dict(d, bit_identical=False) if i == 0 else d
           for i, d in enumerate(x for x in record["determinism"] if x["stage"] == "sums")]
    (tmp_path / "validation.json").write_text(json.dumps(dict(record, cases=cases, determinism=det)))
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    md, table = course.stage_validation("sums")
    assert f"**{len(cases) - 1} of {len(cases)} cases pass**" in md
    assert md.count("Failing: problem") == 1 and "**not every**" in md and "some differ" in md
    assert int(table.cases.sum()) == len(cases) and table.index.names == ["precision", "path"]
    assert all(table.what_the_path_runs.str.len() > 0)                  # every path described beside it
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path / "absent"))
    assert course.stage_validation("sums") == (course.NO_RESULTS, None)


# ---------------------------------------------------------------- notebooks 05–07: spreads, ratios, eval against train
def test_peer_spread_md_says_when_the_records_do_not_measure_it(tmp_path, monkeypatch):
    """Without peers/bench.csv the line says the spread is not measured (not an empty string);
    with repeated configurations it gives each peer's largest spread."""
    import pandas as pd
    monkeypatch.setattr(course, "results_dir", lambda gpu="h100": tmp_path)
    cols = ["problem", "batch", "in_features", "out_features", "mode", "precision", "impl", "median_ms"]
    pd.DataFrame([("84", 1024, 8192, 8192, "train", "fp32", "eager", 2.0)], columns=cols).to_csv(
        tmp_path / "bench.csv", index=False)
    text = course.peer_spread_md()
    assert course.NOT_MEASURED in text and course.PEER_REPEATS in text and "\n" not in text
    (tmp_path / "peers").mkdir()
    pd.DataFrame([("84", 1024, 8192, 8192, "train", "fp32", "eager", 2.5)], columns=cols).to_csv(
        tmp_path / "peers" / "bench.csv", index=False)
    text = course.peer_spread_md()
    assert course.NOT_MEASURED not in text and "**25.0 %**" in text


def test_gemm_run_spread_pairs_naive_and_fold(tmp_path, monkeypatch):
    """The same GEMM kernel in naive's and fold's profiled runs: max/min − 1 per (problem,
    precision, kernel); other kernels and impls left out; None without such a pair."""
    import pandas as pd
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    assert course.gemm_run_spread() is None  # no profile.csv
    shape = "1024x8192->8192"
    rows = [("84", shape, "train", "tf32", "naive", "wgmma_gemm_kernel<BiasStore>", 1, 100.0),
            ("84", shape, "train", "tf32", "fold", "wgmma_gemm_kernel<BiasStore>", 1, 104.0),
            ("84", shape, "train", "tf32", "naive", "column_moment_kernel", 1, 10.0),
            ("84", shape, "train", "tf32", "fold", "column_moment_kernel", 1, 20.0),
            ("84", shape, "train", "tf32", "sums", "wgmma_gemm_kernel<ColumnStats>", 1, 200.0)]
    cols = ["problem", "shape", "mode", "precision", "impl", "kernel", "calls", "cuda_time_us_per_call"]
    pd.DataFrame(rows, columns=cols).to_csv(tmp_path / "profile.csv", index=False)
    pairs = course.gemm_run_spread()
    assert len(pairs) == 1 and pairs["spread %"].iloc[0] == pytest.approx(4.0)
    assert course.gemm_run_spread(("fp32",)) is None


def test_measurement_ratios_are_the_stage_time_over_each_other():
    table = course.measurement_table("fused", ("fp32", "tf32", "3xtf32"))
    if table is None:
        pytest.skip("no committed bench.csv")
    r = course.measurement_ratios("fused", ("fp32", "tf32", "3xtf32"))
    t = table.set_index(["problem", "precision"])
    assert list(r.index) == list(t.index)
    assert r["× predicted"].to_numpy() == pytest.approx((t["fused ms"] / t["predicted ms"]).to_numpy())
    assert r["× eager"].to_numpy() == pytest.approx((t["fused ms"] / t["eager ms"]).to_numpy())
    assert r["× GEMM alone"].to_numpy() == pytest.approx((t["fused ms"] / t["gemm_only ms"]).to_numpy())
    saved = course.saved_table("fused")
    assert r["× sums"].to_numpy() == pytest.approx((saved["fused ms"] / saved["sums ms"]).to_numpy())


def _eval_line(text, problem, precision):
    [line] = [x for x in text.splitlines() if x.startswith(f"- **{problem} in {precision}**")]
    return line


def test_eval_slower_md_follows_the_profile(tmp_path, monkeypatch):
    """Each case where eval is slower says its GEMM took longer exactly where profile.csv has the
    eval GEMM longer than the train one; raising the eval GEMM of a case beyond the spread makes
    the line say so; a case eval is not slower in is not listed."""
    import shutil
    t = course.eval_versus_train()
    if t is None or course.profile() is None:
        pytest.skip("no committed bench.csv and profile.csv")
    text = course.eval_slower_md()
    slower = t[t["% saved"] < 0]
    for (p, q), r in t.iterrows():
        if (p, q) not in slower.index:
            assert f"**{p} in {q}**" not in text
            continue
        line = _eval_line(text, p, q)
        assert (": longer" in line) == (r["eval GEMM µs"] > r["train GEMM µs"]), line
        assert f"{r['eval GEMM µs']:.1f} µs against train's {r['train GEMM µs']:.1f}" in line
    # an eval GEMM far slower than train's, in a case eval is slower in: longer, beyond the spread
    p, q = slower.index[0]
    src = course.results_dir()
    for name in ("bench.csv", "profile.csv", "env.json"):
        shutil.copy(src / name, tmp_path / name)
    prof = course.profile()
    from fusedlib.reference import PRESETS
    sel = ((prof.problem == p) & (prof["shape"] == str(PRESETS[p])) & (prof["mode"] == "eval") & (prof.impl == "fused")
           & (prof.precision == q) & prof.kernel.str.contains("gemm"))
    prof.loc[sel, "cuda_time_us_per_call"] *= 1.5
    prof.to_csv(tmp_path / "profile.csv", index=False)
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    assert ": longer, beyond the same kernel's spread" in _eval_line(course.eval_slower_md(), p, q)


def test_eval_slower_md_without_a_slower_case(tmp_path, monkeypatch):
    import shutil
    if course.measured() is None:
        pytest.skip("no committed bench.csv")
    bench = course.measured()
    bench.loc[bench["mode"] == "eval", "median_ms"] *= 0.5
    bench.to_csv(tmp_path / "bench.csv", index=False)
    shutil.copy(course.results_dir() / "env.json", tmp_path / "env.json")
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    assert "nowhere slower" in course.eval_slower_md()
    (tmp_path / "bench.csv").unlink()
    assert course.NO_RESULTS in course.eval_slower_md() and course.eval_versus_train() is None


def test_kernel_pass_share_and_the_16bit_trends(tmp_path, monkeypatch):
    """The measured share of the kernels around the GEMM (the GEMM alone: none), and one line per
    group of impls that move alike from tf32 to bf16: naive keeps Z in float32, so its passes
    weigh more in bf16, predicted and measured; without profile.csv the measured side says so."""
    assert course.is_gemm_kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT")
    assert course.is_gemm_kernel("void fl::wgmma_gemm_kernel<256, false, fl::ColumnStatsMerge>")
    assert not course.is_gemm_kernel("void fl::online_softmax_rows_regs_kernel<8, 0, 0>(float const*)")
    if course.profile() is None:
        pytest.skip("no committed profile.csv")
    assert course.kernel_pass_share("gemm_only", "84", "bf16") < 1
    naive = [(course.kernel_pass_share("naive", p, "tf32"), course.kernel_pass_share("naive", p, "bf16"))
             for p in course.PROBLEMS]
    text = course.pass_share_trend_md()
    [line] = [x for x in text.splitlines() if "`naive`" in x]
    grows = all(b > a for a, b in naive)
    assert line.startswith("- **Grows at every shape**, predicted and measured") == grows
    assert "Z in float32" in line and text.count("`fused` (Z′ in bf16") == 1
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    assert "(not profiled)" in course.pass_share_trend_md()
    with pytest.raises(ValueError, match="two"):
        course.pass_share_trend_md(precisions=("tf32",))
    assert course.pass_share_correction_md() is None  # no profile.csv here
    monkeypatch.delenv("FUSEDLIB_RESULTS")
    # the verdict on each impl: "as predicted" where the measured and predicted directions agree,
    # else a correction of notebook 05's prediction
    for impl in ("naive", "sums", "eager"):
        pairs = lambda share: {(p, i): share(impl, p, q) for p in course.PROBLEMS for i, q in enumerate(("tf32", "bf16"))}
        measured_ = course._direction(pairs(course.kernel_pass_share), verb=True)
        predicted = course._direction(pairs(lambda *a: course.pass_share(*a)["passes %"]), verb=True)
        verdict = course.pass_share_correction_md((impl,))
        assert ("as the cost model predicted" in verdict) == (measured_ == predicted), impl
        assert ("corrects the prediction of notebook 05" in verdict) == (measured_ != predicted), impl


def test_peer_spread_md_without_any_benchmark(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    assert course.NO_RESULTS in course.peer_spread_md()
