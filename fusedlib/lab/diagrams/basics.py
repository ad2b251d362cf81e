"""Pictures for notebook 00: the roofline that prices every kernel of the course."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from fusedlib.lab import course


def roofline_sketch(problem: str = "84", gpu: str = course.RESULTS_GPU) -> Figure:
    """The roofline of the GPU (attainable TFLOP/s against arithmetic intensity, log–log),
    with the fp32 and tf32 roofs from :func:`fusedlib.lab.course.ceilings`, and the kernels of the
    naive stage of ``problem`` (train mode, KernelBench shape, cost model) placed on it at
    their intensity and their roofline rate: the GEMM right of the ridge points, every other
    kernel far left of them."""
    ceil = course.ceilings(gpu)
    bw = ceil["bandwidth"] / 1e3  # TB/s: TFLOP/s = FLOP/byte × TB/s
    passes, _ = course.prediction("naive", problem, precision="fp32", gpu=gpu)
    x = np.logspace(-1.3, 3.3, 200)
    fig = Figure(figsize=(9, 5))
    ax = fig.add_subplot()
    for precision, color in (("fp32", "#4477aa"), ("tf32", "#228833")):
        rate = ceil[precision]
        ax.loglog(x, np.minimum(rate, bw * x), color=color, lw=2.5, label=f"{precision} roof")
        ax.annotate(f"ridge point, {precision}", (rate / bw, rate), xytext=(8, -18), textcoords="offset points",
                    ha="left", fontsize=11, color=color)
    for row in passes.to_dict("records"):
        intensity, gemm = row["FLOP/byte"], "GEMM" in row["pass"]
        ax.plot(intensity, min(ceil["fp32"], bw * intensity), "o" if gemm else "s", ms=9,
                color="#ee7733" if gemm else "#aa3377")
    ax.plot([], [], "o", color="#ee7733", ms=9, label="the GEMM (naive stage, fp32)")
    ax.plot([], [], "s", color="#aa3377", ms=9, label="the kernels after it")
    ax.set_ylim(None, 2.5 * ceil["tf32"])
    ax.set_xlabel("arithmetic intensity, FLOP per byte of DRAM traffic", fontsize=12)
    ax.set_ylabel("attainable TFLOP/s", fontsize=12)
    name = (course.env(gpu) or {}).get("gpu", gpu.upper())
    ax.set_title(f"Roofline of the {name} and the naive stage's kernels, problem {problem}", fontsize=12)
    ax.tick_params(labelsize=11)
    ax.legend(fontsize=11, frameon=False, loc="lower right")
    ax.grid(True, which="major", alpha=0.3)
    return fig


FIGURES = {"roofline_sketch": roofline_sketch}
