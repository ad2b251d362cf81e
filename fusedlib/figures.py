"""``python -m fusedlib figures``: the roofline, throughput and breakdown figures, drawn
from the committed CSVs only (``results/<gpu>/bench.csv``, ``env.json``, ``profile.csv``),
and the cancellation figure from the CPU algebra, so they can be regenerated on any
machine. Each figure is written as PNG, SVG and PDF.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .bench import PEER_IMPLS as PEERS
from .bench import STAGE_IMPLS as STAGE_ORDER

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("png", "svg", "pdf")


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, outdir: Path, name: str) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / f"{name}.{fmt}" for fmt in FORMATS]
    for path in paths:
        fig.savefig(path, bbox_inches="tight", dpi=150)
    return paths


def _kb_rows(df, problem: str):
    from .reference import PRESETS
    s = PRESETS[problem]
    return df[(df.problem.astype(str) == problem) & (df.batch == s.batch) & (df.in_features == s.in_features)
              & (df.out_features == s.out_features)]


def roofline(bench, env: dict, outdir: Path) -> list[Path]:
    """Log-log roofline: arithmetic intensity (FLOP/byte, cost model) vs achieved TFLOP/s,
    memory roof from measured copy and datasheet bandwidth, compute roofs for fp32 and tf32
    (measured cuBLAS and datasheet); one point per stage and peer at each problem's
    KernelBench shape (train mode), arrows naive → fold → sums → fused."""
    import numpy as np
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(16, 5), sharey=True)
    ai = np.logspace(0, 4, 200)
    for ax, problem in zip(axes, ("84", "33", "39")):
        rows = _kb_rows(bench[bench["mode"] == "train"], problem)
        for label, bw, style in (("copy (measured)", env["measured"]["copy_gbytes_per_s"], "-"),
                                 ("HBM datasheet", env["datasheet"]["bandwidth_gbytes_per_s"], ":")):
            ax.plot(ai, ai * bw / 1e3, style, color="gray", lw=1, label=f"{label} {bw / 1e3:.2f} TB/s")
        for prec, color in (("fp32", "tab:blue"), ("tf32", "tab:orange")):
            for peak, style, what in ((env["measured"][f"gemm_{prec}_tflops"], "-", "cuBLAS"),
                                      (env["datasheet"][f"{prec}_tflops"], ":", "datasheet")):
                ax.axhline(peak, ls=style, color=color, lw=1, label=f"{prec} {what} {peak:.0f} TFLOP/s")
        for prec, marker in (("fp32", "o"), ("tf32", "s"), ("3xtf32", "^")):
            sub = rows[rows.precision == prec].drop_duplicates("impl", keep="last")  # latest measurement
            if sub.empty:
                continue
            intensity = sub.tflops * 1e3 / sub.gbytes_per_s
            ax.scatter(intensity, sub.tflops, marker=marker, label=f"{prec} runs", zorder=3)
            for (_, r), x in zip(sub.iterrows(), intensity):
                ax.annotate(r.impl, (x, r.tflops), fontsize=7, xytext=(3, 3), textcoords="offset points")
            stages = sub.set_index("impl").reindex([s for s in STAGE_ORDER if s in set(sub.impl)])
            pts = list(zip(stages.tflops * 1e3 / stages.gbytes_per_s, stages.tflops))
            for a, b in zip(pts, pts[1:]):
                ax.annotate("", xy=b, xytext=a, arrowprops=dict(arrowstyle="->", color="black", lw=0.8))
        ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)", title=f"problem {problem}")
    axes[0].set_ylabel("TFLOP/s")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=5, bbox_to_anchor=(0.5, -0.08))
    fig.suptitle(f"Roofline, {env['gpu']}, train mode, KernelBench shapes")
    paths = _save(fig, outdir, "roofline")
    plt.close(fig)
    return paths


def throughput(bench, outdir: Path) -> list[Path]:
    """Time and TFLOP/s against batch (at 4096→4096) and against features (K = M, batch
    1024) for problems 84 and 33, every stage and peer (train mode, fp32 and tf32)."""
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    train = bench[bench["mode"] == "train"]
    sweeps = (("batch", train[(train.in_features == 4096) & (train.out_features == 4096)]),
              ("in_features", train[(train.batch == 1024) & (train.in_features == train.out_features)]))
    for col, (xname, sweep) in enumerate(sweeps):
        for problem in ("84", "33"):
            sub = sweep[sweep.problem.astype(str).isin([problem] if problem == "84" else ["33", "39"])]
            for (impl, prec), g in sub.groupby(["impl", "precision"]):
                g = g.drop_duplicates(xname, keep="last").sort_values(xname)
                if g[xname].nunique() < 2:
                    continue
                ls = "-" if problem == "84" else "--"
                axes[0][col].plot(g[xname], g.median_ms, ls, marker=".", label=f"{problem} {impl} {prec}")
                axes[1][col].plot(g[xname], g.tflops, ls, marker=".")
        for row, ylabel in enumerate(("median time (ms)", "TFLOP/s")):
            axes[row][col].set(xscale="log", yscale="log", xlabel=xname, ylabel=ylabel)
    axes[0][1].legend(fontsize=6, ncol=2)
    fig.suptitle("Throughput against batch size and features (train mode)")
    paths = _save(fig, outdir, "throughput")
    plt.close(fig)
    return paths


def breakdown(profile, bench, env: dict, outdir: Path) -> list[Path]:
    """Stacked per-kernel time of each stage (84 and 39 at their KernelBench shapes, train,
    fp32; fused also tf32/3xtf32) from profile.csv; without it, the cost model's passes at
    the measured bandwidth and GEMM rate, labelled "predicted"."""
    import pandas as pd
    plt = _plt()
    from .costmodel import cost
    from .reference import PRESETS
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    for ax, problem in zip(axes, ("84", "39")):
        shape = PRESETS[problem]
        bars = []
        for impl, prec in [(s, "fp32") for s in STAGE_ORDER] + [("fused", "tf32"), ("fused", "3xtf32")]:
            if profile is not None:
                sel = profile[(profile.problem.astype(str) == problem) & (profile["shape"] == str(shape))
                              & (profile["mode"] == "train") & (profile.precision == prec) & (profile.impl == impl)]
                sel = sel.drop_duplicates("kernel", keep="last")
                parts = {k: v / 1e3 for k, v in zip(sel.kernel, sel.cuda_time_us_per_call)}
            else:
                kind = "84" if problem == "84" else "33"
                rate = env["measured"][f"gemm_{'fp32' if prec == 'fp32' else 'tf32'}_tflops"] / (3 if prec == "3xtf32" else 1)
                c = cost(kind, impl, shape.batch, shape.in_features, shape.out_features, "train", prec)
                bw = env["measured"]["copy_gbytes_per_s"]
                parts = {p.name: max(p.flops / (rate * 1e12), p.bytes / (bw * 1e9)) * 1e3 for p in c.passes}
            bars.append((f"{impl}\n{prec}", parts))
        table = pd.DataFrame({label: parts for label, parts in bars}).fillna(0.0).T
        table.plot.bar(stacked=True, ax=ax, legend=False, rot=0)
        ax.set(ylabel="ms per call", title=f"problem {problem} {shape}" + ("" if profile is not None else " (predicted)"))
        ax.legend(fontsize=6, loc="upper right")
    fig.suptitle("Per-kernel time of each stage (train mode)")
    paths = _save(fig, outdir, "breakdown")
    plt.close(fig)
    return paths


def cancellation_figure(lab):
    """Figure of a course.cancellation_lab table: variance error against |mean|/std, log-log."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, grp in lab.groupby("method"):
        ax.loglog(grp["|mean|/std"], grp["max relative error"], marker="o", label=name)
    ax.axhline(2 ** -24, ls=":", color="gray", label="float32 unit roundoff")
    ax.set(xlabel="|mean| / std of the column", ylabel="relative error of the variance (float32)",
           title="One-pass batch variance: cancellation")
    ax.legend()
    return fig


