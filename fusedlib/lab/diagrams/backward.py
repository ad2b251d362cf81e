"""Notebook 08: the fused train-mode backward's data flow, drawn to scale.

One horizontal bar per kernel, in launch order (top to bottom): the tensors it reads (solid) and
writes (hatched) side by side, each segment as long as the MB it moves at the problem's
KernelBench shape, a tensor in the same colour wherever it appears; the GEMM's GFLOP at the
right. The plan comes from :func:`fusedlib.lab.course.backward_plan` (``kernels/backward.cu``,
``ops.backward_gemms``), the sizes from :func:`fusedlib.lab.course.backward_prediction`'s units.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

#: One colour per tensor (matplotlib's tab10 and tab20 palettes), the same in every bar.
COLOURS = {"Y": "tab:blue", "dY": "tab:orange", "Z'": "tab:green", "r": "tab:gray", "a": "tab:gray",
           "partials": "tab:gray", "dγ, dβ, ds, a": "tab:gray", "dZ'": "tab:red", "dZ'ᵀ": "tab:pink",
           "X": "tab:purple", "X − x̄": "tab:olive", "dW": "tab:brown"}


#: What each kernel computes, written beside its bar.
NOTES = {"row_dot_kernel": "r_i = Σ_j dY_ij·Y_ij (one block a row)",
         "backward_partials_kernel": "tile partials of G and Z', merged in tile order:\nμ, σ², S1, S2 → dγ, dβ, ds, a1, a2, a0",
         "backward_dz_kernel": "dZ' = a1∘G + a2∘(Z' − μ) + a0,\nrow-major and transposed",
         "x_chunk_sums,": "column mean x̄ of X, then X − x̄"}


def backward_dataflow(problem: str = "84", precision: str = "fp32") -> Figure:
    """The fused backward of ``problem`` (84, 33, 39) at ``precision``: MB read and written by
    each kernel, to scale (see the module's docstring). Returns a matplotlib Figure."""
    from ..course import _unit_bytes, backward_plan
    from ...reference import PRESETS

    shape = PRESETS[problem]
    plan = backward_plan(problem, precision)
    fig = Figure(figsize=(11, 0.9 + 0.75 * len(plan)))
    ax = fig.subplots()
    width = {}
    for row, p in enumerate(plan):
        x0 = 0.0
        for kind, tensors in (("read", p["reads"]), ("written", p["writes"])):
            for name, (count, unit) in tensors.items():
                mb = count * _unit_bytes(unit, shape) / 1e6
                ax.barh(row, mb, left=x0, color=COLOURS.get(name, "tab:gray"), edgecolor="black", linewidth=0.6,
                        hatch="//" if kind == "written" else None, alpha=0.85 if kind == "read" else 0.55)
                if mb > 25:
                    label = name if count == 1 else f"{name}\n({'twice' if kind == 'read' and name == 'X' else 'parts'})"
                    ax.text(x0 + mb / 2, row, label, ha="center", va="center", fontsize=10 if count == 1 else 8.5)
                x0 += mb
        width[row] = x0
        note = NOTES.get(p["kernel"].split(" ")[0], "")
        if p["gemm"]:
            gflop = 2 * shape.batch * shape.in_features * shape.out_features / 1e9
            note = f"+ {gflop:.0f} GFLOP " + {"fp32": "on the FMA units", "tf32": "on the tensor cores",
                                               "3xtf32": "× 3 TF32 products on the tensor cores"}[precision]
        ax.text(x0 + 6, row, note, va="center", fontsize=9, color="0.25")
    ax.set_yticks(range(len(plan)), [p["kernel"] for p in plan], fontsize=10)
    ax.invert_yaxis()
    ax.set_xlim(0, max(width.values()) * 1.6)
    ax.set_xlabel("MB moved to or from DRAM (solid: read, hatched: written)", fontsize=10)
    saved = "Z' and Y" if problem == "84" else "Z'"
    ax.set_title(f"The fused backward of problem {problem}, {precision}, {shape.batch}×{shape.in_features}→"
                 f"{shape.out_features}\nthe forward saved {saved}; x is the input data, so no dX = dZ'·W",
                 fontsize=11)
    ax.legend(handles=[Patch(facecolor="white", edgecolor="black", label="read"),
                       Patch(facecolor="white", edgecolor="black", hatch="//", label="written")],
              loc="upper right", fontsize=9)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig


FIGURES = {"backward_dataflow_84_fp32": lambda: backward_dataflow("84", "fp32"),
           "backward_dataflow_84_3xtf32": lambda: backward_dataflow("84", "3xtf32")}
