"""Pictures of notebook 05 (the fused stage), drawn by code.

* ``online_softmax``: one sweep over a row keeps a running maximum m and a running sum ℓ of
  exp(v − m); whenever m rises, ℓ is rescaled by exp(m_old − m_new) (identity 7 of
  notebook 01, after Milakov & Gimelshein 2018, "Online normalizer calculation for softmax").
* ``persistent_schedule``: the Hopper GEMM's persistent schedule: a producer warpgroup (its
  warp 0) issues TMA loads into a ring of shared-memory stages, two consumer warpgroups multiply
  from it, and a tile's epilogue runs while the producer already loads the next tile's first
  stages.

The functions build :class:`matplotlib.figure.Figure` objects without pyplot (the notebook's
backend is left alone). Both are schematic (no measured value is drawn); the ring depth and tile sizes follow
``fusedlib/kernels/gemm_wgmma.cuh`` (four stages of 128×32 of X and 256×32 of W in tf32).
"""
from __future__ import annotations

import math

__all__ = ["FIGURES", "online_softmax", "persistent_schedule", "online_max_sum_trace"]


def online_max_sum_trace(values, chunk: int = 4) -> list[dict]:
    """The running (m, ℓ) of an online softmax over ``values`` read ``chunk`` at a time.

    Args:
        values: a sequence of floats (one row of V).
        chunk: how many values each step reads (a thread's loads).

    Returns:
        One dict per step: ``end`` (values read so far), ``m`` (running maximum), ``l``
        (running Σ exp(v − m)) and ``rescaled`` (True where m rose and the old ℓ was multiplied
        by exp(m_old − m_new)). At the end, ``l`` equals Σ_j exp(v_j − max v).

    Raises:
        ValueError: ``chunk`` < 1 or ``values`` is empty.
    """
    values = [float(v) for v in values]
    if chunk < 1 or not values:
        raise ValueError(f"chunk must be >= 1 and values non-empty, got chunk={chunk}, {len(values)} values")
    m, l, steps = -math.inf, 0.0, []
    for start in range(0, len(values), chunk):
        part = values[start:start + chunk]
        m_new = max(m, max(part))
        rescaled = m != -math.inf and m_new > m
        l = l * math.exp(m - m_new) + sum(math.exp(v - m_new) for v in part)
        m = m_new
        steps.append({"end": start + len(part), "m": m, "l": l, "rescaled": rescaled})
    return steps


def online_softmax():
    """One row of 24 values read four at a time: the values (bars), the running maximum m
    (step line) and the running sum ℓ (lower panel), with the rescalings marked."""
    from matplotlib.figure import Figure

    values = [0.3, 1.1, 0.2, 0.7, 2.4, 0.9, 1.5, 0.1, 1.0, 2.0, 0.4, 1.2,
              3.1, 0.6, 2.2, 0.8, 1.9, 0.5, 2.7, 1.3, 0.2, 1.7, 2.9, 0.9]
    chunk = 4
    steps = online_max_sum_trace(values, chunk)
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    xs = range(len(values))
    top.bar(xs, values, color="#9ecae1", edgecolor="#3182bd", label="row values $v_j$")
    ends = [s["end"] for s in steps]
    top.step([-0.5] + [e - 0.5 for e in ends], [s["m"] for s in steps] + [steps[-1]["m"]], where="post",
             color="#d62728", lw=2.5,
             label="running maximum $m$")
    for s in steps:
        top.axvline(s["end"] - 0.5, color="gray", lw=0.6, ls=":")
    top.set(ylabel="value", title="Online softmax: one sweep, four values a step")
    top.legend(loc="upper left", fontsize=11)
    bottom.plot(ends, [s["l"] for s in steps], "o-", color="#2ca02c", lw=2, label=r"running sum $\ell=\sum e^{v_j-m}$")
    for s in steps:
        if s["rescaled"]:
            bottom.annotate(r"$m$ rose: rescale $\ell$",
                            (s["end"], s["l"]), xytext=(0, 14), textcoords="offset points", ha="center",
                            fontsize=11, color="#d62728")
            bottom.plot(s["end"], s["l"], "o", color="#d62728", ms=9, mfc="none", mew=2)
    bottom.set(xlabel="values read so far", ylabel=r"$\ell$", ylim=(0, max(s["l"] for s in steps) * 1.45))
    bottom.legend(loc="lower right", fontsize=11)
    for ax in (top, bottom):
        ax.tick_params(labelsize=11)
        ax.spines[["top", "right"]].set_visible(False)
    return fig


