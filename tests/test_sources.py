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
def test_validation_passed(path):
    record = json.loads(path.read_text())
    assert record["cases"], "validation holds no cases"
    failed = [c for c in record["cases"] if not c["passed"]]
    assert not failed, f"{len(failed)} failing GPU cases recorded, e.g. {failed[:3]}"
    assert record["sanitizer"] and all(s["errors"] == 0 for s in record["sanitizer"])
