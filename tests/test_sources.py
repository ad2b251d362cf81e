"""No kernel change lands without fresh GPU results: every tracked kernel source must appear
with its current SHA-256 in each committed results/<gpu>/validation.json, in the
sources.json beside each committed bench.csv and in the train_step.sources.json beside each
train_step.csv (a bench.csv without its train_step.csv is incomplete), and likewise in the
data-parallel records (sync_validation.json, and the sync.sources.json beside sync.csv)."""
import json
from pathlib import Path

import pytest

from fusedlib import build

ROOT = Path(__file__).resolve().parent.parent
VALIDATIONS = sorted(ROOT.glob("results/*/validation.json"))
BENCHES = sorted(ROOT.glob("results/*/bench.csv"))
SYNC_VALIDATIONS = sorted(ROOT.glob("results/*/sync_validation.json"))
SYNC_BENCHES = sorted(ROOT.glob("results/*/sync.csv"))


def test_a_gpu_validation_is_committed():
    assert VALIDATIONS, "no results/<gpu>/validation.json: the kernels were never validated on a GPU"


@pytest.mark.parametrize("path", VALIDATIONS + SYNC_VALIDATIONS, ids=lambda p: p.parent.name + "/" + p.name)
def test_validation_matches_kernel_sources(path):
    on_disk = {p.relative_to(ROOT).as_posix() for p in build.KERNEL_DIR.glob("*.cu*")}
    assert on_disk == set(build.sources_sha256(ROOT)), "a kernel file is missing from build.source_files()"
    stale = build.stale_sources(json.loads(path.read_text())["sources_sha256"], ROOT)
    assert not stale, (f"{path.relative_to(ROOT)} is stale: {stale} changed or not covered; "
                       "re-run `pytest -m gpu` on the GPU and commit the new file")


@pytest.mark.parametrize("path,record", [(p, "sources.json") for p in BENCHES] +
                         [(p.parent / "train_step.csv", "train_step.sources.json") for p in BENCHES] +
                         [(p, "sync.sources.json") for p in SYNC_BENCHES],
                         ids=lambda v: v.parent.name + "/" + v.name if isinstance(v, Path) else "")
def test_bench_matches_kernel_sources(path, record):
    """Committed timings were measured on the current kernels (the record beside the CSV)."""
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: run `python -m fusedlib train-step --fresh` on the GPU"
    sources = path.parent / record
    assert sources.exists(), f"{path.relative_to(ROOT)} has no {record} beside it"
    stale = build.stale_sources(json.loads(sources.read_text())["sources_sha256"], ROOT)
    assert not stale, (f"{path.relative_to(ROOT)} is stale: {stale} changed since it was measured; "
                       "re-run `make results` (or the bench / train-step with --fresh) on the GPU and commit")


def test_stale_sources(tmp_path):
    current = build.sources_sha256(ROOT)
    assert build.stale_sources(current, ROOT) == []
    first = sorted(current)[0]
    assert build.stale_sources({**current, first: "0" * 64}, ROOT) == [first]
    assert build.stale_sources({f: d for f, d in current.items() if f != first}, ROOT) == [first]


@pytest.mark.parametrize("path", VALIDATIONS, ids=lambda p: p.parent.name)
def test_validation_record_is_consistent(path):
    """The record is what the GPU suite wrote: every pass flag follows from the case's own
    numbers and budget (tests/test_gpu.py's rule), the sanitizer runs are clean and reruns
    were bit-identical. Failing cases stay in the record (and are reported), never edited."""
    record = json.loads(path.read_text())
    assert record["cases"], "validation holds no cases"
    for case in record["cases"]:
        floor = {"fp32": 1e-5, "3xtf32": 1e-5, "tf32": 5e-3}[case["precision"]]
        assert case["budget"] == pytest.approx(max(floor, 2 * case["fp32_noise"]))
        if case["passed"]:
            assert case["finite"] and case["rel_err"] <= case["budget"], case
            assert case["buffer_rel_err"] <= max(floor, 1e-5), case
    assert record.get("gradients"), "validation holds no gradient cases"
    for case in record["gradients"]:  # check.run_grad_case's rule
        every = all(e == e for e in case["grad_errs"].values())  # NaN: a gradient was None
        assert case["passed"] == (every and case["finite"] and case["worst_ratio"] <= 1.0
                                  and (case["mode"] == "eval" or case["grad_errs"]["gemm.bias"] == 0.0)), case
    for r in record.get("kernelbench", []):  # fusedlib.kernelbench.evaluate's rule
        assert r["passed"] == (r["passed_trials"] == r["trials"] == len(r["max_abs_diff"])), r
    for r in record.get("mixed_precision", []):  # tests/test_mixed_precision.py's rule
        factor = r.get("unit_factor", {})  # the floor in the quantity's own units (_budget)
        worst = max(got / max(2 * eager, r["unit"] * factor.get(k, 1.0))
                    for k, (got, eager) in r["errors"].items())
        assert r["worst_ratio"] == pytest.approx(worst) and r["passed"] == (worst <= 1.0), r
    tools = {(s["tool"], s["stage"]): s["errors"] for s in record["sanitizer"]}
    assert set(tools) == {(t, st) for t in ("memcheck", "racecheck") for st in build.STAGE_FILES}
    assert all(errors == 0 for errors in tools.values()), tools
    assert record["determinism"] and all(d["bit_identical"] for d in record["determinism"])
    # sm_90: the persistent GEMM's grid sizes, 3xTF32's two ways of splitting W, tf32's two tile widths
    passes = {d.get("pass") for d in record["determinism"]}
    assert {"forward", "backward"} <= passes <= {"forward", "backward", "grid 1, 7, SMs",
                                                 "W split in smem, by the pass", "tile widths 256, 64"}, passes
