"""No kernel change lands without a fresh GPU validation: every tracked kernel source must
appear in each committed results/<gpu>/validation.json with its current SHA-256."""
import json
from pathlib import Path

import pytest

from fusedlib import build

ROOT = Path(__file__).resolve().parent.parent
VALIDATIONS = sorted(ROOT.glob("results/*/validation.json"))


def test_a_gpu_validation_is_committed():
    assert VALIDATIONS, "no results/<gpu>/validation.json: the kernels were never validated on a GPU"


@pytest.mark.parametrize("path", VALIDATIONS, ids=lambda p: p.parent.name)
def test_validation_matches_kernel_sources(path):
    record = json.loads(path.read_text())
    recorded = record["sources_sha256"]
    on_disk = {p.relative_to(ROOT).as_posix() for p in build.KERNEL_DIR.glob("*.cu*")}
    assert on_disk == set(build.sources_sha256(ROOT)), "a kernel file is missing from build.source_files()"
    current = build.sources_sha256(ROOT)
    missing = sorted(set(current) - set(recorded))
    stale = sorted(f for f in current if f in recorded and recorded[f] != current[f])
    assert not missing and not stale, (
        f"{path.relative_to(ROOT)} is stale: not covered {missing}, changed {stale}; "
        "re-run `pytest -m gpu` on the GPU and commit the new file")


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
    tools = {(s["tool"], s["stage"]): s["errors"] for s in record["sanitizer"]}
    assert set(tools) == {(t, st) for t in ("memcheck", "racecheck") for st in build.STAGE_FILES}
    assert all(errors == 0 for errors in tools.values()), tools
    assert record["determinism"] and all(d["bit_identical"] for d in record["determinism"])
