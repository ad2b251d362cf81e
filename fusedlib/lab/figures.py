"""``python -m fusedlib figures``: the roofline, throughput, in_features, breakdown and ladder
figures and the README results table, drawn from the committed results only
(``results/<gpu>/bench.csv``, ``env.json`` and, if present, ``profile.csv``), so they can be
regenerated on any machine without a GPU; plus the cancellation figure, computed on the
CPU, and the pictures of the kernels (the ``FIGURES`` of every module of
:mod:`fusedlib.lab.diagrams`, :func:`export_diagrams`). Each figure is written as PNG, SVG and PDF
into ``figures/``, byte for byte the same at every export (no dates in the files, a fixed SVG
hash salt, :data:`STYLE`).

The figure functions build :class:`matplotlib.figure.Figure` objects without pyplot
(:func:`subplots`): they never choose or switch matplotlib's backend, so a notebook keeps its
inline backend and displays what they return (``course.show_figure``). matplotlib and pandas
are imported only when a figure is drawn. Rows a figure needs but bench.csv lacks (a stage or
precision not measured yet) are left out of it, never an error.

When bench.csv holds several runs of a configuration, the figures use one run of each
(problem, shape, mode, precision) group: the rows with the group's latest timestamp
(:func:`one_run`), never a mix of two runs.
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

from .bench import COLUMNS, PEER_IMPLS, PROFILE_COLUMNS, STAGE_IMPLS, datasheet
from .costmodel import PRECISIONS, PRECISIONS_16
from .records import RESULTS_GPU

ROOT = Path(__file__).resolve().parent.parent.parent
FORMATS = ("png", "svg", "pdf")
#: Kept for callers that name them so.
STAGE_ORDER, PEERS = STAGE_IMPLS, PEER_IMPLS
PRECISION_MARKERS = {"fp32": "o", "tf32": "s", "3xtf32": "^"}
PRECISION_LINES = {"fp32": "-", "tf32": "--", "3xtf32": ":"}
#: Markers of the 16-bit rows (bf16, fp16) in the roofline: drawn, and named in its legend, only
#: where bench.csv holds such rows, so that a figure of fp32, tf32 and 3xtf32 rows stays as it was.
PRECISION_MARKERS_16 = {"bf16": "D", "fp16": "v"}
#: matplotlib settings every figure is drawn and saved with: text readable on a slide
#: (at least 10 pt) and a fixed SVG hash salt (the same element ids at every export).
STYLE = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "xtick.labelsize": 10,
         "ytick.labelsize": 10, "legend.fontsize": 10, "figure.titlesize": 13, "svg.hashsalt": "fusedlib"}
#: The group a run of bench.csv covers: one table of ``python -m fusedlib bench``.
RUN_GROUP = ["problem", "batch", "in_features", "out_features", "mode", "precision"]


def styled(draw):
    """Decorator: run a figure function under :data:`STYLE` (``matplotlib.rc_context``)."""
    @functools.wraps(draw)
    def run(*args, **kwargs):
        import matplotlib
        with matplotlib.rc_context(STYLE):
            return draw(*args, **kwargs)
    return run


def subplots(nrows: int = 1, ncols: int = 1, *, figsize=None, layout="constrained", **kwargs):
    """``(Figure, axes)`` like ``pyplot.subplots`` but without pyplot: the Figure is not
    registered with any backend, so nothing is shown or switched; display it with
    ``course.show_figure`` or save it with ``Figure.savefig``. ``kwargs`` go to
    :meth:`matplotlib.figure.Figure.subplots` (sharex, sharey, squeeze, ...)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=figsize, layout=layout)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def one_run(bench):
    """The rows of bench.csv's latest run of each (problem, shape, mode, precision) group: those
    whose ``timestamp`` is the group's latest (a bench table's rows share one timestamp). An
    implementation timed only in an earlier run of the group is left out, so every ratio a
    figure shows compares rows of one run."""
    latest = bench.groupby(RUN_GROUP, sort=False)["timestamp"].transform("max")
    return bench[bench["timestamp"] == latest]


def _impl_color(impl: str):
    from matplotlib import colormaps
    order = list(STAGE_IMPLS) + list(PEER_IMPLS)
    return colormaps["tab10"](order.index(impl) % 10) if impl in order else "gray"


def _save(fig, outdir: Path, name: str) -> list[Path]:
    """Write ``fig`` as ``name``.{png,svg,pdf} in ``outdir``: 150 dpi, no creation dates, the
    SVG hash salt of :data:`STYLE`, so that two exports of the same figure are identical."""
    import matplotlib
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / f"{name}.{fmt}" for fmt in FORMATS]
    no_dates = {"svg": {"Date": None}, "pdf": {"CreationDate": None}, "png": None}  # reproducible files
    with matplotlib.rc_context(STYLE):
        for path in paths:
            fig.savefig(path, bbox_inches="tight", dpi=150, metadata=no_dates[path.suffix[1:]])
    return paths