def cancellation(outdir: Path) -> list[Path]:
    """Variance error of the textbook one pass against Chan-merged partials as |mean|/std
    grows (float32, CPU algebra: no GPU results needed); see course.cancellation_lab."""
    from .course import cancellation_lab
    fig = cancellation_figure(cancellation_lab())
    paths = _save(fig, outdir, "cancellation")
    _plt().close(fig)
    return paths


def make_all(results: Path, outdir: Path) -> list[Path]:
    """All figures: the cancellation figure always; roofline, throughput and breakdown from
    ``results`` (bench.csv and env.json required, profile.csv optional).

    Raises:
        FileNotFoundError: bench.csv or env.json is missing (the cancellation figure is
        written first).
    """
    import pandas as pd
    cancel = cancellation(outdir)
    for name in ("bench.csv", "env.json"):
        if not (results / name).exists():
            raise FileNotFoundError(f"{results / name} not found: run `python -m fusedlib bench --ceilings` on a GPU first")
    bench = pd.read_csv(results / "bench.csv")
    env = json.loads((results / "env.json").read_text())
    profile = pd.read_csv(results / "profile.csv") if (results / "profile.csv").exists() else None
    return cancel + roofline(bench, env, outdir) + throughput(bench, outdir) + breakdown(profile, bench, env, outdir)


def add_arguments(parser) -> None:
    parser.add_argument("--gpu", default="h100", help="results/<gpu> to read")
    parser.add_argument("--out", type=Path, default=ROOT / "figures", help="output folder")


def main(args) -> int:
    try:
        paths = make_all(ROOT / "results" / args.gpu, args.out)
    except FileNotFoundError as exc:
        print(f"wrote {args.out / 'cancellation'}.{{png,svg,pdf}}", file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(str(p) for p in paths))
    return 0
