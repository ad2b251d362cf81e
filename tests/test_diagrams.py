"""The pictures drawn by code (fusedlib.lab.diagrams): every FIGURES function returns a Figure with
the panels and labels it promises, and the traffic pictures add up to the cost model."""
import pytest
from matplotlib.figure import Figure

from fusedlib.lab import figures
from fusedlib.lab.costmodel import cost
from fusedlib.lab.diagrams import stages
from fusedlib.reference import PRESETS, problem_kind


def _texts(fig):
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


def test_figures_are_exported_by_the_cli_discovery():
    found = figures.diagram_figures()
    for stem in stages.FIGURES:
        assert found[stem] is stages.FIGURES[stem]


@pytest.mark.parametrize("stem", sorted(stages.FIGURES))
def test_every_figure_function_returns_a_figure(stem):
    fig = stages.FIGURES[stem]()
    assert isinstance(fig, Figure) and fig.axes
    assert (fig.get_suptitle() or fig.axes[0].get_title()).strip()   # it says what it shows


@pytest.mark.parametrize("stage", ["fold", "sums", "fused"])
@pytest.mark.parametrize("problem", ["84", "33", "39"])
def test_traffic_adds_up_to_the_cost_model(stage, problem):
    s = PRESETS[problem]
    passes = cost(problem_kind(problem), stage, s.batch, s.in_features, s.out_features, "train", "fp32").passes
    rows = stages.traffic(stage, problem)
    assert [r["name"] for r in rows] == [p.name for p in passes]
    for r, p in zip(rows, passes):
        assert sum(b for _, b in r["reads"]) == p.read_bytes and sum(b for _, b in r["writes"]) == p.write_bytes
        assert all(b > 0 for _, b in r["reads"] + r["writes"])


@pytest.mark.parametrize("stage", ["fold", "sums", "fused"])
def test_traffic_figure_panels_and_labels(stage):
    fig = stages.FIGURES[f"traffic_{stage}"]()
    assert len(fig.axes) == len(stages.TRAFFIC_PROBLEMS)
    for ax, problem in zip(fig.axes, stages.TRAFFIC_PROBLEMS):
        names = [t.get_text() for t in ax.get_yticklabels()]
        assert names == [r["name"] for r in stages.traffic(stage, problem)]
        total = sum(b for r in stages.traffic(stage, problem) for _, b in r["reads"] + r["writes"]) / 1e6
        assert ax.get_title().endswith(f"{len(names)} kernels, {total:.0f} MB")
    texts = " ".join(_texts(fig))
    assert "W 268" in texts and ("Z' 268" in texts) != (stage == "fold")   # 84's W, 39's Z'


def test_sums_epilogue_names_both_paths():
    fig = stages.sums_epilogue()
    assert len(fig.axes) == 3
    titles = [ax.get_title() for ax in fig.axes]
    assert "C tile in shared memory" in titles[1] and "accumulator registers" in titles[2]
    assert any("no C tile" in t for t in _texts(fig))


def test_merge_tree_follows_the_algebra_order():
    """T tiles take T − 1 merges, each node is merged once, and at 8 tiles the order is the
    kernels': the four quarters' pairs, then the quarters left to right."""
    for tiles in (1, 2, 5, 8, 33, 128):
        steps = stages.merge_tree(tiles)
        assert len(steps) == tiles - 1
        used = [n for a, b, _ in steps for n in (a, b)]
        assert len(used) == len(set(used))
    assert stages.merge_tree(8) == [("t0", "t1", "m1"), ("t2", "t3", "m2"), ("t4", "t5", "m3"), ("t6", "t7", "m4"),
                                    ("m1", "m2", "m5"), ("m5", "m3", "m6"), ("m6", "m4", "m7")]
    fig = stages.chan_merge_tree()
    texts = _texts(fig)
    assert [f"t{t}" for t in range(8)] == [t for t in texts if t.startswith("t") and t[1:].isdigit()]
    assert sum(t.startswith("⊕") for t in texts) == 7


def test_rank_merge_draws_each_rank_and_the_gather():
    from fusedlib.lab.diagrams import sync
    fig = sync.rank_merge((2, 1))
    texts = " ".join(_texts(fig))
    assert "rank 0: 2 tiles" in texts and "rank 1: 1 tile" in texts and "all-gather" in texts
    assert "the same bits on every rank" in texts and figures.diagram_figures()["rank_merge"] is sync.rank_merge
