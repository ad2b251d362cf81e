"""Notebook 08's helpers: the fused backward's plan, prediction and memory count, the train-step
sentences rendered from train_step.csv, and the data-flow figure."""
import pytest

from fusedlib.lab import course
from fusedlib.reference import PRESETS


def test_backward_plan_follows_the_kernels():
    names = lambda problem, precision: [p["kernel"] for p in course.backward_plan(problem, precision)]
    assert names("84", "fp32")[0] == "row_dot_kernel" and "row_dot_kernel" not in names("33", "fp32")
    assert not any("x_center" in k for k in names("84", "tf32"))          # tf32 multiplies X itself
    assert any("x_center" in k for k in names("39", "3xtf32"))
    dz = next(p for p in course.backward_plan("84", "3xtf32") if p["kernel"] == "backward_dz_kernel")
    assert dz["writes"] == {"dZ'": (2, "NM"), "dZ'ᵀ": (2, "NM")}          # 3xTF32: two TF32 parts each
    assert sum(p["gemm"] for p in course.backward_plan("33", "fp32")) == 1  # x is input data: no dX
    with pytest.raises(ValueError, match="problem"):
        course.backward_plan("12", "fp32")
    with pytest.raises(ValueError, match="precision"):
        course.backward_plan("84", "fp16")


def test_backward_prediction_sums_its_passes():
    table, ms = course.backward_prediction("84", "tf32")
    s = PRESETS["84"]
    assert ms == pytest.approx(table["ms at its roof"].sum())
    gemm = table[table.GFLOP > 0]
    assert len(gemm) == 1 and gemm.GFLOP.iloc[0] == pytest.approx(2 * s.batch * s.in_features * s.out_features / 1e9)
    assert gemm["bound by"].iloc[0] == "compute"
    nm = s.batch * s.out_features * 4 / 1e6
    dz = table.set_index("kernel").loc["backward_dz_kernel"]
    assert dz["MB written"] == pytest.approx(2 * nm) and dz["MB read"] == pytest.approx(3 * nm, rel=1e-3)
    assert course.backward_prediction("84", "3xtf32")[1] > ms                 # a third of the TF32 rate


def test_backward_memory_predicts_the_measured_peaks():
    """Every fused float32 row of train_step.csv (the precisions the count models): the count of
    live tensors is the measured peak."""
    steps = course.train_steps()
    if steps is None:
        pytest.skip("no committed train_step.csv")
    fused = steps[(steps.impl == "fused") & steps.precision.isin(course.FLOAT32_STEPS)]
    assert len(fused) == 9
    for row in fused.itertuples():
        assert sum(course.backward_memory(row.problem, row.precision).values()) == pytest.approx(row.peak_mib, abs=1.0)


def test_train_step_md_renders_the_committed_ratios(tmp_path, monkeypatch):
    summary = course.train_step_summary()
    if summary is None:
        pytest.skip("no committed train_step.csv")
    ratios = (summary["fused step ms"] / summary["eager step ms"])[summary.precision == "3xtf32"]
    text = course.train_step_md()
    assert f"{ratios.min():.2f}–{ratios.max():.2f}× eager fp32's time" in text
    assert all(f"**{p}**" in text for p in ("TF32", "3xTF32", "fp32", "Peak memory"))
    assert summary["% saved"][ratios.index].tolist() == pytest.approx((100 * (1 - ratios)).tolist())
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    assert course.train_step_summary() is None and course.NO_RESULTS in course.train_step_md()


def test_backward_dataflow_draws_one_bar_row_per_kernel():
    from fusedlib.lab.diagrams import backward
    fig = backward.backward_dataflow("33", "3xtf32")
    [ax] = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == [p["kernel"] for p in course.backward_plan("33", "3xtf32")]
    widths = sum(p.get_width() for p in ax.patches)
    plan_mb = sum(c * course._unit_bytes(u, PRESETS["33"]) / 1e6 for p in course.backward_plan("33", "3xtf32")
                  for c, u in (*p["reads"].values(), *p["writes"].values()))
    assert widths == pytest.approx(plan_mb)                                   # to scale
    assert set(backward.FIGURES) and all(callable(f) for f in backward.FIGURES.values())


def test_train_step_inversions_name_a_later_stage_slower_than_an_earlier(tmp_path, monkeypatch):
    """One row per setting whose stages break the ladder's order (median step), with its largest
    pair and how many pairs are out of order; settings in order are left out; the sentence counts
    them and says where the fastest calls are back in order."""
    import pandas as pd
    rows = []
    for precision, ms in (("bf16", (1.0, 0.9, 0.8, 0.7)), ("fp16", (0.8, 0.9, 0.95, 1.0))):
        for impl, t in zip(("naive", "fold", "sums", "fused"), ms):
            rows.append({"problem": "33", "precision": precision, "impl": impl, "median_ms": t, "min_ms": t / 2,
                         "forward_ms": t / 3})
    pd.DataFrame(rows).to_csv(tmp_path / "train_step.csv", index=False)
    monkeypatch.setenv("FUSEDLIB_RESULTS", str(tmp_path))
    t = course.train_step_inversions()
    assert list(t.index) == [("33", "fp16")]
    r = t.iloc[0]
    assert (r["earlier"], r["later"], r["pairs"]) == ("naive", "fused", "6 of 6")
    assert r["% slower"] == pytest.approx(25.0)
    text = course.train_step_inversions_md()
    assert text.startswith("In 1 of 2 settings") and "in 0 of the 1" in text
    assert course.train_step_inversions(("bf16",)).empty
    assert "every stage's step" in course.train_step_inversions_md(("bf16",))
    assert "device_ms" not in text and "later device ms" not in t
    # with the GPU's times alone (--hold-us): the pair's, and whether they are in order
    df = pd.DataFrame(rows).assign(device_ms=lambda d: d.median_ms.where(d.impl != "fused", 0.79))
    df.to_csv(tmp_path / "train_step.csv", index=False)
    r = course.train_step_inversions().iloc[0]
    assert (r["earlier device ms"], r["later device ms"]) == (0.8, 0.79)
    assert "`device_ms`) the pair is in the ladder's order in 1 of the 1." in course.train_step_inversions_md()
    df.assign(device_ms=df.device_ms.where(df.impl != "fused", 0.84)).to_csv(tmp_path / "train_step.csv", index=False)
    assert "in 0 of the 1; in the others the later stage is 5.0 % slower" in course.train_step_inversions_md()
    (tmp_path / "train_step.csv").unlink()
    assert course.train_step_inversions() is None and course.NO_RESULTS in course.train_step_inversions_md()


def test_the_committed_16bit_steps_out_of_order_are_listed():
    steps = course.train_steps()
    if steps is None or not steps.precision.isin(course.SIXTEEN_STEPS).any():
        pytest.skip("no committed 16-bit train steps")
    t = course.train_step_inversions(course.SIXTEEN_STEPS)
    for (problem, precision), g in steps[steps.precision.isin(course.SIXTEEN_STEPS)].groupby(["problem", "precision"]):
        ms = g.set_index("impl").median_ms
        ordered = all(ms[a] >= ms[b] for i, a in enumerate(("naive", "fold", "sums", "fused"))
                      for b in ("naive", "fold", "sums", "fused")[i + 1:])
        assert ((problem, precision) in t.index) == (not ordered), (problem, precision)