def _preset_rows(df, problem: str):
    """Rows of ``problem`` at its KernelBench shape."""
    from ..reference import presets_of
    return df[[p == problem for p in presets_of(df)]]


def _plain_log_ticks(axis) -> None:
    """Label a log axis's ticks as plain numbers (300, not 3×10²); of the minor ticks only those
    with leading digit 2, 3 or 5, so that labels do not crowd."""
    from matplotlib.ticker import FuncFormatter
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "235" else ""))


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, color="gray")


def env_ceilings(env: dict) -> dict:
    """The measured ceilings of env.json in :func:`fusedlib.lab.course.gemm_rate`'s form:
    bandwidth (GB/s), fp32 and tf32 (TFLOP/s), and bf16 (TFLOP/s) where env.json has
    ``gemm_bf16_tflops`` (an env.json of before it has not: the 16-bit rate is then twice tf32's,
    :func:`fusedlib.lab.costmodel.gemm_tflops`).

    Raises:
        KeyError: env.json lacks ``measured`` or one of its fp32, tf32 and copy values.
    """
    m = env["measured"]
    ceil = {"bandwidth": m["copy_gbytes_per_s"], "fp32": m["gemm_fp32_tflops"], "tf32": m["gemm_tf32_tflops"]}
    if m.get("gemm_bf16_tflops") is not None:
        ceil["bf16"] = m["gemm_bf16_tflops"]
    return ceil


def present_16bit(precisions) -> list[str]:
    """The 16-bit precisions (bf16, fp16, in that order) among ``precisions`` (e.g. bench.csv's
    ``precision`` column)."""
    held = set(precisions)
    return [p for p in PRECISIONS_16 if p in held]


def bf16_roofs(env: dict) -> list[tuple[float, str, str]]:
    """The compute roofs of the 16-bit rows: (TFLOP/s, line style, label). cuBLAS's measured
    bf16 rate (solid; fp16's dense rate is the same on the H100), or twice the measured tf32
    rate (dash-dot, so labelled) where env.json has no ``gemm_bf16_tflops``; and the
    datasheet's bf16 rate (dotted) where env.json's datasheet has ``bf16_tflops``.

    Raises:
        KeyError: env.json lacks ``measured`` values.
    """
    from .costmodel import gemm_tflops
    rate, source = gemm_tflops("bf16", env_ceilings(env))
    roofs = [(rate, "-", "cuBLAS, measured") if source == "bf16" else
             (rate, "-.", "2 × the measured tf32 (bf16 not measured)")]
    sheet = datasheet(env)
    if sheet.get("bf16_tflops") is not None:
        roofs.append((sheet["bf16_tflops"], ":", "datasheet"))
    return roofs


def predicted_ms(problem: str, impl: str, precision: str, env: dict, mode: str = "train", shape=None) -> float:
    """The cost model's time of one call in ms (:meth:`fusedlib.lab.costmodel.Cost.time_ms`):
    each pass at its own roof, the GEMM's rate of ``precision`` (measured cuBLAS fp32 or
    tf32 rate, 3xtf32 a third of tf32's, bf16 and fp16 the measured bf16 rate or twice tf32's:
    :func:`fusedlib.lab.course.gemm_rate`) or the measured copy bandwidth, the passes added up. ``shape``: a :class:`~fusedlib.reference.Shape`
    or preset name, default the problem's KernelBench shape.

    Raises:
        KeyError: env.json lacks its ``measured`` ceilings.
    """
    from .costmodel import cost
    from .course import gemm_rate
    from ..reference import parse_shape, problem_kind
    s = parse_shape(shape if shape is not None else problem)
    ceil = env_ceilings(env)
    c = cost(problem_kind(problem), impl, s.batch, s.in_features, s.out_features, mode, precision)
    return c.time_ms(gemm_rate(precision, ceil), ceil["bandwidth"])


