"""Pictures of the stages ``fold``, ``sums`` and ``fused`` (notebooks 03 and 04, and 05 for the
traffic of ``fused``), drawn by code from the cost model and the algebra:

* ``traffic_fold``, ``traffic_sums``, ``traffic_fused``: the kernels of the stage in launch order
  and the tensors each reads and writes in DRAM, bars to scale in MB (bytes of
  :func:`fusedlib.lab.costmodel.cost`, train mode, fp32, at the KernelBench shapes of 84 and 39);
* ``sums_epilogue``: the GEMM's output tiles and where the column statistics of one tile are
  formed in its epilogue, on the two kinds of path (a shared-memory C tile: SIMT and mma.sync;
  the accumulator registers: wgmma);
* ``chan_merge_tree``: the tile partials merged with Chan's formula in the kernels' fixed order
  (:func:`fusedlib.algebra.chan_merge`).

Every function returns a :class:`matplotlib.figure.Figure` made without pyplot (no backend is
chosen or switched); ``python -m fusedlib figures`` exports them (``FIGURES``).
"""
from __future__ import annotations

from fusedlib.lab.figures import subplots

#: One colour a tensor, the same in every picture.
TENSOR_COLORS = {"X": "#4C72B0", "W": "#8172B2", "Z": "#DD8452", "Z'": "#DD8452", "Y": "#55A868",
                 "partials": "#C44E52", "vectors": "#937860"}
#: The full tensors (and the statistics partials) each pass of a stage reads and writes, by the
#: cost model's pass names; what a pass moves beyond them is its M- and N-vectors ("vectors":
#: μ, σ², γ, β, s, a, c, the running buffers, row maxima and sums).
PASS_TENSORS = {
    "GEMM + bias": (("X", "W"), ("Z",)),
    "column mean": (("Z",), ()),
    "column variance": (("Z",), ()),
    "coefficients + running buffers": ((), ()),
    "V = a∘Z + c, row softmax": (("Z",), ("Y",)),
    "Y = a∘Z + c": (("Z",), ("Y",)),
    "GEMM + statistics epilogue": (("X", "W"), ("Z'", "partials")),
    "finalize (Chan merge, coefficients, running buffers)": (("partials",), ()),
    "V = a∘Z' + c, row softmax": (("Z'",), ("Y",)),
    "Y = a∘Z' + c": (("Z'",), ("Y",)),
    "GEMM + statistics epilogue + last-block merge": (("X", "W", "partials"), ("Z'", "partials")),
    "V = a∘Z' + c, online row softmax": (("Z'",), ("Y",)),
}
#: Problems whose KernelBench shapes the traffic pictures show (84: W dominates; 39: Z does).
TRAFFIC_PROBLEMS = ("84", "39")


