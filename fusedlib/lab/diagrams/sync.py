"""Data parallelism (notebook 09, docs/design.md §14): the ranks' merge as one more level of the
tile merge.

* ``rank_merge``: each rank merges its own tile partials into one (n, mean, M2) per column, one
  all-gather hands every rank all of them, and every rank merges them in rank order.
"""
from __future__ import annotations

from fusedlib.lab.figures import subplots

#: Tiles each rank holds in the picture: uneven, as ranks' batches may be.
SHARDS = (3, 1, 2)


def rank_merge(shards: tuple[int, ...] = SHARDS):
    """Ranks (columns of tile partials, ``shards[r]`` tiles on rank r) merged into their rank
    triples, the all-gather band, and the rank-order merge every rank runs on what it received."""
    fig, ax = subplots(figsize=(11.0, 6.4))
    tile, rank_node, merged = "#C44E52", "#F2D0B5", "#8FB996"
    x0, centres = 0.0, []
    for r, tiles in enumerate(shards):
        xs = [x0 + t for t in range(tiles)]
        centre = sum(xs) / len(xs)
        for x in xs:
            ax.plot([x, centre], [0, 1.2], color="0.4", lw=1.2, zorder=1)
            ax.scatter([x], [0], s=700, color=tile, edgecolor="black", zorder=2)
            ax.text(x, 0, "t", ha="center", va="center", fontsize=10, zorder=3)
        ax.scatter([centre], [1.2], s=900, color=rank_node, edgecolor="black", zorder=2)
        ax.text(centre, 1.2, f"r{r}", ha="center", va="center", fontsize=10, zorder=3)
        ax.text(centre, -0.6, f"rank {r}: {tiles} tile{'s' if tiles > 1 else ''}", ha="center", fontsize=10)
        centres.append(centre)
        x0 += tiles + 1.2
    right = x0 - 1.2
    ax.axhspan(1.75, 2.35, color="#DDE6F0", zorder=0)
    ax.text(right / 2, 2.05, "all-gather: every rank receives every rank's (n, mean, M2), 3·M floats each",
            ha="center", va="center", fontsize=10)
    for c in centres:
        ax.annotate("", xy=(c, 1.75), xytext=(c, 1.45), arrowprops=dict(arrowstyle="->", color="0.3"))
    # every rank's merge of the R triples, in rank order: a chain
    xs = [right * (k + 1) / (len(shards) + 1) for k in range(len(shards))]
    ys = [2.9] * len(shards)
    for k, (x, y) in enumerate(zip(xs, ys)):
        ax.scatter([x], [y], s=900, color=rank_node, edgecolor="black", zorder=2)
        ax.text(x, y, f"r{k}", ha="center", va="center", fontsize=10, zorder=3)
    acc = (xs[0], ys[0])
    for k in range(1, len(xs)):
        node = ((acc[0] + xs[k]) / 2, 2.9 + 0.8 * k)
        for child in (acc, (xs[k], ys[k])):
            ax.plot(*zip(child, node), color="0.4", lw=1.2, zorder=1)
        ax.scatter([node[0]], [node[1]], s=700, color=merged if k == len(xs) - 1 else "#F2D0B5",
                   edgecolor="black", zorder=2)
        ax.text(node[0], node[1], "⊕", ha="center", va="center", fontsize=12, zorder=3)
        acc = node
    ax.text(acc[0], acc[1] + 0.45, "(N, μ, M2 = N·σ²): the same bits on every rank", ha="center", fontsize=11)
    ax.text(right + 0.8, 1.2, "each rank: its tiles merged\nas one process merges them", ha="left", va="center",
            fontsize=10)
    ax.text(right + 0.8, 3.4, "each rank: the ranks merged\nin rank order (Chan's ⊕,\nthe tiles' formula)",
            ha="left", va="center", fontsize=10)
    ax.set(xlim=(-0.8, right + 4.0), ylim=(-1.0, acc[1] + 1.0))
    ax.axis("off")
    ax.set_title("Batch statistics across ranks: one more level of the tile merge (forward: one all-gather)")
    return fig


FIGURES = {"rank_merge": rank_merge}
