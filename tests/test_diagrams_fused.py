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
    assert "kStages = (192 * 1024) / kStageBytes" in src
    assert nb05.ring_stages(256, False) == 4 and nb05.ring_stages(168, True) == 3