def tensor_bytes(problem: str, precision: str = "fp32") -> dict:
    """Bytes of each full tensor at ``problem``'s KernelBench shape (fp32, 4 bytes an element):
    X (N×K), W (M×K), Z, Z', Y (N×M) and the statistics partials (2·T·M, T row tiles)."""
    from fusedlib.algebra import tile_rows
    from fusedlib.reference import PRESETS
    s = PRESETS[problem]
    n, k, m = s.batch, s.in_features, s.out_features
    tiles = -(-n // tile_rows(n, m, precision))
    return {"X": 4 * n * k, "W": 4 * m * k, "Z": 4 * n * m, "Z'": 4 * n * m, "Y": 4 * n * m,
            "partials": 4 * 2 * tiles * m}


def traffic(stage: str, problem: str, precision: str = "fp32") -> list[dict]:
    """The stage's passes (train mode, KernelBench shape of ``problem``) with the tensors each
    reads and writes: one dict a pass, ``name``, ``reads`` and ``writes`` (lists of (tensor,
    bytes), the vectors last), whose bytes add up to the cost model's pass exactly.

    Raises:
        KeyError: a pass of the cost model has no entry in :data:`PASS_TENSORS`.
    """
    from fusedlib.lab.costmodel import cost
    from fusedlib.reference import PRESETS, problem_kind
    s = PRESETS[problem]
    sizes = tensor_bytes(problem, precision)
    out = []
    for p in cost(problem_kind(problem), stage, s.batch, s.in_features, s.out_features, "train", precision).passes:
        reads, writes = PASS_TENSORS[p.name]
        row = {"name": p.name}
        for key, names, total in (("reads", reads, p.read_bytes), ("writes", writes, p.write_bytes)):
            parts = [(t, sizes[t]) for t in names]
            rest = total - sum(b for _, b in parts)
            row[key] = parts + ([("vectors", rest)] if rest > 0 else [])
        out.append(row)
    return out


def _traffic_figure(stage: str):
    fig, axes = subplots(1, len(TRAFFIC_PROBLEMS), figsize=(15, 5.2), sharex=True)
    from fusedlib.reference import PRESETS
    for ax, problem in zip(axes, TRAFFIC_PROBLEMS):
        passes = traffic(stage, problem)
        total = 0.0
        for i, p in enumerate(passes):
            y = -i
            left = 0.0
            for kind, hatch in (("reads", "//"), ("writes", None)):
                for tensor, b in p[kind]:
                    mb = b / 1e6
                    total += mb
                    ax.barh(y, mb, left=left, height=0.6, color=TENSOR_COLORS[tensor], hatch=hatch,
                            edgecolor="white" if hatch else "black", linewidth=0.5, alpha=0.9 if hatch else 1.0)
                    if mb >= 50:  # a label only where it fits
                        ax.text(left + mb / 2, y, f"{tensor} {mb:.0f}", ha="center", va="center", fontsize=10,
                                color="white", fontweight="bold")
                    left += mb
            ax.text(left + 5, y, f"{left:.3g} MB", va="center", ha="left", fontsize=10)
        ax.set_yticks([-i for i in range(len(passes))], [p["name"] for p in passes])
        ax.set_ylim(-len(passes) + 0.4, 0.6)
        ax.set_xlabel("MB moved in DRAM (hatched: read, solid: written)")
        ax.set_title(f"{problem} @{PRESETS[problem]}: {len(passes)} kernels, {total:.0f} MB")
        ax.grid(True, axis="x", lw=0.3)
    top = max(sum(b for _, b in p["reads"] + p["writes"]) for pr in TRAFFIC_PROBLEMS for p in traffic(stage, pr)) / 1e6
    axes[0].set_xlim(0, top * 1.18)
    from matplotlib.patches import Patch
    names = ["X", "W", "Z" if stage == "fold" else "Z'", "Y"] + ([] if stage == "fold" else ["partials"]) + ["vectors"]
    labels = {"X": "X (input, N×K)", "W": "W (weight, M×K)", "Z": "Z = XWᵀ + b (N×M)", "Z'": "Z' = XWᵀ (N×M)",
              "Y": "Y (output, N×M)", "partials": "tile partials (mean_t, M2_t): 2·T×M",
              "vectors": "vectors of M or N (μ, σ², γ, β, a, c, buffers, ...)"}
    fig.legend([Patch(facecolor=TENSOR_COLORS[t]) for t in names], [labels[t] for t in names],
               loc="outside lower center", ncol=3)
    fig.suptitle(f"Stage {stage}, train mode, fp32: the kernels in launch order (top to bottom) and the "
                 "tensors each reads and writes, to scale (cost model)")
    return fig


def traffic_fold():
    """Stage ``fold``: GEMM + bias, two statistics kernels, the coefficients, one row pass."""
    return _traffic_figure("fold")


def traffic_sums():
    """Stage ``sums``: the GEMM with the statistics epilogue, the finalize kernel, one row pass."""
    return _traffic_figure("sums")


def traffic_fused():
    """Stage ``fused``: the GEMM that also merges the partials, one row pass."""
    return _traffic_figure("fused")


def sums_epilogue():
    """The GEMM's output Z' cut into BM×BN tiles (one CTA each), and how the epilogue of one
    128-row tile forms its columns' partials (mean_t, M2_t), on a path with a shared-memory
    C tile (SIMT, mma.sync: ``ColumnStats::apply``) and on the wgmma path, straight from the
    accumulator registers (``epilogue_from_fragments``). Schematic: 8 row tiles as at 84's
    KernelBench shape (N = 1024, BM = 128)."""
    from matplotlib.patches import FancyArrowPatch, Rectangle
    fig, axes = subplots(1, 3, figsize=(16, 6.2), width_ratios=(1.0, 1.15, 1.15))
    ax = axes[0]
    rows, cols = 8, 8
    for r in range(rows):
        for c in range(cols):
            hot = (r, c) == (2, 3)
            ax.add_patch(Rectangle((c, rows - 1 - r), 1, 1, facecolor="#C44E52" if hot else "#F2D0B5",
                                   edgecolor="white", linewidth=1.5))
    ax.add_patch(Rectangle((0, -1.6), cols, 0.7, facecolor="#C44E52", alpha=0.35, edgecolor="black", linewidth=0.5))
    ax.text(cols / 2, -1.25, "partials: 2 rows (mean_t, M2_t) per row tile t", ha="center", va="center", fontsize=10)
    ax.annotate("", xy=(3.5, -0.85), xytext=(3.5, rows - 2.5),
                arrowprops=dict(arrowstyle="->", color="black", lw=1.2))
    ax.text(cols / 2, rows + 0.35, "Z' (N×M): one BM×BN tile per CTA", ha="center", fontsize=11)
    ax.text(-0.3, rows - 2.5, "row tile t", ha="right", va="center", fontsize=10)
    ax.set(xlim=(-2.4, cols + 0.2), ylim=(-2, rows + 1), aspect="equal")
    ax.set_title("the output tiles")
    ax.axis("off")

    def tile_panel(ax, title, strips, strip_label, steps):
        ax.add_patch(Rectangle((0, 0), 8, 8, facecolor="#F2D0B5", edgecolor="black", linewidth=0.8))
        for i in range(1, strips):
            ax.plot([0, 8], [8 * i / strips] * 2, color="white", lw=1.2)
        ax.text(4, 8.35, strip_label, ha="center", fontsize=10)
        for c in (1.5, 4.5, 6.5):
            ax.add_patch(FancyArrowPatch((c, 7.7), (c, 0.3), arrowstyle="-|>", mutation_scale=12, color="#C44E52",
                                         lw=1.5))
        ax.add_patch(Rectangle((0, -1.4), 8, 0.9, facecolor="#C44E52", alpha=0.35, edgecolor="black", linewidth=0.5))
        ax.text(4, -0.95, "partials of tile t", ha="center", va="center", fontsize=10)
        for i, line in enumerate(steps):
            ax.text(8.4, 8.0 - 2.0 * i, line, ha="left", va="top", fontsize=10, wrap=True)
        ax.set(xlim=(-0.3, 17.5), ylim=(-1.8, 9.2), aspect="equal", title=title)
        ax.axis("off")

    tile_panel(axes[1], "SIMT and mma.sync: a C tile in shared memory", 4,
               "C tile (BM×BN, shared memory)",
               ("1. the mainloop stores its\n   accumulators in C",
                "2. the epilogue writes Z'\n   from C to DRAM",
                "3. a thread a column and row\n   group sums its rows of C",
                "4. the groups' sums are added\n   in group order: mean_t,\n   then a second pass: M2_t"))
    tile_panel(axes[2], "wgmma: from the accumulator registers", 8,
               "8 warps × 16 rows, in registers (no C tile)",
               ("1. each thread stores its\n   accumulators as Z' (pairs)",
                "2. a warp sums a column's\n   rows by shuffles (butterfly)",
                "3. the 8 warps' sums are\n   added in warp order through\n   a small shared buffer",
                "4. mean_t, then a second\n   pass from the registers: M2_t"))
    fig.suptitle("Where the column statistics are formed: in the GEMM's epilogue, tile by tile (stage sums)")
    return fig


def merge_tree(tiles: int):
    """The merge order of :func:`fusedlib.algebra.chan_merge` for ``tiles`` partials as a list
    of (left, right, result) node ids: leaves are ``t0`` … ``t{T−1}``; merges are numbered
    ``m1``, ``m2``, … in the order they happen (runs of a chain, a chain's runs, then a
    quarter's chains, then the quarters, each left to right)."""
    from fusedlib.algebra import MERGE_CHAINS, MERGE_QUARTERS, MERGE_RUN, _runs
    steps: list[tuple[str, str, str]] = []

    def in_order(nodes: list[str]) -> str:
        acc = nodes[0]
        for node in nodes[1:]:
            steps.append((acc, node, f"m{len(steps) + 1}"))
            acc = steps[-1][2]
        return acc

    quarters = []
    for qlo, qhi in _runs(0, tiles, MERGE_QUARTERS):
        chains = [in_order([in_order([f"t{t}" for t in range(r, min(hi, r + MERGE_RUN))])
                            for r in range(lo, hi, MERGE_RUN)])
                  for lo, hi in _runs(qlo, qhi - qlo, MERGE_CHAINS)]
        quarters.append(in_order(chains))
    in_order(quarters)
    return steps


def chan_merge_tree(tiles: int | None = None):
    """The Chan merge tree: the T tile partials (n_t, mean_t, M2_t) of a column merged in the
    kernels' fixed order (:func:`merge_tree`), the formula of one merge beside it. ``tiles``
    defaults to 84's KernelBench shape (N = 1024 rows in 128-row tiles: 8)."""
    from fusedlib.algebra import tile_rows
    from fusedlib.reference import PRESETS
    if tiles is None:
        s = PRESETS["84"]
        tiles = -(-s.batch // tile_rows(s.batch, s.out_features))
    steps = merge_tree(tiles)
    pos = {f"t{t}": (float(t), 0.0) for t in range(tiles)}
    for left, right, node in steps:
        (xl, yl), (xr, yr) = pos[left], pos[right]
        pos[node] = ((xl + xr) / 2, max(yl, yr) + 1)
    fig, ax = subplots(figsize=(max(9.0, 1.1 * tiles + 4), 5.8))
    for left, right, node in steps:
        for child in (left, right):
            ax.plot(*zip(pos[child], pos[node]), color="0.4", lw=1.2, zorder=1)
    for name, (x, y) in pos.items():
        leaf = name.startswith("t")
        ax.scatter([x], [y], s=900 if leaf else 700, color="#C44E52" if leaf else "#F2D0B5", edgecolor="black",
                   zorder=2)
        label = name if leaf else f"⊕{name[1:]}"
        ax.text(x, y, label, ha="center", va="center", fontsize=10, zorder=3)
    root = steps[-1][2] if steps else "t0"
    ax.text(pos[root][0], pos[root][1] + 0.45, "column: (N, μ, M2 = N·σ²)", ha="center", fontsize=11)
    ax.text(0, -0.75, "tile partials (n_t, mean_t, M2_t) from the epilogue; ⊕k: the k-th merge",
            ha="left", fontsize=10)
    ax.text(tiles - 0.5, pos[root][1] * 0.55,
            "one merge ⊕ of a and b:\nn = n_a + n_b,  δ = mean_b − mean_a\nmean = mean_a + δ·n_b / n\n"
            "M2 = M2_a + M2_b + δ²·n_a·n_b / n", ha="left", va="center", fontsize=11,
            bbox=dict(boxstyle="round", facecolor="white", edgecolor="0.6"))
    ax.set(xlim=(-0.8, tiles + 4.2), ylim=(-1.1, pos[root][1] + 1.0))
    ax.axis("off")
    ax.set_title(f"Chan's merge of {tiles} tile partials in a fixed order (the same at every call: "
                 "bit-identical reruns)")
    return fig


FIGURES = {"traffic_fold": traffic_fold, "traffic_sums": traffic_sums, "traffic_fused": traffic_fused,
           "sums_epilogue": sums_epilogue, "chan_merge_tree": chan_merge_tree}
