"""Notebook 05's pictures (fusedlib.lab.diagrams.fused) and the kernel facts its exercises rest on."""
import math
import re
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from fusedlib.lab.diagrams import fused
from fusedlib.lab.exercises.solutions import nb05

KERNELS = Path(__file__).resolve().parent.parent / "fusedlib" / "kernels"


def test_online_trace_ends_at_the_softmax_normaliser():
    values = [0.5, 3.0, -1.0, 2.0, 7.5, 7.0, 1.0]
    for chunk in (1, 2, 3, 7):
        steps = fused.online_max_sum_trace(values, chunk)
        assert steps[-1]["end"] == len(values) and steps[-1]["m"] == max(values)
        assert steps[-1]["l"] == pytest.approx(sum(math.exp(v - max(values)) for v in values), rel=1e-12)
        ms = [s["m"] for s in steps]
        assert [s["rescaled"] for s in steps] == [False] + [b > a for a, b in zip(ms, ms[1:])]
    with pytest.raises(ValueError):
        fused.online_max_sum_trace([], 4)
    with pytest.raises(ValueError):
        fused.online_max_sum_trace([1.0], 0)


@pytest.mark.parametrize("stem", sorted(fused.FIGURES))
def test_figures_are_figures_with_titles(stem):
    fig = fused.FIGURES[stem]()
    assert isinstance(fig, Figure) and len(fig.axes) == 2 and fig.axes[0].get_title()


def test_the_ring_exercise_matches_the_kernel_source():
    """The exercise's geometry (128×32 slices of X, BN×32 of W, twice W in 3xTF32, fp32, a ring
    of 192·1024 bytes) is the kernel's WgTile; the engine's widths give 4 stages in tf32 and 3 in
    3xTF32."""
    src = (KERNELS / "gemm_wgmma.cuh").read_text()
    assert "kWgBM = 128, kWgBK = 32" in src
    assert re.search(r"kABytes = kWgBM \* kWgBK \* 4, kBBytes = BN \* kWgBK \* 4", src)
    assert "kStageBytes = kABytes + (PROMOTE ? 2 : 1) * kBBytes" in src
    assert "kStages = (192 * 1024) / kStageBytes < 6 ? (192 * 1024) / kStageBytes : 6" in src  # capped at six
    assert nb05.ring_stages(256, False) == 4 and nb05.ring_stages(168, True) == 3
    assert nb05.ring_stages(64, False) == 6  # eight fit at the narrow tf32 tile: the cap decides


def test_the_ring_check_rejects_each_known_mistake():
    """The registered wrong answer ignores the cap; the check also rejects one that counts the
    3xTF32 operand's slice once."""
    from fusedlib.lab.exercises import ExerciseError
    from fusedlib.lab.exercises import nb05 as checks
    assert (64, False) in checks.RING_CASES
    for wrong in (checks._ring_stages_without_the_cap, checks._ring_stages_forgetting_w_small):
        with pytest.raises(ExerciseError):
            checks.check_ring_stages(wrong)
