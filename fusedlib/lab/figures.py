"""``python -m fusedlib figures``: the roofline, throughput, breakdown and ladder figures
and the README results table, drawn from the committed results only
(``results/<gpu>/bench.csv``, ``env.json`` and, if present, ``profile.csv``), so they can be
regenerated on any machine without a GPU; plus the cancellation figure, computed on the
CPU. Each figure is written as PNG, SVG and PDF into ``figures/``. matplotlib (Agg backend)
and pandas are imported only when a figure is drawn. Rows a figure needs but bench.csv
lacks (a stage or precision not measured yet) are left out of it, never an error.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .bench import COLUMNS, PEER_IMPLS, PROFILE_COLUMNS, STAGE_IMPLS
from .costmodel import PRECISIONS

ROOT = Path(__file__).resolve().parent.parent.parent
FORMATS = ("png", "svg", "pdf")
#: Kept for callers that name them so.
STAGE_ORDER, PEERS = STAGE_IMPLS, PEER_IMPLS
PRECISION_MARKERS = {"fp32": "o", "tf32": "s", "3xtf32": "^"}
PRECISION_LINES = {"fp32": "-", "tf32": "--", "3xtf32": ":"}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "fusedlib"  # stable SVG ids: regenerated files diff cleanly
    import matplotlib.pyplot as plt
    return plt


def _impl_color(impl: str):
    from matplotlib import colormaps
    order = list(STAGE_IMPLS) + list(PEER_IMPLS)
    return colormaps["tab10"](order.index(impl) % 10) if impl in order else "gray"


def _save(fig, outdir: Path, name: str) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / f"{name}.{fmt}" for fmt in FORMATS]
    no_dates = {"svg": {"Date": None}, "pdf": {"CreationDate": None}, "png": None}  # reproducible files
    for path in paths:
        fig.savefig(path, bbox_inches="tight", dpi=150, metadata=no_dates[path.suffix[1:]])
    _plt().close(fig)
    return paths


def _preset_rows(df, problem: str):
    """Rows of ``problem`` at its KernelBench shape."""
    from ..reference import presets_of
    return df[[p == problem for p in presets_of(df)]]


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=8, color="gray")


def _ceilings(env: dict) -> dict:
    """The measured ceilings of env.json in :func:`fusedlib.lab.course.gemm_rate`'s form:
    bandwidth (GB/s), fp32 and tf32 (TFLOP/s).

    Raises:
        KeyError: env.json lacks ``measured`` or one of its values.
    """
    m = env["measured"]
    return {"bandwidth": m["copy_gbytes_per_s"], "fp32": m["gemm_fp32_tflops"], "tf32": m["gemm_tf32_tflops"]}


def predicted_ms(problem: str, impl: str, precision: str, env: dict, mode: str = "train", shape=None) -> float:
    """The cost model's time of one call in ms (:meth:`fusedlib.lab.costmodel.Cost.time_ms`):
    each pass at its own roof, the GEMM's rate of ``precision`` (measured cuBLAS fp32 or
    tf32 rate, 3xtf32 a third of tf32's: :func:`fusedlib.lab.course.gemm_rate`) or the measured
    copy bandwidth, the passes added up. ``shape``: a :class:`~fusedlib.reference.Shape`
    or preset name, default the problem's KernelBench shape.

    Raises:
        KeyError: env.json lacks its ``measured`` ceilings.
    """
    from .costmodel import cost
    from .course import gemm_rate
    from ..reference import parse_shape, problem_kind
    s = parse_shape(shape if shape is not None else problem)
    ceil = _ceilings(env)
    c = cost(problem_kind(problem), impl, s.batch, s.in_features, s.out_features, mode, precision)
    return c.time_ms(gemm_rate(precision, ceil), ceil["bandwidth"])


def roofline(bench, env: dict, outdir: Path) -> list[Path]:
    """``roofline.{png,svg,pdf}``: log-log arithmetic intensity (cost model, FLOP/byte)
    against achieved TFLOP/s (cost-model FLOPs / median time), one panel per problem at
    its KernelBench shape in train mode: one point per stage and peer and precision (the
    latest row; colour: implementation, marker: precision), arrows naive → fold → sums →
    fused (fp32). Roofs: memory from the measured copy bandwidth (solid) and the datasheet
    (dotted); compute for fp32 and tf32 from the measured cuBLAS GEMM (solid) and the
    datasheet (dotted).

    Raises:
        KeyError: env.json lacks ``measured`` or ``datasheet`` values.
    """
    import numpy as np

    from .costmodel import cost
    from ..reference import PRESETS, problem_kind
    plt = _plt()
    measured, sheet = env["measured"], env["datasheet"]
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.5), sharey=True, layout="constrained")
    ai = np.logspace(0, 4, 200)
    top = max(sheet["tf32_tflops"], measured["gemm_tf32_tflops"]) * 1.6
    train = bench[bench["mode"] == "train"]
    lowest = train.tflops[train.tflops > 0].min() if (train.tflops > 0).any() else 1.0
    impl_handles = {}
    for ax, problem in zip(axes, ("84", "33", "39")):
        for label, bw, style in (("copy, measured", measured["copy_gbytes_per_s"], "-"),
                                 (f"{sheet.get('device', 'HBM')} datasheet", sheet["bandwidth_gbytes_per_s"], ":")):
            ax.plot(ai, np.minimum(ai * bw / 1e3, top), style, color="gray", lw=1,
                    label=f"memory roof, {label}: {bw / 1e3:.2f} TB/s")
        for prec, color in (("fp32", "tab:blue"), ("tf32", "tab:orange")):
            for peak, style, what in ((measured[f"gemm_{prec}_tflops"], "-", "cuBLAS, measured"),
                                      (sheet[f"{prec}_tflops"], ":", "datasheet")):
                ax.axhline(peak, ls=style, color=color, lw=1, label=f"{prec} roof, {what}: {peak:.0f} TFLOP/s")
        rows = _preset_rows(train, problem).drop_duplicates(["impl", "precision"], keep="last")
        s = PRESETS[problem]
        if rows.empty:
            _no_data(ax, "no train-mode rows at this shape")
        points = {}
        for row in rows.itertuples(index=False):
            x = cost(problem_kind(problem), row.impl, s.batch, s.in_features, s.out_features, "train",
                     row.precision).intensity
            points[row.impl, row.precision] = (x, row.tflops)
            dot = ax.scatter([x], [row.tflops], marker=PRECISION_MARKERS.get(row.precision, "o"),
                             color=_impl_color(row.impl), s=40, zorder=3, edgecolor="black", linewidth=0.4)
            impl_handles.setdefault(row.impl, dot)
        chain = [points[stage, "fp32"] for stage in STAGE_IMPLS if (stage, "fp32") in points]
        for a, b in zip(chain, chain[1:]):
            ax.annotate("", xy=b, xytext=a, arrowprops=dict(arrowstyle="->", color="black", lw=0.8))
        ax.set(xscale="log", yscale="log", xlim=(3, 3000), ylim=(min(1.0, lowest / 2), top),
               xlabel="arithmetic intensity (FLOP/byte, cost model)", title=f"problem {problem} @{s}")
        ax.grid(True, which="major", lw=0.3)
    axes[0].set_ylabel("achieved TFLOP/s")
    handles, labels = axes[0].get_legend_handles_labels()
    for impl in [i for i in list(STAGE_IMPLS) + list(PEER_IMPLS) if i in impl_handles]:
        handles.append(plt.Line2D([], [], marker="o", ls="", color=_impl_color(impl), markeredgecolor="black"))
        labels.append(impl)
    for prec, marker in PRECISION_MARKERS.items():
        handles.append(plt.Line2D([], [], marker=marker, ls="", color="white", markeredgecolor="black"))
        labels.append(prec)
    fig.legend(handles, labels, fontsize=7, loc="outside lower center", ncol=6)
    fig.suptitle(f"Roofline on {env.get('gpu', 'the GPU')}, train mode, KernelBench shapes "
                 "(arrows: naive → fold → sums → fused at fp32)")
    return _save(fig, outdir, "roofline")


def throughput(bench, outdir: Path) -> list[Path]:
    """``throughput.{png,svg,pdf}``: median time and TFLOP/s against the batch size (N at
    4096→4096) and against the features (K = M at batch 1024), for problem 84 and problems
    33/39 (one model), every stage and peer and precision, train mode. Rows of other
    shapes are ignored; a panel without sweep rows says so."""
    from .bench import BATCH_SWEEP_FEATURES, FEATURE_SWEEP_BATCH
    plt = _plt()
    train = bench[bench["mode"] == "train"].copy()
    train["family"] = train.problem.astype(str).map({"84": "84", "33": "33/39", "39": "33/39"})
    sweeps = (("batch", f"batch N (at {BATCH_SWEEP_FEATURES}→{BATCH_SWEEP_FEATURES})",
               train[(train.in_features == BATCH_SWEEP_FEATURES) & (train.out_features == BATCH_SWEEP_FEATURES)]),
              ("in_features", f"features K = M (at batch {FEATURE_SWEEP_BATCH})",
               train[(train.batch == FEATURE_SWEEP_BATCH) & (train.in_features == train.out_features)]))
    from matplotlib.ticker import FixedLocator, NullLocator
    fig, axes = plt.subplots(4, 2, figsize=(13, 16), sharex="col", layout="constrained")
    handles = {}
    for col, (xname, xlabel, sweep) in enumerate(sweeps):
        for f, family in enumerate(("84", "33/39")):
            sub = sweep[sweep.family == family]
            ax_t, ax_r = axes[2 * f][col], axes[2 * f + 1][col]
            drawn = False
            for (impl, prec), g in sub.groupby(["impl", "precision"], sort=False):
                g = g.drop_duplicates(xname, keep="last").sort_values(xname)
                if g[xname].nunique() < 2:
                    continue
                style = dict(ls=PRECISION_LINES.get(prec, "-"), marker=".", color=_impl_color(impl))
                (line,) = ax_t.plot(g[xname], g.median_ms, **style)
                ax_r.plot(g[xname], g.tflops, **style)
                handles.setdefault(f"{impl} {prec}", line)
                drawn = True
            for ax, ylabel in ((ax_t, "median time (ms)"), (ax_r, "TFLOP/s")):
                ax.set(xscale="log", yscale="log", ylabel=f"{family}: {ylabel}")
                ax.grid(True, which="major", lw=0.3)
                if not drawn:
                    _no_data(ax, f"no {xname} sweep in bench.csv")
            ax_t.set_title(f"problem {family}, against {'batch' if xname == 'batch' else 'features'}")
        ticks = sorted(sweep[xname].unique())
        if ticks:
            axes[-1][col].xaxis.set_major_locator(FixedLocator(ticks))
            axes[-1][col].xaxis.set_minor_locator(NullLocator())
            axes[-1][col].set_xticks(ticks, [str(t) for t in ticks])
        axes[-1][col].set_xlabel(xlabel)
    if handles:
        fig.legend(list(handles.values()), list(handles), fontsize=7, loc="outside lower center", ncol=6)
    fig.suptitle("Throughput against batch size and features (train mode; line style: precision)")
    return _save(fig, outdir, "throughput")


def _short_kernel(name: str) -> str:
    """Legend label of a kernel: its bare function name, cut to 40 characters."""
    from .bench import kernel_base
    base = kernel_base(name)
    return base if len(base) <= 40 else base[:37] + "..."


def breakdown(profile, bench, env: dict, outdir: Path) -> list[Path]:
    """``breakdown.{png,svg,pdf}``: stacked per-kernel time of each stage at each precision
    (grouped by precision: fp32, tf32, 3xtf32; a stage and precision that neither
    bench.csv nor profile.csv holds in train mode is left out) at the KernelBench shapes of
    84, 33 and 39, train mode, from profile.csv (µs per call, latest profile of each
    kernel), with the bench.csv median marked on each bar. Without profile.csv: the cost
    model's passes, each at its roof (measured GEMM rate of the precision, 3xtf32 at a
    third of tf32's; measured copy bandwidth), titled "predicted".

    Raises:
        KeyError: the fallback needs env.json's ``measured`` values.
    """
    from .costmodel import cost
    from .course import gemm_rate
    from ..reference import PRESETS, problem_kind
    plt = _plt()
    present = {(r.impl, r.precision) for r in bench[bench["mode"] == "train"].itertuples(index=False)}
    if profile is not None:
        present |= {(r.impl, r.precision) for r in profile[profile["mode"] == "train"].itertuples(index=False)}
    bars = [(s, prec) for prec in PRECISIONS for s in STAGE_IMPLS if (s, prec) in present]
    bars = bars or [(s, "fp32") for s in STAGE_IMPLS]
    fig, axes = plt.subplots(1, 3, figsize=(max(18.0, 1.8 * len(bars)), 5.5), layout="constrained")
    colors: dict[str, tuple] = {}
    cmap = plt.get_cmap("tab20")
    for ax, problem in zip(axes, ("84", "33", "39")):
        shape = PRESETS[problem]
        for i, (impl, prec) in enumerate(bars):
            if profile is not None:
                sel = profile[(profile.problem.astype(str) == problem) & (profile["shape"] == str(shape))
                              & (profile["mode"] == "train") & (profile.precision == prec) & (profile.impl == impl)]
                sel = sel.drop_duplicates("kernel", keep="last")
                parts = [(_short_kernel(k), us / 1e3) for k, us in zip(sel.kernel, sel.cuda_time_us_per_call)]
            else:
                ceil = _ceilings(env)
                rate = gemm_rate(prec, ceil)
                c = cost(problem_kind(problem), impl, shape.batch, shape.in_features, shape.out_features, "train", prec)
                parts = [(p.name, max(p.flops / (rate * 1e12), p.bytes / (ceil["bandwidth"] * 1e9)) * 1e3)
                         for p in c.passes]
            bottom = 0.0
            for label, ms in parts:
                color = colors.setdefault(label, cmap(len(colors) % 20))
                ax.bar(i, ms, bottom=bottom, color=color, edgecolor="white", linewidth=0.3,
                       label=label if label not in ax.get_legend_handles_labels()[1] else None)
                bottom += ms
            if bottom > 0:
                ax.annotate(f"{bottom:.2f}", (i, bottom), ha="center", va="bottom", fontsize=7,
                            xytext=(0, 2), textcoords="offset points")
            timed = _preset_rows(bench, problem)
            timed = timed[(timed["mode"] == "train") & (timed.impl == impl) & (timed.precision == prec)]
            if len(timed):
                ax.plot([i - 0.4, i + 0.4], [timed.median_ms.iloc[-1]] * 2, color="black", lw=1.2)
        ax.set_xticks(range(len(bars)), [f"{impl}\n{prec}" for impl, prec in bars], fontsize=8)
        ax.set(ylabel="ms per call", title=f"problem {problem} @{shape}" + ("" if profile is not None else " (predicted)"))
        if not ax.get_legend_handles_labels()[0]:
            _no_data(ax, "no profile rows at this shape")
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), list(handles), fontsize=7, loc="outside right upper")
    source = ("torch.profiler kernel times (profile.csv); black tick: bench.csv median" if profile is not None
              else "predicted: cost-model passes at the measured ceilings (no profile.csv); black tick: bench.csv median")
    fig.suptitle(f"Where the time goes, train mode: {source}")
    return _save(fig, outdir, "breakdown")


#: Reference lines of the ladder: peer, line style, and the precision it is drawn at in each
#: precision group (PyTorch has no 3xTF32: eager fp32, the same accuracy class, stands in;
#: no GEMM-alone line there).
LADDER_REFERENCES = (("eager", "--", {"fp32": "fp32", "tf32": "tf32", "3xtf32": "fp32"}),
                     ("gemm_only", ":", {"fp32": "fp32", "tf32": "tf32"}))


def ladder(bench, env: dict, outdir: Path) -> list[Path]:
    """``ladder.{png,svg,pdf}``: every stage at every precision, measured against predicted.

    One panel per problem (84, 33, 39) at its KernelBench shape, train mode, log time axis.
    x: one group per precision (fp32, tf32, 3xtf32); in a group one solid bar per stage
    (naive, fold, sums, fused: the latest bench.csv median, ms) and beside it a hollow
    hatched bar, the cost model's prediction (:func:`predicted_ms`: each pass at its roof,
    measured ceilings of env.json). Horizontal lines across each group: eager (dashed) and
    the GEMM alone (``gemm_only``, dotted) at the group's precision; the 3xtf32 group gets
    eager fp32 (dash-dot) instead, PyTorch having no 3xTF32, and no GEMM-alone line. A stage
    or peer without a row is left out (its prediction is still drawn); a panel without any
    row says so.

    Raises:
        KeyError: env.json lacks its ``measured`` ceilings.
    """
    from matplotlib.patches import Patch

    from ..reference import PRESETS
    plt = _plt()
    _ceilings(env)  # fail early, before drawing, on an env.json without ceilings
    fig, axes = plt.subplots(1, 3, figsize=(18, 6), sharey=True, layout="constrained")
    train = bench[bench["mode"] == "train"]
    width = 0.84 / len(STAGE_IMPLS)   # one measured and one predicted bar per stage
    handles: dict[str, object] = {stage: Patch(facecolor=_impl_color(stage), edgecolor="black", linewidth=0.4)
                                  for stage in STAGE_IMPLS}
    handles["solid: measured (latest bench.csv median)"] = Patch(facecolor="0.6", edgecolor="black", linewidth=0.4)
    handles["hollow, hatched: cost-model prediction (each pass at its roof)"] = Patch(
        facecolor="none", edgecolor="black", hatch="////")
    values = []
    for ax, problem in zip(axes, ("84", "33", "39")):
        rows = _preset_rows(train, problem).drop_duplicates(["impl", "precision"], keep="last")
        ms = {(r.impl, r.precision): float(r.median_ms) for r in rows.itertuples(index=False)}
        for g, prec in enumerate(PRECISIONS):
            for i, stage in enumerate(STAGE_IMPLS):
                left = g - 0.42 + i * width
                color = _impl_color(stage)
                pred = predicted_ms(problem, stage, prec, env)
                values.append(pred)
                ax.bar(left + 0.75 * width, pred, 0.5 * width, facecolor="none", edgecolor=color, hatch="////",
                       linewidth=0.8)
                if (stage, prec) in ms:
                    t = ms[stage, prec]
                    values.append(t)
                    ax.bar(left + 0.25 * width, t, 0.5 * width, color=color, edgecolor="black", linewidth=0.4)
                    ax.annotate(f"{t:.3g}", (left + 0.25 * width, t), ha="center", va="bottom", fontsize=6,
                                rotation=90, xytext=(0, 2), textcoords="offset points")
            for peer, style, at in LADDER_REFERENCES:
                ref_prec = at.get(prec)
                if ref_prec is None or (peer, ref_prec) not in ms:
                    continue
                t = ms[peer, ref_prec]
                values.append(t)
                stand_in = ref_prec != prec
                line = ax.hlines(t, g - 0.46, g + 0.46, colors=_impl_color(peer),
                                 linestyles="-." if stand_in else style, linewidth=1.2, zorder=4)
                label = (f"{peer} fp32: reference of the 3xtf32 group (PyTorch has no 3xTF32)" if stand_in
                         else f"{peer} at the group's precision")
                handles.setdefault(label, line)
        if not ms:
            _no_data(ax, "no train-mode rows at this shape")
        ax.set_xticks(range(len(PRECISIONS)), list(PRECISIONS))
        ax.set(yscale="log", xlim=(-0.5, len(PRECISIONS) - 0.5), title=f"problem {problem} @{PRESETS[problem]}")
        ax.grid(True, axis="y", which="major", lw=0.3)
    positive = [v for v in values if v > 0]
    if positive:
        axes[0].set_ylim(min(positive) / 2, max(positive) * 3)
    axes[0].set_ylabel("ms per call (log)")
    fig.legend(list(handles.values()), list(handles), fontsize=7, loc="outside lower center", ncol=4)
    fig.suptitle(f"The ladder on {env.get('gpu', 'the GPU')}: every stage at every precision, train mode, "
                 "KernelBench shapes (a missing solid bar: not measured)")
    return _save(fig, outdir, "ladder")


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
    return _save(cancellation_figure(cancellation_lab()), outdir, "cancellation")


def load_results(results: Path):
    """(bench DataFrame, env dict, profile DataFrame or None) from a results folder.

    Raises:
        FileNotFoundError: bench.csv or env.json is missing.
        ValueError: a CSV's columns are not its contract (bench.COLUMNS, bench.PROFILE_COLUMNS).
    """
    import pandas as pd
    for name in ("bench.csv", "env.json"):
        if not (results / name).exists():
            raise FileNotFoundError(f"{results / name} not found: run `python -m fusedlib bench --ceilings` "
                                    "on a GPU and commit results/<gpu>/")
    bench = pd.read_csv(results / "bench.csv", dtype={"problem": str})
    if list(bench.columns) != COLUMNS:
        raise ValueError(f"{results / 'bench.csv'}: columns {list(bench.columns)}, expected {COLUMNS}")
    env = json.loads((results / "env.json").read_text())
    profile = None
    if (results / "profile.csv").exists():
        profile = pd.read_csv(results / "profile.csv", dtype={"problem": str})
        if list(profile.columns) != PROFILE_COLUMNS:
            raise ValueError(f"{results / 'profile.csv'}: columns {list(profile.columns)}, expected {PROFILE_COLUMNS}")
    return bench, env, profile


def make_all(results: Path, outdir: Path) -> list[Path]:
    """All figures: the cancellation figure always (first); roofline, throughput,
    breakdown and ladder from ``results`` (bench.csv and env.json required, profile.csv
    optional). Returns the paths written.

    Raises:
        FileNotFoundError, ValueError: see :func:`load_results`.
    """
    paths = cancellation(outdir)
    bench, env, profile = load_results(results)
    return (paths + roofline(bench, env, outdir) + throughput(bench, outdir) + breakdown(profile, bench, env, outdir)
            + ladder(bench, env, outdir))


def add_arguments(parser) -> None:
    parser.add_argument("--gpu", default="h100", help="read results/<gpu>/ (default h100)")
    parser.add_argument("--results", type=Path, help="results folder to read instead of results/<gpu>/")
    parser.add_argument("--out", type=Path, default=Path("figures"), help="output folder (default figures/)")
    parser.add_argument("--readme", type=Path, default=Path("README.md"), help="README whose results table to regenerate")
    parser.add_argument("--no-readme", action="store_true", help="do not touch the README's results table")


def main(args) -> int:
    from . import report
    results = args.results or Path("results") / args.gpu
    if args.results is not None and not results.is_dir():
        print(f"error: --results {results}: no such folder", file=sys.stderr)
        return 2
    if not args.no_readme:  # fail before drawing if the table has nowhere to go
        try:
            report.render_readme(args.readme.read_text(), "", report.TABLE_BEGIN, report.TABLE_END)
        except (FileNotFoundError, ValueError) as exc:
            print(f"error: {exc} (or pass --no-readme)", file=sys.stderr)
            return 2
    if not (results / "bench.csv").exists() and not (results / "env.json").exists():
        # Nothing measured yet (a fresh clone before any GPU run): not an error.
        paths = cancellation(args.out)
        print("\n".join(str(p) for p in paths))
        print(f"{results} holds no GPU results yet: roofline, throughput, breakdown and ladder are drawn once "
              "`python -m fusedlib bench --ceilings` has run on a GPU; README table unchanged", file=sys.stderr)
        return 0
    try:
        paths = make_all(results, args.out)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        print(f"wrote {args.out / 'cancellation'}.{{png,svg,pdf}} only", file=sys.stderr)
        print(f"error: {exc if not isinstance(exc, KeyError) else f'env.json lacks {exc}'}", file=sys.stderr)
        return 2
    print("\n".join(str(p) for p in paths))
    if not args.no_readme:
        import pandas as pd
        try:
            changed = report.update_results_table(args.readme, pd.read_csv(results / "bench.csv", dtype={"problem": str}))
        except (FileNotFoundError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{args.readme}: results table {'updated' if changed else 'unchanged'}")
    return 0