@styled
def roofline(bench, env: dict, outdir: Path) -> list[Path]:
    """``roofline.{png,svg,pdf}``: log-log arithmetic intensity (cost model, FLOP/byte)
    against achieved TFLOP/s (cost-model FLOPs / median time), one panel per problem at
    its KernelBench shape in train mode: one point per stage and peer and precision (one
    run, :func:`one_run`; colour: implementation, marker: precision), arrows naive → fold →
    sums → fused (fp32). The axes span the points and the roofs above them (a factor 1.5
    of margin), not decades where nothing is drawn. Roofs: memory from the measured copy bandwidth (solid) and the datasheet
    (dotted); compute for fp32 and tf32 from the measured cuBLAS GEMM (solid) and the
    datasheet (dotted); where bench.csv holds 3xtf32 rows, 3xTF32's at a third of each tf32
    roof (three TF32 products per product, as the cost model prices it). bf16 and fp16 rows,
    where bench.csv holds them, are drawn too (markers :data:`PRECISION_MARKERS_16`, their intensity from the cost model's 2-byte X, W and Y) under
    the bf16 roofs of :func:`bf16_roofs`; without them the figure is the fp32/tf32/3xtf32 one.

    Raises:
        KeyError: env.json lacks its ``measured`` values.
    """
    import numpy as np
    from matplotlib.lines import Line2D

    from .costmodel import cost
    from ..reference import PRESETS, problem_kind
    measured, sheet = env["measured"], datasheet(env)
    fig, axes = subplots(1, 3, figsize=(17, 5.5), sharey=True, layout="constrained")
    train = one_run(bench[bench["mode"] == "train"])
    kb = [(problem, _preset_rows(train, problem)) for problem in ("84", "33", "39")]
    sixteen = present_16bit(p for _, rows in kb for p in rows["precision"])
    roofs16 = bf16_roofs(env) if sixteen else []
    split3 = any((rows["precision"] == "3xtf32").any() for _, rows in kb)
    top = max([sheet["tf32_tflops"], measured["gemm_tf32_tflops"]] + [r for r, _, _ in roofs16]) * 1.5
    xs = [cost(problem_kind(pr), r.impl, PRESETS[pr].batch, PRESETS[pr].in_features, PRESETS[pr].out_features,
               "train", r.precision).intensity for pr, rows in kb for r in rows.itertuples(index=False)]
    ys = [r.tflops for _, rows in kb for r in rows.itertuples(index=False) if r.tflops > 0]
    xlim = (min(xs) / 1.5, max(xs) * 1.5) if xs else (10.0, 1000.0)
    ylim = (min(ys) / 1.5 if ys else 1.0, top)
    ai = np.geomspace(*xlim, 200)
    impl_handles = {}
    for ax, (problem, rows) in zip(axes, kb):
        for label, bw, style in (("copy, measured", measured["copy_gbytes_per_s"], "-"),
                                 (f"{sheet.get('device', 'HBM')} datasheet", sheet["bandwidth_gbytes_per_s"], ":")):
            ax.plot(ai, np.minimum(ai * bw / 1e3, top), style, color="gray", lw=1,
                    label=f"memory roof, {label}: {bw / 1e3:.2f} TB/s")
        for prec, color in (("fp32", "tab:blue"), ("tf32", "tab:orange")):
            for peak, style, what in ((measured[f"gemm_{prec}_tflops"], "-", "cuBLAS, measured"),
                                      (sheet[f"{prec}_tflops"], ":", "datasheet")):
                ax.axhline(peak, ls=style, color=color, lw=1, label=f"{prec} roof, {what}: {peak:.0f} TFLOP/s")
        if split3:  # three TF32 products per product: a third of the tf32 rate
            for peak, style, what in ((measured["gemm_tf32_tflops"] / 3, "-", "tf32 measured / 3"),
                                      (sheet["tf32_tflops"] / 3, ":", "tf32 datasheet / 3")):
                ax.axhline(peak, ls=style, color="tab:purple", lw=1, label=f"3xtf32 roof, {what}: {peak:.0f} TFLOP/s")
        for peak, style, what in roofs16:
            ax.axhline(peak, ls=style, color="tab:green", lw=1,
                       label=f"{'/'.join(sixteen)} roof, {what}: {peak:.0f} TFLOP/s")
        s = PRESETS[problem]
        if rows.empty:
            _no_data(ax, "no train-mode rows at this shape")
        points = {}
        for row in rows.itertuples(index=False):
            x = cost(problem_kind(problem), row.impl, s.batch, s.in_features, s.out_features, "train",
                     row.precision).intensity
            points[row.impl, row.precision] = (x, row.tflops)
            marker = PRECISION_MARKERS.get(row.precision, PRECISION_MARKERS_16.get(row.precision, "o"))
            dot = ax.scatter([x], [row.tflops], marker=marker,
                             color=_impl_color(row.impl), s=40, zorder=3, edgecolor="black", linewidth=0.4)
            impl_handles.setdefault(row.impl, dot)
        chain = [points[stage, "fp32"] for stage in STAGE_IMPLS if (stage, "fp32") in points]
        for a, b in zip(chain, chain[1:]):
            ax.annotate("", xy=b, xytext=a, arrowprops=dict(arrowstyle="->", color="black", lw=0.8))
        ax.set(xscale="log", yscale="log", xlim=xlim, ylim=ylim,
               xlabel="arithmetic intensity (FLOP/byte, cost model)", title=f"problem {problem} @{s}")
        ax.grid(True, which="major", lw=0.3)
        _plain_log_ticks(ax.xaxis)
        _plain_log_ticks(ax.yaxis)
    axes[0].set_ylabel("achieved TFLOP/s")
    handles, labels = axes[0].get_legend_handles_labels()
    for impl in [i for i in list(STAGE_IMPLS) + list(PEER_IMPLS) if i in impl_handles]:
        handles.append(Line2D([], [], marker="o", ls="", color=_impl_color(impl), markeredgecolor="black"))
        labels.append(impl)
    for prec, marker in list(PRECISION_MARKERS.items()) + [(p, PRECISION_MARKERS_16[p]) for p in sixteen]:
        handles.append(Line2D([], [], marker=marker, ls="", color="white", markeredgecolor="black"))
        labels.append(prec)
    fig.legend(handles, labels, loc="outside lower center", ncol=4)
    fig.suptitle(f"Roofline on {env.get('gpu', 'the GPU')}, train mode, KernelBench shapes "
                 "(arrows: naive → fold → sums → fused at fp32)")
    return _save(fig, outdir, "roofline")