def persistent_schedule():
    """Left: the CTA's parts (producer warpgroup, ring of four shared-memory stages with their full
    and empty mbarriers, two consumer warpgroups, the epilogue). Right: a timeline of two
    tiles, the producer running ahead by the ring's depth and the epilogue of tile 0
    overlapping the loads of tile 1."""
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch, Rectangle

    fig = Figure(figsize=(14, 5.6), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=(1.15, 1.4))
    # --- the parts of one CTA
    left.set(xlim=(0, 10), ylim=(0, 10), title="One CTA (one per SM, looping over tiles)")
    left.axis("off")

    def box(ax, x, y, w, h, text, color, fontsize=10):
        ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", lw=1))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)

    def arrow(ax, a, b, text="", color="black"):
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=14, color=color, lw=1.4))
        if text:
            ax.text((a[0] + b[0]) / 2 + 0.15, (a[1] + b[1]) / 2, text, fontsize=9, color=color, va="center")

    box(left, 0.2, 8.6, 9.6, 1.1, "global memory (X, W in L2 / DRAM)", "#eeeeee")
    box(left, 0.2, 6.3, 3.0, 1.2, "producer warpgroup\n(warp 0: TMA loads)", "#fdd0a2")
    for s in range(4):
        box(left, 3.9 + s * 1.45, 6.0, 1.3, 1.8, f"stage {s}\nX, W", "#c6dbef", fontsize=9)
    left.text(6.75, 8.0, "ring of stages in shared memory", ha="center", fontsize=9)
    left.text(6.75, 5.6, "each stage: a full and an empty mbarrier", ha="center", fontsize=9)
    box(left, 0.6, 2.6, 4.0, 1.7, "consumer\nwarpgroup 1\nwgmma, rows 0–63", "#c7e9c0")
    box(left, 5.4, 2.6, 4.0, 1.7, "consumer\nwarpgroup 2\nwgmma, rows 64–127", "#c7e9c0")
    box(left, 2.0, 0.4, 6.0, 1.3, "epilogue from the registers\n(statistics, store of Z')", "#dadaeb")
    arrow(left, (1.7, 8.6), (1.7, 7.5), "")
    arrow(left, (3.2, 6.9), (3.9, 6.9), "")
    left.text(1.9, 8.0, "TMA copy", fontsize=9)
    arrow(left, (5.2, 6.0), (3.4, 4.3), "full: data landed", color="#08519c")
    arrow(left, (7.8, 6.0), (7.4, 4.3), "", color="#08519c")
    arrow(left, (1.3, 4.3), (1.0, 6.3), "", color="#a63603")
    left.text(0.0, 5.1, "empty:\nstage free", fontsize=9, color="#a63603")
    arrow(left, (2.8, 2.6), (4.0, 1.7), "")
    arrow(left, (7.2, 2.6), (6.0, 1.7), "")
    # --- the timeline of two tiles
    k_steps, ahead = 6, 2
    lanes = {"producer (TMA)": 2.0, "consumer warpgroups (wgmma)": 1.0, "epilogue": 0.0}
    colors = ("#6baed6", "#fd8d3c")
    for tile in range(2):
        start = tile * (k_steps + 1)             # the consumers: one K step a unit of time, then the epilogue
        for k in range(k_steps):
            t_load = start + k - ahead             # the producer runs `ahead` K steps before the consumers
            right.add_patch(Rectangle((t_load, lanes["producer (TMA)"] - 0.35), 0.9, 0.7,
                                      facecolor=colors[tile], edgecolor="black", lw=0.6))
            right.text(t_load + 0.45, lanes["producer (TMA)"], f"k{k}", ha="center", va="center", fontsize=8)
            right.add_patch(Rectangle((start + k, lanes["consumer warpgroups (wgmma)"] - 0.35), 0.9, 0.7,
                                      facecolor=colors[tile], edgecolor="black", lw=0.6))
            right.text(start + k + 0.45, lanes["consumer warpgroups (wgmma)"], f"k{k}", ha="center",
                       va="center", fontsize=8)
        right.add_patch(Rectangle((start + k_steps, lanes["epilogue"] - 0.35), 0.9, 0.7,
                                  facecolor=colors[tile], edgecolor="black", lw=0.6, hatch="//"))
        right.text(start + k_steps + 0.45, lanes["epilogue"], f"tile {tile}", ha="center", va="center", fontsize=9)
    right.annotate("tile 1's first loads run\nduring tile 0's epilogue", xy=(k_steps + 0.5, 2.4), xytext=(k_steps + 2.5, 2.85),
                   fontsize=9, arrowprops={"arrowstyle": "->"})
    right.set(yticks=list(lanes.values()), yticklabels=list(lanes), ylim=(-0.7, 3.3), xlim=(-2.5, 2 * k_steps + 3),
              xlabel="time (one unit: one K step of 32)", title="Two tiles on one CTA: the producer runs ahead by the ring")
    right.tick_params(labelsize=10)
    right.spines[["top", "right"]].set_visible(False)
    right.legend(handles=[Rectangle((0, 0), 1, 1, color=c) for c in colors], labels=["tile 0", "tile 1"],
                 loc="lower right", fontsize=9)
    return fig


FIGURES = {"online_softmax": online_softmax, "persistent_schedule": persistent_schedule}
