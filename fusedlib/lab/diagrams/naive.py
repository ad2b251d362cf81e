"""The naive stage (notebook 02) in a picture: its kernels (in the cost model's order of
passes), the tensors each reads and writes, and the DRAM traffic of each drawn to scale (from
the cost model, :func:`fusedlib.lab.costmodel.cost`, train mode at the problem's KernelBench
shape).
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from fusedlib.lab.costmodel import cost
from fusedlib.reference import PRESETS, problem_kind

#: What each kernel of the naive stage reads and writes, by the cost model's pass name and
#: problem family ("84": softmax(s·BN(Z)); "33": BN(Z∘s)).
TENSORS = {
    "84": {"GEMM + bias": ("X, W, b", "Z"), "column mean": ("Z", "μ"), "column variance": ("Z, μ", "σ²"),
           "normalize + affine": ("Z, μ, σ², γ, β", "Z"), "scale": ("Z, s", "Z"), "row max": ("Z", "row max"),
           "row sum of exp": ("Z, row max", "row sum"), "softmax normalize": ("Z, row max, row sum", "Y"),
           "running buffers": ("μ, σ², buffers", "buffers")},
    "33": {"GEMM + bias": ("X, W, b", "Z"), "scale": ("Z, s", "Z∘s"), "column mean": ("Z∘s", "μ"),
           "column variance": ("Z∘s, μ", "σ²"), "normalize + affine": ("Z∘s, μ, σ², γ, β", "Y"),
           "running buffers": ("μ, σ², buffers", "buffers")},
}
READ, WRITE = "#4477aa", "#ee7733"


def naive_stage(problem: str = "84") -> Figure:
    """One row per kernel of the naive stage's train-mode forward, top to bottom in the cost
    model's order of passes (the running buffers' update, launched right after the statistics,
    drawn last): the kernel, what it reads → what it writes, and two bars, MB read (blue) and MB
    written (orange), to one scale. ``problem``: "84", "33" or "39" at its KernelBench shape.

    Raises:
        KeyError: ``problem`` has no KernelBench shape in :data:`fusedlib.reference.PRESETS`.
    """
    shape = PRESETS[problem]
    kind = problem_kind(problem)
    c = cost(kind, "naive", shape.batch, shape.in_features, shape.out_features, "train")
    names = TENSORS[kind]
    fig = Figure(figsize=(11, 0.55 * len(c.passes) + 1.4))
    ax = fig.add_subplot()
    top = max(p.read_bytes + p.write_bytes for p in c.passes) / 1e6
    for row, p in enumerate(c.passes):
        y = -row
        read, write = p.read_bytes / 1e6, p.write_bytes / 1e6
        ax.barh(y, read, color=READ, height=0.6)
        ax.barh(y, write, left=read, color=WRITE, height=0.6)
        reads, writes = names.get(p.name, ("?", "?"))
        ax.text(-0.02 * top, y, f"{row + 1}. {p.name}:  {reads} → {writes}", ha="right", va="center", fontsize=11)
        ax.text(read + write + 0.01 * top, y, f"{read + write:.0f} MB", va="center", fontsize=10)
    after = sum(p.bytes for p in c.passes[1:]) / 1e6
    z_mb = 4 * shape.batch * shape.out_features / 1e6
    ax.set_title(f"Naive stage, problem {problem} at {shape}, train mode: {len(c.passes)} kernels, "
                 f"{c.bytes / 1e6:.0f} MB of DRAM traffic\nafter the GEMM {after:.0f} MB "
                 f"= {after / z_mb:.1f} × Z ({z_mb:.1f} MB)", fontsize=12, loc="left")
    ax.legend(handles=[Patch(color=READ, label="MB read from DRAM"), Patch(color=WRITE, label="MB written to DRAM")],
              loc="lower right", fontsize=10, frameon=False)
    ax.set_xlim(0, top * 1.12)
    ax.set_ylim(-len(c.passes) + 0.4, 0.6)
    ax.set_yticks([])
    ax.set_xlabel("DRAM traffic of the kernel, MB (cost model: each tensor read or written once)", fontsize=11)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    fig.subplots_adjust(left=0.42, right=0.98, top=0.88, bottom=0.18)
    return fig


FIGURES = {"naive_stage_84": lambda: naive_stage("84"), "naive_stage_39": lambda: naive_stage("39")}
