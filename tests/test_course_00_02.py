"""The course helpers notebooks 00–02 use: the take-away tables, listings without the lab's
history, and the naive stage's picture."""
import pandas as pd
import pytest

from fusedlib import glossary
from fusedlib.lab import course


def test_stage_savings_is_the_percentage_of_the_other_time(tmp_path, monkeypatch):
    rows = []
    for impl, precision, ms in (("naive", "fp32", 4.0), ("fold", "fp32", 3.0), ("eager", "fp32", 2.0),
                                ("naive", "tf32", 1.0), ("eager", "tf32", 1.25)):
        for problem, (n, k, m) in (("84", (1024, 8192, 8192)), ("33", (1024, 8192, 8192)), ("39", (16384, 4096, 4096))):
            rows.append({"problem": problem, "batch": n, "in_features": k, "out_features": m, "mode": "train",
                         "precision": precision, "impl": impl, "median_ms": ms, "rel_err": 1e-7,
                         "timestamp": "2026-01-01T00:00:00"})  # one run
    pd.DataFrame(rows).to_csv(tmp_path / "bench.csv", index=False)
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    naive = course.stage_savings("naive", ("fp32", "tf32", "3xtf32"))
    assert "% saved vs naive" not in naive and len(naive) == 9
    r = naive.set_index(["problem", "precision"])
    assert r.loc[("84", "fp32"), "% saved vs eager"] == pytest.approx(-100.0)      # twice eager's time
    assert r.loc[("39", "tf32"), "% saved vs eager"] == pytest.approx(20.0)
    assert pd.isna(r.loc[("33", "3xtf32"), "naive ms"]) and r.loc[("33", "3xtf32"), "eager ms"] == 2.0
    fold = course.stage_savings("fold").set_index(["problem", "precision"])
    assert fold.loc[("84", "fp32"), "% saved vs naive"] == pytest.approx(25.0)
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path / "absent"))
    assert course.stage_savings("naive") is None


def test_gemm_share_splits_the_profile():
    share = course.gemm_share("naive", ("fp32", "tf32", "3xtf32"))
    if share is None:
        pytest.skip("no committed profile.csv")
    assert (share["GEMM µs"] > 0).all() and (share["after the GEMM µs"] > 0).all()
    # 3xTF32's operand-split pass runs before the GEMM and no later stage removes it: its own group
    parts = share.set_index(["problem", "precision"])["3xTF32 parts µs"]
    assert (parts.xs("3xtf32", level="precision") > 0).all() and (parts.drop("3xtf32", level="precision") == 0).all()
    total = share["GEMM µs"] + share["3xTF32 parts µs"] + share["after the GEMM µs"]
    assert share["% after the GEMM"].tolist() == pytest.approx((100 * share["after the GEMM µs"] / total).tolist())


def test_without_history_keeps_the_code():
    listing = ("```cuda\n  switch (x) {  // <BM, BN> (variants timed: run59–run61)\n  // kept after run80\n"
               "  y = 1;  // see NOTES.md\n  // (run249: 16 µs)\n  z = 2;  // plain\n```")
    assert course.without_history(listing) == "```cuda\n  switch (x) {  // <BM, BN>\n  y = 1;\n  z = 2;  // plain\n```"
    whole = course.kernel_source("gemm.cuh")
    assert course.without_history(whole).count(";") == whole.count(";") - sum(
        line[line.find("//"):].count(";") for line in whole.splitlines() if "//" in line and "run" in line)


def test_the_naive_picture_draws_every_kernel():
    from fusedlib.lab.costmodel import cost
    from fusedlib.lab.diagrams import naive
    for stem, make in naive.FIGURES.items():
        fig = make()
        problem = stem.rsplit("_", 1)[1]
        ax = fig.axes[0]
        kind = "84" if problem == "84" else "33"
        passes = cost(kind, "naive", *{"84": (1024, 8192, 8192), "39": (16384, 4096, 4096)}[problem], "train").passes
        assert len(ax.patches) == 2 * len(passes)          # a read bar and a write bar per kernel
        labels = [t.get_text() for t in ax.texts]
        assert all(any(p.name in label for label in labels) for p in passes)


def test_the_glossary_table_lists_every_term():
    t = glossary.table()
    assert list(t.index) == [name for name, term in glossary.TERMS.items()
                             if term.notebook not in glossary.OWN_TERMS_NOTEBOOKS]
    assert set(t["introduced in"]) == {"notebook 00", "notebook 01", "notebook 02", "notebook 04", "notebook 05", "notebook 07", "notebook 08"}
    assert glossary.bold_definition("TF32", "**TF32** (TensorFloat-32) is …") and not glossary.bold_definition("TF32", "TF32")


def test_the_roofline_sketch_places_the_gemm_right_of_the_ridge():
    from fusedlib.lab.diagrams import basics
    fig = basics.roofline_sketch("84")
    ax = fig.axes[0]
    ceil = course.ceilings()
    ridge = ceil["fp32"] * 1e3 / ceil["bandwidth"]
    points = [line.get_xdata()[0] for line in ax.get_lines() if line.get_marker() in ("o", "s") and len(line.get_xdata())]
    gemm = [line.get_xdata()[0] for line in ax.get_lines() if line.get_marker() == "o" and len(line.get_xdata())]
    assert len(points) == 9 and len(gemm) == 1 and gemm[0] > ridge
    assert all(x < 1 for x in points if x not in gemm)