@styled
def throughput(bench, outdir: Path) -> list[Path]:
    """``throughput.{png,svg,pdf}``: achieved TFLOP/s (cost-model FLOPs / median time, log
    scale) against the batch size (N at 4096→4096) and against the features (K = M at batch
    1024), train mode, one run (:func:`one_run`). Small multiples: one row per problem family
    (84; 33/39, one model) and sweep, one column per precision, so a panel holds at most the
    four stages and the four peers, each in its own colour (:func:`_impl_color`) and named in
    the legend; the peers are drawn dashed, and in the 3xtf32 column at fp32 (PyTorch has no
    3xTF32; fp32 is its accuracy class). Rows of other shapes are ignored; a panel without
    sweep rows says so, and a table without any sweep gets one line saying how to measure one."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, NullLocator

    from .bench import BATCH_SWEEP_FEATURES, FEATURE_SWEEP_BATCH
    train = one_run(bench[bench["mode"] == "train"]).copy()
    train["family"] = train.problem.astype(str).map({"84": "84", "33": "33/39", "39": "33/39"})
    sweeps = (("batch", f"batch N (at {BATCH_SWEEP_FEATURES}→{BATCH_SWEEP_FEATURES})",
               train[(train.in_features == BATCH_SWEEP_FEATURES) & (train.out_features == BATCH_SWEEP_FEATURES)]),
              ("in_features", f"features K = M (at batch {FEATURE_SWEEP_BATCH})",
               train[(train.batch == FEATURE_SWEEP_BATCH) & (train.in_features == train.out_features)]))
    panels = [(family, sweep) for family in ("84", "33/39") for sweep in sweeps]
    if all(sweep[sweep.family == family][xname].nunique() < 2 for family, (xname, _, sweep) in panels):
        fig, axes = subplots(1, 1, figsize=(9, 2.5), squeeze=False)  # one message, not twelve empty panels
        axes[0][0].set_axis_off()
        _no_data(axes[0][0], "bench.csv holds no size sweep: python -m fusedlib bench --append --problem 84,33 "
                             "--mode train\n--sweep batch --sweep features measures one (make results does)")
        fig.suptitle("Throughput against batch size and features, train mode")
        return _save(fig, outdir, "throughput")
    fig, axes = subplots(len(panels), len(PRECISIONS), figsize=(15, 15), squeeze=False)
    drawn_impls = set()
    for r, (family, (xname, xlabel, sweep)) in enumerate(panels):
        sub = sweep[sweep.family == family]
        for c, prec in enumerate(PRECISIONS):
            ax = axes[r][c]
            drawn = False
            for impl in list(STAGE_IMPLS) + list(PEER_IMPLS):
                peer = impl in PEER_IMPLS
                at = "fp32" if peer and prec == "3xtf32" else prec
                g = sub[(sub.impl == impl) & (sub.precision == at)].drop_duplicates(xname, keep="last").sort_values(xname)
                if g[xname].nunique() < 2:
                    continue
                ax.plot(g[xname], g.tflops, ls="--" if peer else "-", marker="o", ms=4, color=_impl_color(impl))
                drawn_impls.add(impl)
                drawn = True
            ax.set(xscale="log", yscale="log", title=f"{family}, {prec}: against {'batch' if xname == 'batch' else 'features'}")
            ax.grid(True, which="major", lw=0.3)
            _plain_log_ticks(ax.yaxis)
            if c == 0:
                ax.set_ylabel("TFLOP/s")
            if not drawn:
                _no_data(ax, f"no {xname} sweep in bench.csv")
            ticks = sorted(sub[xname].unique())
            if ticks:
                ax.xaxis.set_major_locator(FixedLocator(ticks))
                ax.xaxis.set_minor_locator(NullLocator())
                ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.set_xlabel(xlabel)
    order = [i for i in list(STAGE_IMPLS) + list(PEER_IMPLS) if i in drawn_impls]
    if order:
        handles = [Line2D([], [], color=_impl_color(i), ls="--" if i in PEER_IMPLS else "-", marker="o", ms=4)
                   for i in order]
        labels = [f"{i} (stage)" if i in STAGE_IMPLS else f"{i} (peer)" for i in order]
        fig.legend(handles, labels, loc="outside lower center", ncol=4)
    fig.suptitle("Throughput against batch size and features, train mode: one panel per problem, sweep and "
                 "precision (3xtf32 panels: the peers at fp32)")
    return _save(fig, outdir, "throughput")


#: The implementations whose lines :func:`gemm_time_lines` fits: the stages that run our GEMM
#: (fold's is naive's) and cuBLAS's GEMM alone.
LINE_IMPLS = ("naive", "sums", "fused", "gemm_only")


def _in_features_rows(bench, problem: str, mode: str):
    """bench.csv's rows of ``problem`` in ``mode`` at the in_features sweep's batch and
    out_features (one run of each shape, :func:`one_run`)."""
    from .bench import FEATURE_SWEEP_BATCH, IN_FEATURE_SWEEP_OUT
    return one_run(bench[(bench.problem.astype(str) == str(problem)) & (bench["mode"] == mode)
                         & (bench.batch == FEATURE_SWEEP_BATCH) & (bench.out_features == IN_FEATURE_SWEEP_OUT)])


def _line_points(rows, precision: str, impl: str):
    """One implementation's points of the sweep in :func:`_in_features_rows`'s ``rows``: one row
    a K (the last), in order of K."""
    g = rows[(rows.precision == precision) & (rows.impl == impl)]
    return g.drop_duplicates("in_features", keep="last").sort_values("in_features")


def gemm_time_lines(bench, problem: str = "84", mode: str = "train"):
    """The straight line t = a + b·K through each implementation's median times of the
    in_features sweep (batch 1024 → 8192 out_features, K alone varied: ``bench --sweep
    in_features``), one run of each shape (:func:`one_run`), by least squares (numpy.polyfit,
    degree 1). b is the time of the mainloop (µs per 1024 of K: the K loop's loads and
    tensor-core products, which grow with K); a is what a call pays whatever K is (µs: each
    tile's prologue and epilogue, the passes over the (N, M) output, the launches).

    Returns a DataFrame with one row per precision and implementation of :data:`LINE_IMPLS`
    with at least three sweep points: precision, impl, points (the number of K values),
    a_us, b_us_per_1024, their standard errors a_err_us and b_err_us_per_1024 (the square
    roots of the diagonal of polyfit's covariance, ``cov=True``: the residuals' variance over
    points − 2 degrees of freedom; a few points give a wide error) and max_residual_pct (the
    largest distance of a point from its line, % of the point); empty (with those columns)
    when bench.csv holds no such sweep. :func:`slope_ratio` divides two of its slopes.
    """
    import numpy as np
    import pandas as pd

    columns = ["precision", "impl", "points", "a_us", "b_us_per_1024", "a_err_us", "b_err_us_per_1024",
               "max_residual_pct"]
    rows = _in_features_rows(bench, problem, mode)
    out = []
    for prec in [p for p in list(PRECISIONS_16) + list(PRECISIONS) if p in set(rows.precision)]:
        for impl in LINE_IMPLS:
            g = _line_points(rows, prec, impl)
            if len(g) < 3:
                continue
            k, us = g.in_features.to_numpy(float), g.median_ms.to_numpy(float) * 1e3
            (b, a), cov = np.polyfit(k, us, 1, cov=True)
            b_err, a_err = np.sqrt(np.clip(np.diag(cov), 0.0, None))
            residual = np.abs(us - (a + b * k)) / us * 100
            out.append(dict(precision=prec, impl=impl, points=len(g), a_us=a, b_us_per_1024=b * 1024,
                            a_err_us=a_err, b_err_us_per_1024=b_err * 1024, max_residual_pct=residual.max()))
    return pd.DataFrame(out, columns=columns)


def slope_ratio(lines, precision: str, impl: str, reference: str = "gemm_only") -> tuple[float, float]:
    """``(ratio, error)``: ``impl``'s slope over ``reference``'s at ``precision`` in
    :func:`gemm_time_lines`'s ``lines``, and the ratio's standard error, propagated from the two
    slopes' standard errors as for independent fits:
    error = ratio · √((σ_b / b)² + (σ_ref / b_ref)²).

    Raises:
        KeyError: ``lines`` has no line of ``impl`` or ``reference`` at ``precision``.
    """
    import math
    t = lines[lines.precision == precision].set_index("impl")
    b, b_ref = t.loc[impl, "b_us_per_1024"], t.loc[reference, "b_us_per_1024"]
    ratio = b / b_ref
    error = abs(ratio) * math.hypot(t.loc[impl, "b_err_us_per_1024"] / b,
                                    t.loc[reference, "b_err_us_per_1024"] / b_ref)
    return float(ratio), float(error)


@styled
def in_features_lines(bench, outdir: Path) -> list[Path]:
    """``in_features.{png,svg,pdf}``: median µs per call of 84 in train mode against K (batch
    1024 → 8192 out_features: ``bench --sweep in_features``), one panel per precision of the
    sweep, each implementation of :data:`LINE_IMPLS` as its measured points and the line
    :func:`gemm_time_lines` fits through them (legend: a and b). Without the sweep: one line
    saying how to measure it."""
    from .bench import FEATURE_SWEEP_BATCH, IN_FEATURE_SWEEP_OUT
    lines = gemm_time_lines(bench)
    precisions = list(dict.fromkeys(lines.precision))
    if not precisions:
        fig, axes = subplots(1, 1, figsize=(9, 2.5), squeeze=False)
        axes[0][0].set_axis_off()
        _no_data(axes[0][0], "bench.csv holds no in_features sweep: python -m fusedlib bench --append --problem 84 "
                             "--mode train\n--precision bf16,tf32 --sweep in_features --impl naive,sums,fused,gemm_only")
        fig.suptitle("Time against K, train mode")
        return _save(fig, outdir, "in_features")
    fig, axes = subplots(1, len(precisions), figsize=(6.5 * len(precisions), 5), squeeze=False)
    rows = _in_features_rows(bench, "84", "train")
    for ax, prec in zip(axes[0], precisions):
        for line in lines[lines.precision == prec].itertuples(index=False):
            g = _line_points(rows, prec, line.impl)
            color = _impl_color(line.impl)
            ax.plot(g.in_features, g.median_ms * 1e3, "o", color=color)
            ks = [0, g.in_features.max()]
            ax.plot(ks, [line.a_us + line.b_us_per_1024 * k / 1024 for k in ks], "-" if line.impl in STAGE_IMPLS else "--",
                    color=color, lw=1.2, label=f"{line.impl}: {line.a_us:.0f} µs + {line.b_us_per_1024:.2f} µs per 1024 of K")
        ax.set(xlabel=f"in_features K (batch {FEATURE_SWEEP_BATCH} → {IN_FEATURE_SWEEP_OUT} out_features)",
               ylabel="median µs per call", title=f"84, {prec}", xlim=(0, None), ylim=(0, None))
        ax.grid(True, lw=0.3)
        ax.legend(loc="upper left")
    fig.suptitle("Time against K, train mode: points measured (bench.csv), lines fitted t = a + b·K")
    return _save(fig, outdir, "in_features")


def _short_kernel(name: str) -> str:
    """Legend label of a kernel: its bare function name, cut to 40 characters."""
    from .bench import kernel_base
    base = kernel_base(name)
    return base if len(base) <= 40 else base[:37] + "..."


@styled
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
    present = {(r.impl, r.precision) for r in bench[bench["mode"] == "train"].itertuples(index=False)}
    if profile is not None:
        present |= {(r.impl, r.precision) for r in profile[profile["mode"] == "train"].itertuples(index=False)}
    bars = [(s, prec) for prec in PRECISIONS for s in STAGE_IMPLS if (s, prec) in present]
    bars = bars or [(s, "fp32") for s in STAGE_IMPLS]
    fig, axes = subplots(1, 3, figsize=(max(18.0, 1.8 * len(bars)), 5.5), layout="constrained")
    colors: dict[str, tuple] = {}
    from matplotlib import colormaps
    cmap = colormaps["tab20"]
    for ax, problem in zip(axes, ("84", "33", "39")):
        shape = PRESETS[problem]
        for i, (impl, prec) in enumerate(bars):
            if profile is not None:
                sel = profile[(profile.problem.astype(str) == problem) & (profile["shape"] == str(shape))
                              & (profile["mode"] == "train") & (profile.precision == prec) & (profile.impl == impl)]
                sel = sel.drop_duplicates("kernel", keep="last")
                parts = [(_short_kernel(k), us / 1e3) for k, us in zip(sel.kernel, sel.cuda_time_us_per_call)]
            else:
                ceil = env_ceilings(env)
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
                ax.annotate(f"{bottom:.2f}", (i, bottom), ha="center", va="bottom",
                            xytext=(0, 2), textcoords="offset points")
            timed = _preset_rows(one_run(bench), problem)
            timed = timed[(timed["mode"] == "train") & (timed.impl == impl) & (timed.precision == prec)]
            if len(timed):
                ax.plot([i - 0.4, i + 0.4], [timed.median_ms.iloc[-1]] * 2, color="black", lw=1.2)
        ax.set_xticks(range(len(bars)), [f"{impl}\n{prec}" for impl, prec in bars])
        ax.set(ylabel="ms per call", title=f"problem {problem} @{shape}" + ("" if profile is not None else " (predicted)"))
        if not ax.get_legend_handles_labels()[0]:
            _no_data(ax, "no profile rows at this shape")
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside right upper")
    source = ("torch.profiler kernel times (profile.csv); black tick: bench.csv median" if profile is not None
              else "predicted: cost-model passes at the measured ceilings (no profile.csv); black tick: bench.csv median")
    fig.suptitle(f"Where the time goes, train mode: {source}")
    return _save(fig, outdir, "breakdown")


#: Reference lines of the ladder: peer, line style, and the precision it is drawn at in each
#: precision (PyTorch has no 3xTF32: eager fp32, the same accuracy class, stands in; no
#: GEMM-alone line there; bf16 and fp16 at their own dtype).
LADDER_REFERENCES = (("eager", "--", {"fp32": "fp32", "tf32": "tf32", "3xtf32": "fp32", "bf16": "bf16", "fp16": "fp16"}),
                     ("gemm_only", ":", {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16"}))


def saved_label(before: float, after: float) -> str:
    """The bar label of one step of the ladder: "saves 2.2 %" when ``after`` (ms) is below
    ``before`` (ms), "costs 0.3 %" when above, relative to ``before``."""
    change = (before - after) / before * 100
    return f"saves\n{change:.1f} %" if change >= 0 else f"costs\n{-change:.1f} %"


@styled
def ladder(bench, env: dict, outdir: Path) -> list[Path]:
    """``ladder.{png,svg,pdf}``: every stage at every precision, measured against predicted.

    Small multiples, linear time axes: one panel per problem (rows: 84, 33, 39 at their
    KernelBench shapes) and precision (columns: fp32, tf32, 3xtf32, then bf16 and fp16 where
    bench.csv holds train-mode rows of them, :func:`present_16bit`: without, the figure is
    the three-column one), train mode, each with its own scale from zero. In a panel one bar per stage (naive, fold, sums, fused) holding
    the measured median in ms on top and, inside, the **% saved** by the step from the stage
    before it ("saves x %", or "costs x %" when the step is slower); a black dashed tick
    across each bar, the cost model's prediction (:func:`predicted_ms`: each pass at its
    roof, measured ceilings of env.json). Horizontal lines: eager (dashed) and the GEMM alone
    (``gemm_only``, dotted) at the panel's precision; the 3xtf32 panels get eager fp32
    (dash-dot) instead, PyTorch having no 3xTF32, and no GEMM-alone line. A bf16 or fp16 panel
    has every implementation in that dtype; its prediction takes the GEMM at the measured bf16
    rate, or at twice tf32's where env.json has none (the legend then says so).

    One run: bench.csv may hold two runs of a configuration; the ladder takes, for each
    (problem, shape, mode, precision) group, the rows with the group's latest timestamp
    (:func:`one_run`), so the stages and the peers of a panel come from one run.

    A stage or peer without a row is left out (its prediction is still drawn); a problem
    without any row says so in its panels.

    Raises:
        KeyError: env.json lacks its ``measured`` ceilings.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from ..reference import PRESETS
    from .costmodel import gemm_tflops
    ceil = env_ceilings(env)  # fail early, before drawing, on an env.json without ceilings
    train = one_run(bench[bench["mode"] == "train"])
    precisions = list(PRECISIONS) + present_16bit(train["precision"])
    fig, axes = subplots(3, len(precisions), figsize=(16 * len(precisions) / len(PRECISIONS), 14), squeeze=False)
    handles: dict[str, object] = {stage: Patch(facecolor=_impl_color(stage), edgecolor="black", linewidth=0.4)
                                  for stage in STAGE_IMPLS}
    handles["black dashes: cost-model prediction (each pass at its roof)"] = Line2D(
        [], [], color="black", ls=(0, (3, 2)), lw=1.5)
    if len(precisions) > len(PRECISIONS) and gemm_tflops("bf16", ceil)[1] != "bf16":
        handles["bf16/fp16 predictions: the GEMM at 2 × the measured tf32 rate (env.json has no bf16 rate)"] = \
            Line2D([], [], color="black", ls=(0, (3, 2)), lw=1.5)
    x = range(len(STAGE_IMPLS))
    for r, problem in enumerate(("84", "33", "39")):
        rows = _preset_rows(train, problem)
        ms = {(row.impl, row.precision): float(row.median_ms) for row in rows.itertuples(index=False)}
        for c, prec in enumerate(precisions):
            ax = axes[r][c]
            values = []
            previous = None
            for i, stage in enumerate(STAGE_IMPLS):
                pred = predicted_ms(problem, stage, prec, env)
                values.append(pred)
                ax.hlines(pred, i - 0.42, i + 0.42, colors="black", linestyles=(0, (3, 2)), linewidth=1.5, zorder=4)
                t = ms.get((stage, prec))
                if t is None:
                    previous = None
                    continue
                values.append(t)
                ax.bar(i, t, 0.7, color=_impl_color(stage), edgecolor="black", linewidth=0.4)
                ax.annotate(f"{t:.3g} ms", (i, t), ha="center", va="bottom", fontsize=11,
                            xytext=(0, 3), textcoords="offset points")
                if previous is not None:
                    ax.text(i, t / 2, saved_label(previous, t), ha="center", va="center", fontsize=10,
                            color="white", fontweight="bold")
                previous = t
            for peer, style, at in LADDER_REFERENCES:
                ref_prec = at.get(prec)
                if ref_prec is None or (peer, ref_prec) not in ms:
                    continue
                t = ms[peer, ref_prec]
                values.append(t)
                stand_in = ref_prec != prec
                line = ax.axhline(t, color=_impl_color(peer), ls="-." if stand_in else style, lw=1.5, zorder=3)
                label = (f"{peer} fp32: reference of the 3xtf32 panels (PyTorch has no 3xTF32)" if stand_in
                         else f"{peer} at the panel's precision")
                handles.setdefault(label, line)
            if not ms:
                _no_data(ax, "no train-mode rows at this shape")
            ax.set_xticks(list(x), list(STAGE_IMPLS))
            ax.set_ylim(0, max(values) * 1.18)
            ax.set_title(f"{problem} @{PRESETS[problem]}, {prec}")
            ax.grid(True, axis="y", lw=0.3)
            if c == 0:
                ax.set_ylabel("ms per call")
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=3)
    fig.suptitle(f"The ladder on {env.get('gpu', 'the GPU')}, train mode, KernelBench shapes: median ms per "
                 "stage (one run) and the % each step saves")
    return _save(fig, outdir, "ladder")


@styled
def cancellation_figure(lab):
    """A Figure (made without pyplot: the caller's backend is left alone) of a
    course.cancellation_lab table: variance error against |mean|/std, log-log."""
    fig, ax = subplots(figsize=(6, 4))
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


def diagram_figures() -> dict:
    """Every picture of the kernels: the ``FIGURES`` of each module of :mod:`fusedlib.lab.diagrams`
    (found with pkgutil, modules in name order), merged into one dict file stem → function.

    Raises:
        ValueError: two modules define the same file stem.
    """
    import importlib
    import pkgutil

    from . import diagrams
    found: dict = {}
    for info in sorted(pkgutil.iter_modules(diagrams.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{diagrams.__name__}.{info.name}")
        for stem, draw in getattr(module, "FIGURES", {}).items():
            if stem in found:
                raise ValueError(f"fusedlib.lab.diagrams.{info.name}: figure {stem!r} is already defined by another module")
            found[stem] = draw
    return found


def export_diagrams(outdir: Path) -> list[Path]:
    """Draw every :func:`diagram_figures` function (cost model and algebra only: no GPU
    results needed) and save it as PNG, SVG and PDF in ``outdir``. Returns the paths."""
    import matplotlib
    paths = []
    for stem, draw in diagram_figures().items():
        with matplotlib.rc_context(STYLE):
            fig = draw()
        paths += _save(fig, outdir, stem)
    return paths


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
    in_features, breakdown and ladder from ``results`` (bench.csv and env.json required, profile.csv
    optional). Returns the paths written.

    Raises:
        FileNotFoundError, ValueError: see :func:`load_results`.
    """
    paths = cancellation(outdir)
    bench, env, profile = load_results(results)
    return (paths + roofline(bench, env, outdir) + throughput(bench, outdir) + in_features_lines(bench, outdir)
            + breakdown(profile, bench, env, outdir) + ladder(bench, env, outdir))


def add_arguments(parser) -> None:
    parser.add_argument("--gpu", default=RESULTS_GPU, help=f"read results/<gpu>/ (default {RESULTS_GPU})")
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
        paths = cancellation(args.out) + export_diagrams(args.out)
        print("\n".join(str(p) for p in paths))
        print(f"{results} holds no GPU results yet: roofline, throughput, in_features, breakdown and ladder are drawn once "
              "`python -m fusedlib bench --ceilings` has run on a GPU; README table unchanged", file=sys.stderr)
        return 0
    try:
        paths = make_all(results, args.out) + export_diagrams(args.out)
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
