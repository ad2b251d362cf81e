"""Helpers the notebooks share: ceilings, per-stage predictions, kernel sources and the
committed measurements, so that every number a notebook prints comes from the cost model
or from a committed result (``results/<gpu>/``).

Every reader of a committed file returns ``None`` when the file is absent; the notebooks
then print :data:`NO_RESULTS` and skip the table or plot. ``FUSEDLIB_RESULTS`` (a folder)
replaces ``results/<gpu>/`` — for trying the notebooks against another run.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .costmodel import PRECISIONS, PRECISIONS_16
from .records import NOTES_GPU, RESULTS_GPU

ROOT = Path(__file__).resolve().parent.parent.parent
#: What the notebooks print where a committed GPU result is missing.
NO_RESULTS = "no committed GPU results yet"
#: The problems at their KernelBench shapes, in the order the notebooks show them.
PROBLEMS = ("84", "33", "39")
#: The peers each stage is compared with (bench.csv ``impl`` values).
PEERS = ("eager", "compile", "compile_max_autotune", "gemm_only")


def results_dir(gpu: str = RESULTS_GPU) -> Path:
    """``results/<gpu>/``, or the folder named by the environment variable FUSEDLIB_RESULTS."""
    override = os.environ.get("FUSEDLIB_RESULTS")
    return Path(override) if override else ROOT / "results" / gpu


def result_path(name: str, gpus=(RESULTS_GPU,)) -> Path | None:
    """The committed ``results/<gpu>/<name>`` of the first GPU in ``gpus`` that has one (with
    FUSEDLIB_RESULTS set, that folder's ``name``), or None: for records measured on whichever
    GPUs were at hand (the data-parallel runs need several of one host)."""
    for gpu in gpus:
        path = results_dir(gpu) / name
        if path.exists():
            return path
    return None


def env(gpu: str = RESULTS_GPU) -> dict | None:
    """The committed env.json (device, measured ceilings, datasheet), or None."""
    path = results_dir(gpu) / "env.json"
    return json.loads(path.read_text()) if path.exists() else None


def ceilings(gpu: str = RESULTS_GPU) -> dict:
    """Bandwidth (GB/s) and GEMM rates (TFLOP/s, fp32 and tf32; bf16 where env.json measured
    it, ``gemm_bf16_tflops``) to predict with: measured on the GPU (results/<gpu>/env.json)
    when committed, else the H100 SXM datasheet (bf16 included)."""
    from .bench import DATASHEET_H100
    from .figures import env_ceilings
    e = env(gpu)
    if e is not None and "measured" in e:
        return {**env_ceilings(e), "source": f"measured on the {e.get('gpu', 'GPU')} (results/{gpu}/env.json)"}
    return {"bandwidth": DATASHEET_H100["bandwidth_gbytes_per_s"], "fp32": DATASHEET_H100["fp32_tflops"],
            "tf32": DATASHEET_H100["tf32_tflops"], "bf16": DATASHEET_H100["bf16_tflops"],
            "source": "H100 SXM datasheet (no env.json committed yet)"}


def gemm_rate(precision: str, ceil: dict) -> float:
    """TFLOP/s a GEMM of ``precision`` can reach: 3xTF32 issues three TF32 products; bf16 and
    fp16 at ``ceil["bf16"]``, or twice tf32's where it was not measured
    (:func:`fusedlib.lab.costmodel.gemm_tflops`, which also says which was used)."""
    from .costmodel import gemm_tflops
    return gemm_tflops(precision, ceil)[0]


def prediction(impl: str, problem: str, shape: str | None = None, mode: str = "train", precision: str = "fp32",
               gpu: str = RESULTS_GPU):
    """(passes table, predicted ms) of ``impl`` for ``problem`` (84/33/39) at ``shape``
    (default: the problem's KernelBench shape). One row per pass of the cost model: MB read,
    MB written, GFLOP, FLOP/byte, the roof that bounds it and its time at that roof (the
    GEMM's rate for its precision, the copy bandwidth otherwise); kernels do not overlap, so
    the predicted time is the sum."""
    import pandas as pd

    from .costmodel import cost
    from ..reference import parse_shape, problem_kind
    s = parse_shape(shape or problem)
    c = cost(problem_kind(problem), impl, s.batch, s.in_features, s.out_features, mode, precision)
    ceil = ceilings(gpu)
    rate = gemm_rate(precision, ceil)
    rows = []
    for p in c.passes:
        t_compute, t_memory = p.flops / (rate * 1e12), p.bytes / (ceil["bandwidth"] * 1e9)
        rows.append({"pass": p.name, "MB read": p.read_bytes / 1e6, "MB written": p.write_bytes / 1e6,
                     "GFLOP": p.flops / 1e9, "FLOP/byte": p.flops / p.bytes if p.bytes else float("inf"),
                     "bound by": "compute" if t_compute > t_memory else "memory",
                     "ms at its roof": max(t_compute, t_memory) * 1e3})
    table = pd.DataFrame(rows)
    return table, float(table["ms at its roof"].sum())


def kernel_source(stage: str, start: str | None = None, end: str | None = None, after: int = 0,
                  history: bool = False, before: int = 0) -> str:
    """The stage's CUDA file (a stage name or a file in fusedlib/kernels), or the lines from
    the first one containing ``start`` (and ``before`` lines above it: a kernel's template line)
    up to the next one containing ``end`` (the end of the
    file without ``end``) and ``after`` more lines, as a Markdown ```cuda block; comments
    citing the lab's experiments are left out (:func:`without_history`) unless ``history``.

    Raises:
        FileNotFoundError: no such stage or kernel file.
        ValueError: ``start`` or ``end`` is given and no line (after ``start``) contains it.
    """
    from ..build import KERNEL_DIR, STAGE_FILES
    name = STAGE_FILES.get(stage, stage)
    text = (KERNEL_DIR / name).read_text()
    lines = text.splitlines()
    if start:
        i = next((k for k, line in enumerate(lines) if start in line), None)
        if i is None:
            raise ValueError(f"kernel_source: no line of {name} contains the start marker {start!r}")
        j = len(lines) - 1
        if end:
            j = next((k for k, line in enumerate(lines[i + 1:], i + 1) if end in line), None)
            if j is None:
                raise ValueError(f"kernel_source: no line of {name} after {start!r} contains the end marker {end!r}")
        lines = lines[max(i - before, 0):j + 1 + after]
    elif end:
        raise ValueError("kernel_source: an end marker needs a start marker")
    listing = "```cuda\n" + "\n".join(lines) + "\n```"
    return listing if history else without_history(listing)


#: GPUs of each compute capability the engine's path table shows (:func:`gemm_paths_table`).
GPU_EXAMPLES = {(7, 5): "T4, RTX 20", (8, 0): "A100", (8, 6): "A10, RTX 30", (8, 9): "L4, L40S, RTX 40",
                (9, 0): "H100, H200", (10, 0): "B200", (12, 0): "RTX 50"}


def gemm_paths_table(capabilities=tuple(GPU_EXAMPLES), k: int | None = None):
    """The GEMM path (mainloop) each precision runs on each compute capability by default, as
    :func:`fusedlib.engine.select_path` chooses it with ``FUSEDLIB_GEMM_PATH`` unset: one row
    per capability (``sm_XY`` and example GPUs), one column per precision; "unsupported" where
    it raises :class:`~fusedlib.engine.UnsupportedPrecision`. ``k``: in_features (None: any
    multiple of 4; the wgmma path needs K % 4 == 0)."""
    import pandas as pd

    from .. import engine
    rows = []
    for cap in capabilities:
        row = {"arch": f"sm_{cap[0]}{cap[1]}{'a' if cap == (9, 0) else ''}", "GPUs": GPU_EXAMPLES.get(tuple(cap), "")}
        for precision in PRECISIONS:
            try:
                row[precision] = engine.select_path(precision, cap, k=k, forced="auto")
            except engine.UnsupportedPrecision:
                row[precision] = "unsupported"
        rows.append(row)
    return pd.DataFrame(rows).set_index("arch")


def prediction_by_precision(stage: str, problem: str, precisions=("fp32", "tf32", "3xtf32"), mode: str = "train",
                            gpu: str = RESULTS_GPU):
    """(table, {precision: predicted ms}) of ``stage`` for ``problem`` at its KernelBench
    shape: one row per pass of the cost model (:func:`prediction`), its GFLOP and, for each
    precision, the MB it moves (read + written) and its ms at its roof; NaN where a pass does
    not exist at that precision."""
    import pandas as pd
    tables, totals = {}, {}
    for precision in precisions:
        tables[precision], totals[precision] = prediction(stage, problem, None, mode, precision, gpu)
    order: list[str] = []
    for t in tables.values():  # the union of the passes, each in launch order
        names = list(t["pass"])
        for i, name in enumerate(names):
            if name not in order:
                later = next((order.index(n) for n in names[i + 1:] if n in order), len(order))
                order.insert(later, name)
    out = pd.DataFrame(index=pd.Index(order, name="pass"))
    out["GFLOP"] = pd.concat([t.set_index("pass")["GFLOP"] for t in tables.values()], axis=1).max(axis=1)
    for precision, t in tables.items():
        out[f"MB {precision}"] = (t["MB read"] + t["MB written"]).set_axis(t["pass"])
    for precision, t in tables.items():
        out[f"ms {precision}"] = t.set_index("pass")["ms at its roof"]
    return out, totals


#: The peers timed again in a run of their own (``make results``: one more bench run of eager,
#: compile and the GEMM alone at each KernelBench shape, with ``--remeasure``), for
#: :func:`peer_spread`.
PEER_REPEATS = "peers/bench.csv"


def measured(impls=None, gpu: str = RESULTS_GPU, name: str = "bench.csv"):
    """The committed bench.csv (or ``name`` under results/<gpu>/, e.g. :data:`PEER_REPEATS`) as
    a DataFrame (optionally only some impls), or None."""
    import pandas as pd
    path = results_dir(gpu) / name
    if not path.exists():
        return None
    df = pd.read_csv(path, dtype={"problem": str})
    return df if impls is None else df[df.impl.isin(list(impls))]


def profile(gpu: str = RESULTS_GPU):
    """The committed profile.csv (per-kernel device time) as a DataFrame, or None."""
    import pandas as pd
    path = results_dir(gpu) / "profile.csv"
    return pd.read_csv(path, dtype={"problem": str}) if path.exists() else None


def at_presets(df, mode: str = "train"):
    """The latest row of each (problem, precision, impl) at the problem's KernelBench shape."""
    from ..reference import presets_of
    sel = df[[p not in (None, "v0") for p in presets_of(df)]]
    sel = sel[sel["mode"] == mode]
    return sel.drop_duplicates(["problem", "precision", "impl"], keep="last")


def _peer_precision(precision: str) -> str:
    return "fp32" if precision == "3xtf32" else precision  # the peers have no 3xTF32: same accuracy class


def measurement_table(stage: str, precisions=("fp32",), mode: str = "train", gpu: str = RESULTS_GPU):
    """Median ms of ``stage`` and its peers at the KernelBench shapes, one row per problem and
    precision, with the cost model's prediction beside them; None without bench.csv. A
    combination the committed run did not time has NaN in its measured columns (shown as
    :data:`NOT_MEASURED` by :func:`measurement_view`). 3xtf32 rows compare with the fp32 peers
    (same accuracy class)."""
    import pandas as pd
    bench = measured(gpu=gpu)
    if bench is None:
        return None
    kb = at_presets(bench, mode)
    rows = []
    for problem in PROBLEMS:
        for precision in precisions:
            mine = kb[(kb.problem == problem) & (kb.impl == stage) & (kb.precision == precision)]
            peers = kb[(kb.problem == problem) & (kb.precision == _peer_precision(precision))].set_index("impl").median_ms
            row = {"problem": problem, "precision": precision,
                   "predicted ms": prediction(stage, problem, None, mode, precision, gpu)[1],
                   f"{stage} ms": float(mine.median_ms.iloc[0]) if len(mine) else float("nan"),
                   "rel_err": float(mine.rel_err.iloc[0]) if len(mine) else float("nan")}
            for peer in PEERS:
                row[f"{peer} ms"] = float(peers[peer]) if peer in peers else float("nan")
            rows.append(row)
    return pd.DataFrame(rows) if rows else None


#: What a measurement table or sentence shows for a combination the committed run did not time.
NOT_MEASURED = "not measured yet"


def measurement_view(table):
    """:func:`measurement_table` for display: times rounded to 4 decimals, the relative error
    in scientific notation, :data:`NOT_MEASURED` where the committed run has no number."""
    out = table.copy().astype(object)
    for col in table.columns:
        if col in ("problem", "precision"):
            continue
        fmt = "{:.1e}" if col == "rel_err" else "{:.4f}"
        out[col] = [fmt.format(v) if v == v else NOT_MEASURED for v in table[col]]
    return out


def _versus(other: float, t: float) -> str:
    """"1.23× faster" or "1.23× slower": time ``t`` against the time ``other``."""
    return f"{other / t:.2f}× faster" if other >= t else f"{t / other:.2f}× slower"


def measurement_md(stage: str, precisions=("fp32",), mode: str = "train", gpu: str = RESULTS_GPU) -> str:
    """Sentences (Markdown) about ``stage``'s committed timings: against the prediction, the
    previous stage at the same precision, eager PyTorch, torch.compile and the GEMM alone. All
    numbers from bench.csv."""
    from ..algebra import STAGES
    table = measurement_table(stage, precisions, mode, gpu)
    if table is None:
        return f"*{NO_RESULTS} (results/{gpu}/bench.csv): the prediction above stands alone.*"
    bench = at_presets(measured(gpu=gpu), mode)
    previous = STAGES[STAGES.index(stage) - 1] if stage in STAGES and STAGES.index(stage) > 0 else None
    lines = []
    for d in table.to_dict("records"):
        t = d[f"{stage} ms"]
        if t != t:  # NaN: not in the committed run
            lines.append(f"- **{d['problem']}**, {d['precision']}: {NOT_MEASURED} ({d['predicted ms']:.3f} ms "
                         "predicted).")
            continue
        parts = [f"**{d['problem']}**, {d['precision']}: **{t:.3f} ms** measured, {d['predicted ms']:.3f} ms "
                 f"predicted ({t / d['predicted ms']:.2f}× the prediction)"]
        if previous is not None:
            prev = bench[(bench.problem == d["problem"]) & (bench.impl == previous)
                         & (bench.precision == d["precision"])]  # every stage runs every precision
            if len(prev):
                parts.append(f"{_versus(float(prev.median_ms.iloc[0]), t)} than `{previous}`")
        for peer, label in (("eager", "eager PyTorch"), ("compile", "torch.compile")):
            pt = d.get(f"{peer} ms")
            if pt == pt and pt is not None:  # not NaN
                parts.append(f"{_versus(pt, t)} than {label} ({pt:.3f} ms)")
        g = d.get("gemm_only ms")
        if g == g and g is not None:
            parts.append(f"{t / g:.2f}× the time of the {_peer_precision(d['precision'])} GEMM alone ({g:.3f} ms)")
        parts.append(f"relative error {d['rel_err']:.1e}")
        lines.append("- " + "; ".join(parts) + ".")
    head = (f"Committed run on the {bench.gpu.iloc[0]} ({mode} mode, KernelBench shapes; 3xtf32 is compared "
            f"with the fp32 peers):" if len(bench) and "gpu" in bench else "Committed run:")
    return head + "\n\n" + "\n".join(lines)


def measurement_ratios(stage: str, precisions=("fp32",), mode: str = "train", gpu: str = RESULTS_GPU):
    """:func:`measurement_md`'s comparisons as a table: one row per problem and precision (the
    KernelBench shapes), ``<stage> ms`` (bench.csv's median) and that time over each other time,
    ``× predicted`` (the cost model's), ``× <previous stage>`` (the same precision), ``× eager``,
    ``× compile`` and ``× GEMM alone`` (3xtf32: the fp32 peers, the same accuracy class); below 1,
    ``stage`` is the faster. NaN where the run lacks a time; None without bench.csv."""
    table = measurement_table(stage, precisions, mode, gpu)
    if table is None:
        return None
    previous = _previous_stage(stage)
    kb = at_presets(measured(gpu=gpu), mode)
    t = table.set_index(["problem", "precision"])
    out = t[[f"{stage} ms"]].copy()
    out["× predicted"] = t[f"{stage} ms"] / t["predicted ms"]
    if previous is not None:
        prev = kb[kb.impl == previous].set_index(["problem", "precision"]).median_ms
        out[f"× {previous}"] = [t.loc[i, f"{stage} ms"] / prev[i] if i in prev.index else float("nan")
                                for i in t.index]
    for peer, label in (("eager", "eager"), ("compile", "compile"), ("gemm_only", "GEMM alone")):
        out[f"× {label}"] = t[f"{stage} ms"] / t[f"{peer} ms"]
    return out


def ladder_md(precisions=("fp32", "tf32", "3xtf32"), mode: str = "train", gpu: str = RESULTS_GPU) -> str:
    """The ladder in words (Markdown): for each problem at its KernelBench shape and each
    precision, the committed median of every stage in order (:data:`NOT_MEASURED` where the run
    has none), then eager PyTorch and the GEMM alone at the peers' precision (fp32 for 3xtf32).
    A line for a problem and precision without any stage row says so; without bench.csv, one
    sentence saying that."""
    from ..algebra import STAGES
    bench = measured(gpu=gpu)
    if bench is None:
        return f"*{NO_RESULTS} (results/{gpu}/bench.csv).*"
    kb = at_presets(bench, mode)
    lines = []
    for problem in PROBLEMS:
        for precision in precisions:
            mine = kb[(kb.problem == problem) & (kb.precision == precision)].set_index("impl").median_ms
            peer = _peer_precision(precision)
            peers = kb[(kb.problem == problem) & (kb.precision == peer)].set_index("impl").median_ms
            if not any(s in mine for s in STAGES):
                lines.append(f"- **{problem}**, {precision}: {NOT_MEASURED}.")
                continue
            steps = " → ".join(f"`{s}` {mine[s]:.3f}" if s in mine else f"`{s}` {NOT_MEASURED}" for s in STAGES)
            refs = [f"{label} {peer} {float(peers[impl]):.3f} ms" for impl, label in
                    (("eager", "eager"), ("gemm_only", "GEMM alone")) if impl in peers]
            lines.append(f"- **{problem}**, {precision}: {steps} ms" + (" (" + ", ".join(refs) + ")" if refs else "")
                         + ".")
    gpu_name = f" on the {bench.gpu.iloc[0]}" if "gpu" in bench and len(bench) else ""
    return f"Committed run{gpu_name}, {mode} mode, KernelBench shapes, median ms:\n\n" + "\n".join(lines)


def profile_table(stage: str, precisions=("fp32",), mode: str = "train", gpu: str = RESULTS_GPU):
    """Per-kernel device time of ``stage`` at the KernelBench shapes (its launches in one forward
    and their µs in one forward, share of the stage's total), from the committed profile.csv;
    None when absent or without rows."""
    prof = profile(gpu)
    if prof is None:
        return None
    from .bench import kernel_base
    from ..reference import PRESETS
    rows = []
    for problem in PROBLEMS:
        sel = prof[(prof.problem == problem) & (prof["shape"] == str(PRESETS[problem])) & (prof["mode"] == mode)
                   & (prof.impl == stage) & prof.precision.isin(list(precisions))]
        for precision, grp in sel.groupby("precision", sort=False):
            grp = grp.drop_duplicates("kernel", keep="last")
            total = grp.cuda_time_us_per_call.sum()
            for k in grp.itertuples(index=False):
                rows.append({"problem": problem, "precision": precision, "kernel": kernel_base(k.kernel),
                             "launches per forward": k.calls, "µs per forward": k.cuda_time_us_per_call,
                             "share": f"{k.cuda_time_us_per_call / total:.0%}" if total else "–"})
    if not rows:
        return None
    import pandas as pd
    return pd.DataFrame(rows)


def stage_roofline(stage: str, precisions=("fp32",), gpu: str = RESULTS_GPU):
    """Roofline panels (84, 33, 39 at their KernelBench shapes, train mode) with ``stage``'s
    measured points in colour, its predicted points hollow and every other implementation in
    grey; roofs from the measured ceilings in env.json. None without bench.csv or env.json."""
    bench, e = measured(gpu=gpu), env(gpu)
    if bench is None or e is None or "measured" not in e:
        return None
    import matplotlib.pyplot as plt
    import numpy as np

    from .costmodel import cost
    from ..reference import PRESETS, problem_kind
    ceil = ceilings(gpu)
    kb = at_presets(bench)
    colors = {"fp32": "tab:blue", "tf32": "tab:orange", "3xtf32": "tab:green"}
    fig, axes = plt.subplots(1, len(PROBLEMS), figsize=(15, 4.2), sharey=True)
    ai = np.logspace(1, 3.6, 200)
    top = ceil["tf32"] * 1.6
    for ax, problem in zip(axes, PROBLEMS):
        s = PRESETS[problem]
        ax.plot(ai, np.minimum(ai * ceil["bandwidth"] / 1e3, top), color="gray", lw=1,
                label=f"memory roof {ceil['bandwidth'] / 1e3:.2f} TB/s")
        for prec in ("fp32", "tf32"):
            ax.axhline(ceil[prec], color=colors[prec], lw=0.8, ls="--", label=f"{prec} GEMM roof {ceil[prec]:.0f} TFLOP/s")
        rows = kb[kb.problem == problem]
        for r in rows.itertuples(index=False):
            x = cost(problem_kind(problem), r.impl, s.batch, s.in_features, s.out_features, "train", r.precision).intensity
            if r.impl == stage and r.precision in precisions:
                ax.scatter([x], [r.tflops], s=45, color=colors[r.precision], zorder=4, edgecolor="black",
                           linewidth=0.5, label=f"{stage} {r.precision}, measured")
            elif r.impl == "gemm_only":
                ax.scatter([x], [r.tflops], s=30, marker="x", color=colors.get(r.precision, "gray"), zorder=3,
                           label=f"GEMM alone, {r.precision}")
            else:
                ax.scatter([x], [r.tflops], s=12, color="0.75", zorder=2)
        for prec in precisions:
            c = cost(problem_kind(problem), stage, s.batch, s.in_features, s.out_features, "train", prec)
            ms = prediction(stage, problem, None, "train", prec, gpu)[1]
            ax.scatter([c.intensity], [c.flops / (ms * 1e-3) / 1e12], s=70, facecolor="none",
                       edgecolor=colors[prec], zorder=3, label=f"{stage} {prec}, predicted")
        ax.set(xscale="log", yscale="log", xlim=(10, 10 ** 3.6), ylim=(5, top), title=f"problem {problem} @{s}",
               xlabel="arithmetic intensity (FLOP/byte, cost model)")
        ax.grid(True, which="major", lw=0.3)
    seen = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen), fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    axes[0].set_ylabel("TFLOP/s (cost-model FLOPs / median time)")
    fig.suptitle(f"Stage {stage} on the roofline: measured (filled), predicted (hollow), other stages and "
                 "peers (grey); train mode")
    fig.tight_layout()
    return fig


#: Nsight Compute metrics shown by :func:`ncu_table` (sections SpeedOfLight, LaunchStats, Occupancy).
NCU_SHOWN = ("Duration", "Grid Size", "Waves Per SM", "Registers Per Thread", "Theoretical Occupancy",
             "Compute (SM) Throughput", "DRAM Throughput", "L2 Hit Rate")


#: Rows added by :func:`ncu_table` with ``clocks=True``: the SM clock during the call (GHz) and
#: the cycles it took, which tell a slower clock from more work.
NCU_CLOCKS = ("SM Frequency", "Elapsed Cycles")


#: The Nsight Compute reports the course reads, by what each profiles (``ncu --csv --page details``,
#: one call each; the files under ``results/<gpu>/logs/``, where the notes say on which kernels
#: and when each was made).
NCU_REPORTS = {
    "tf32-84": "run10-ncu_84_tf32.csv",  # one fused forward (wgmma GEMM + row pass) and one F.linear, 84
    "tf32-39": "run10-ncu_39_tf32.csv",  # the same at 39's shape
    "simt-fp32": "run67-ncu-simt.csv",  # the SIMT fp32 GEMM (fold stage), 84's shape
    "cublas-fp32": "run67-ncu-sgemm.csv",  # cuBLAS's SGEMM, the same GEMM
    "wgmma-tf32": "run67-ncu-wgmma.csv",  # the fused stage's wgmma GEMM before the persistent kernel
    "cublas-tf32": "run67-ncu-tf32.csv",  # cuBLAS's TF32 GEMM with bias
    "persistent-tf32-clocks": "run141-ncu-tf32-fold.csv",  # the persistent tf32 GEMM, plain store, with clocks
    "cublas-tf32-clocks": "run141-ncu-tf32-cublas.csv",  # cuBLAS's TF32 GEMM, with clocks
}


def ncu_table(name: str, gpu: str = NOTES_GPU, clocks: bool = False):
    """One Nsight Compute report committed under ``results/<gpu>/logs/`` (``ncu --csv --page
    details``; ``name`` a key of :data:`NCU_REPORTS`, e.g. ``tf32-84``: one forward of the fused
    stage and one F.linear, or a file name there)
    as a table: rows :data:`NCU_SHOWN` (Duration in µs, throughputs and occupancy in % of peak),
    and with ``clocks`` also :data:`NCU_CLOCKS` (GHz, cycles), one column per kernel (name
    shortened), the one-block counter increment left out.

    Raises:
        FileNotFoundError: no such report.
    """
    import io

    import pandas as pd
    text = (results_dir(gpu) / "logs" / NCU_REPORTS.get(name, name)).read_text()
    df = pd.read_csv(io.StringIO(text[text.index('"ID"'):]), dtype=str)
    shown = NCU_SHOWN + (NCU_CLOCKS if clocks else ())
    df = df[df["Metric Name"].isin(shown) & ~df["Kernel Name"].str.contains("elementwise")].copy()
    df["Metric Value"] = pd.to_numeric(df["Metric Value"].str.replace(",", ""), errors="coerce")
    df["kernel"] = df["Kernel Name"].str.replace(r"^void ", "", regex=True).str.split("(").str[0].str.slice(0, 48)
    out = df.pivot_table(index="Metric Name", columns="kernel", values="Metric Value", aggfunc="first")
    out = out.reindex([m for m in shown if m in out.index])
    if "Duration" in out.index:  # ncu reports ns for these kernels
        unit = df.loc[df["Metric Name"] == "Duration", "Metric Unit"].iloc[0]
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[unit]
        out.loc["Duration"] = out.loc["Duration"] * scale
        out = out.rename(index={"Duration": "Duration (µs)"})
    return out


#: The tables curated from the engine's development notes (``results/<NOTES_GPU>/``; the folder's
#: README.md says where each was measured): name → what one row is.
CURATED = {
    "simt_versions": "one version of the SIMT mainloop: its tile (BM×BN×BK, TM×TN outputs a thread, "
                     "blocks an SM) and the naive stage's GEMM in ms at 84's and 39's KernelBench shapes",
    "mainloop_versions": "one version of the tensor-core mainloop: its change, the prediction, how it was "
                         "timed, the fused train forward in ms and 3xTF32's relative error at 84",
    "gemm_energy": "one round of back-to-back calls of a tf32 GEMM: µs and mJ a call, the board's W, "
                   "the SM clock in MHz",
}


def curated(name: str, gpu: str = NOTES_GPU):
    """A table of :data:`CURATED` (``results/<gpu>/<name>.csv``, e.g. ``mainloop_versions``) as a
    DataFrame, or None when it is not committed. Units are in the column names (``ms_84``: ms at
    84's KernelBench shape; ``time_us``, ``energy_mj``, ``power_w``, ``sm_clock_mhz``).

    Raises:
        KeyError: ``name`` is not a curated table.
    """
    import pandas as pd
    if name not in CURATED:
        raise KeyError(f"name: expected one of {sorted(CURATED)}, got {name!r}")
    path = results_dir(gpu) / f"{name}.csv"
    return pd.read_csv(path).convert_dtypes() if path.exists() else None  # (integers with gaps stay integers)


#: The columns of :func:`versions` that hold the fused train forward's time in ms, by
#: (problem, precision).
VERSION_COLUMNS = {("84", "tf32"): "ms_84_tf32", ("84", "3xtf32"): "ms_84_3xtf32",
                   ("39", "tf32"): "ms_39_tf32", ("39", "3xtf32"): "ms_39_3xtf32"}


def versions(gpu: str = NOTES_GPU):
    """The versions of the tensor-core mainloop (:func:`curated` ``mainloop_versions``): columns
    ``version``, ``change``, ``prediction``, ``timed`` (how the times were taken: the forward
    with the L2 flushed before each call, back to back, the GEMM kernel alone, or the benchmark
    harness), the fused train forward in ms at each problem's KernelBench shape
    (:data:`VERSION_COLUMNS`; NaN where only the GEMM kernel was timed: ``gemm_us_84_*``), and
    3xTF32's normwise relative error at 84 (``rel_err_3xtf32_84``, ``rel_err_note``). The times
    come from different days and methods: compare them as a ladder, not to the last digit.
    None when the table is not committed."""
    return curated("mainloop_versions", gpu)


def versions_plot(gpu: str = NOTES_GPU):
    """Figure of :func:`versions`, siboehm's SGEMM ladder for this mainloop: the fused train
    forward's ms at each version, 84 and 39 side by side, tf32 and 3xtf32, against cuBLAS's
    TF32 GEMM alone (``gemm_only`` tf32 in the committed bench.csv, where measured) and three
    of it — what 3xTF32's three products cost at cuBLAS's rate. None without the table."""
    table = versions(gpu)
    if table is None:
        return None
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from ..reference import PRESETS
    bench = measured(gpu=gpu)
    kb = at_presets(bench) if bench is not None else None
    colors = {"tf32": "tab:orange", "3xtf32": "tab:green"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    x = range(len(table))
    for ax, problem in zip(axes, ("84", "39")):
        for prec, color in colors.items():
            ax.plot(x, table[VERSION_COLUMNS[problem, prec]], marker="o", color=color, label=f"fused, {prec}")
        gemm = None if kb is None else kb.query("problem == @problem and impl == 'gemm_only' and precision == 'tf32'")
        if gemm is not None and len(gemm):
            t = float(gemm.median_ms.iloc[0])
            ax.axhline(t, color=colors["tf32"], ls="--", lw=0.8, label=f"cuBLAS TF32 GEMM alone {t:.3f} ms")
            ax.axhline(3 * t, color=colors["3xtf32"], ls="--", lw=0.8, label=f"three of it {3 * t:.3f} ms")
        ax.set(xticks=list(x), xticklabels=table.version, yscale="log", ylabel="fused train forward (ms)",
               title=f"problem {problem} @{PRESETS[problem]}")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(f"The tensor-core mainloop, design by design (results/{gpu}/mainloop_versions.csv)", fontsize=10)
    fig.tight_layout()
    return fig


def ncu_versus(ours: str, theirs: str, gpu: str = NOTES_GPU, clocks: bool = False):
    """Two single-kernel Nsight Compute reports of ``results/<gpu>/logs/`` side by side
    (:func:`ncu_table` of each, ``clocks`` passed on: ``ours`` first, e.g. ``simt-fp32`` against
    cuBLAS's ``cublas-fp32``) and the time ratio ours / theirs, or (None, None) when absent."""
    import pandas as pd
    try:
        a, b = ncu_table(ours, gpu, clocks), ncu_table(theirs, gpu, clocks)
    except FileNotFoundError:
        return None, None
    table = pd.concat([a, b], axis=1)
    return table, float(a.loc["Duration (µs)"].iloc[0] / b.loc["Duration (µs)"].iloc[0])


def train_steps(gpu: str = RESULTS_GPU):
    """The committed train_step.csv (``python -m fusedlib train-step``) as a DataFrame, or None."""
    import pandas as pd
    path = results_dir(gpu) / "train_step.csv"
    return pd.read_csv(path, dtype={"problem": str}) if path.exists() else None


#: The train steps' float32 precisions, which the backward's cost model predicts
#: (:func:`train_step_summary`), and the 16-bit ones: the module in bf16/fp16, and the float32
#: module under autocast to bf16 (``python -m fusedlib train-step --precision 16bit,autocast-bf16``:
#: :data:`fusedlib.lab.trainstep.PRECISIONS` less the float32 ones).
FLOAT32_STEPS, SIXTEEN_STEPS = PRECISIONS, PRECISIONS_16 + ("autocast-bf16",)


def train_step_table(gpu: str = RESULTS_GPU, precisions=None):
    """One row per problem and precision (those of ``precisions``, default all): each
    implementation's train step (forward + backward, median ms), the fused stage against eager
    PyTorch (3xtf32: eager fp32, the same accuracy class) and torch.compile (×: their time /
    fused time), where the file holds ``device_ms`` (``--hold-us``) the same against eager with
    the GPU's times alone (``eager / fused, device``), the fused step's peak memory beside eager's
    (MiB) and the largest gradient error of fused and eager (normwise, against float64). A one-row note (:data:`NO_RESULTS`) without a
    committed file, or without rows of ``precisions``."""
    import pandas as pd
    df = train_steps(gpu)
    if df is not None and precisions is not None:
        df = df[df.precision.isin(list(precisions))]
    if df is None or df.empty:
        return pd.DataFrame([{"train step": NO_RESULTS}])
    rows = []
    for (problem, precision), g in df.groupby(["problem", "precision"], sort=False):
        own = g.set_index("impl")
        peer = df[(df.problem == problem) & (df.precision == _peer_precision(precision))].set_index("impl")
        f = own.loc["fused"]
        row = {"problem": problem, "precision": precision}
        row.update({f"{i} ms": round(own.median_ms[i], 3) for i in ("naive", "fold", "sums", "fused") if i in own.index})
        for i in ("eager", "compile"):
            row[f"{i} ms"] = round(peer.median_ms[i], 3) if i in peer.index else None
        for i in ("eager", "compile"):
            row[f"{i} / fused"] = f"{peer.median_ms[i] / f.median_ms:.2f}×" if i in peer.index else ""
        has_eager = "eager" in peer.index
        if "device_ms" in df and df.device_ms.notna().any():  # (--hold-us: the GPU's time alone)
            held = has_eager and f.device_ms == f.device_ms and peer.device_ms["eager"] == peer.device_ms["eager"]
            row["eager / fused, device"] = f"{peer.device_ms['eager'] / f.device_ms:.2f}×" if held else ""
        row["peak MiB fused / eager"] = f"{f.peak_mib:.0f}" + (f" / {peer.peak_mib['eager']:.0f}" if has_eager else "")
        row["grad err fused / eager"] = f"{f.grad_rel_err:.1e}" + (f" / {peer.grad_rel_err['eager']:.1e}"
                                                                     if has_eager else "")
        rows.append(row)
    return pd.DataFrame(rows)


#: The GEMM paths and variants the GPU validation forces in turn (tests/test_gpu.py), as its records
#: name them in their ``path`` column and the sanitizer's runs.
PATH_LABELS = {
    "auto": "each precision's default path on the GPU at hand",
    "wgmma": "the Hopper mainloop, TMA and wgmma, tf32's and 3xtf32's default on an H100 or H200",
    "mma": "the Ampere mainloop, mma.sync, which older GPUs run",
    "simt": "the CUDA-core mainloop, fp32's default",
    "simt-128x64": "the SIMT GEMM's small tile, which GPUs with 64 KB of shared memory a block run",
    "wgmma-splitk3": "the wgmma GEMM with K split over 3 blocks, split-K",
    "wgmma-splitk2": "the wgmma GEMM with K split over 2 blocks at 84's KernelBench shape",
    "simt-splitk3": "the SIMT GEMM with K split over 3 blocks",
    "wgmma-wpass": "3xTF32 with W's parts made by a pass over W",
    "wgmma-wsmem": "3xTF32 with W split in shared memory",
    "wgmma-swap": "3xTF32's swapped GEMM, $Z^\\top = WX^\\top$",
    "wgmma-wide": "the tf32 GEMM's 128 × 256 tile, forced where the 128 × 64 one is the default",
    "wgmma-narrow": "the tf32 GEMM's 128 × 64 tile, forced where the 128 × 256 one is the default",
}


def path_legend(paths) -> str:
    """``label`` (description) for each of ``paths`` (validation records' path labels) in
    :data:`PATH_LABELS` order, as one Markdown sentence; an unknown label is shown as it is."""
    known = [p for p in PATH_LABELS if p in set(paths)] + sorted(set(paths) - set(PATH_LABELS))
    return "Paths: " + "; ".join(f"`{p}`" + (f": {PATH_LABELS[p]}" if p in PATH_LABELS else "") for p in known) + "."


def _validation(gpu: str) -> dict | None:
    """The committed GPU validation record (``results/<gpu>/validation.json``), or None."""
    path = results_dir(gpu) / "validation.json"
    return json.loads(path.read_text()) if path.exists() else None


def _stage_cases(record: dict, stage: str):
    import pandas as pd
    v = pd.DataFrame(record["cases"])
    return v[v.stage == stage]


def validation_cases(stage: str, gpu: str = RESULTS_GPU):
    """The committed GPU validation's forward cases of one stage (``validation.json`` ``cases``,
    check.run_case's records) as a DataFrame; None without a committed record."""
    record = _validation(gpu)
    return None if record is None else _stage_cases(record, stage)


def stage_validation(stage: str, gpu: str = RESULTS_GPU):
    """The committed GPU validation (``validation.json``, tests/test_gpu.py) of one stage's
    forward cases: a Markdown summary (cases passed, each failing case with its error and
    budget, the bit-identity checks by kind, the sanitizer's runs) and a DataFrame of cases,
    passed and the largest relative error per precision and GEMM path, with what the path runs
    (:data:`PATH_LABELS`).
    Without a committed record: (:data:`NO_RESULTS`, None)."""
    import pandas as pd
    record = _validation(gpu)
    if record is None:
        return NO_RESULTS, None
    v = _stage_cases(record, stage)
    lines = [f"Stage `{stage}` on the {record['environment']['gpu']}: **{int(v.passed.sum())} of {len(v)} cases "
             f"pass** (input kinds: {', '.join(sorted(v.input_kind.unique()))})."]
    for r in v[~v.passed].itertuples(index=False):
        lines.append(f"Failing: problem {r.problem} {r.mode} {r.precision} at {r.shape}, {r.input_kind} input, seed "
                     f"{r.seed}: error {r.rel_err:.1e} against a budget of {r.budget:.0e} (PyTorch's own fp32 module: "
                     f"{r.ref_fp32_rel_err:.1e}).")
    det = pd.DataFrame([d for d in record.get("determinism", []) if d["stage"] == stage])
    if len(det):
        kinds = det.groupby("pass", sort=False).bit_identical.agg(["size", "all"])
        names = {"forward": "forward reruns", "backward": "backward reruns",
                 "grid 1, 7, SMs": "persistent grids of 1, 7 and one CTA an SM",
                 "W split in smem, by the pass": "3xTF32's W split in shared memory and by a pass",
                 "tile widths 256, 64": "the tf32 GEMM's two tile widths"}
        lines.append(f"Bit-identical outputs and running buffers: {'every' if kinds['all'].all() else '**not every**'} "
                     "check of " + ", ".join(f"{names.get(kind, kind)} ({row['size']}"
                                             + ("" if row["all"] else ", **some differ**") + ")"
                                             for kind, row in kinds.iterrows()) + ".")
    san = [s for s in record.get("sanitizer", []) if s["stage"] == stage]
    if san:
        what = ("compute-sanitizer (NVIDIA's checker of a running kernel: memcheck finds out-of-bounds and "
                "misaligned accesses, racecheck races on shared memory): ")
        if any(s["errors"] for s in san):
            lines.append(what + ", ".join(f"{s['tool']} ({s.get('path', 'auto')} path) {s['errors']} errors"
                                          for s in san) + ".")
        else:
            tools = " and ".join(dict.fromkeys(s["tool"] for s in san))
            paths = ", ".join(f"`{p}`" for p in dict.fromkeys(s.get("path", "auto") for s in san))
            lines.append(what + f"{tools} on the paths {paths}: no error"
                         + (f" (`auto`: {PATH_LABELS['auto']})." if "`auto`" in paths else "."))
    table = v.groupby(["precision", "path"]).agg(cases=("passed", "size"), passed=("passed", "sum"),
                                                 max_rel_err=("rel_err", "max"))
    paths = table.index.get_level_values("path")
    return "\n\n".join(lines), table.assign(max_rel_err=table.max_rel_err.map("{:.1e}".format),
                                             what_the_path_runs=[PATH_LABELS.get(p, "") for p in paths])


def gradient_validation(gpu: str = RESULTS_GPU):
    """The committed GPU validation's gradient cases (tests/test_gpu.py, check.run_grad_case)
    per precision and mode: cases, passed, and the largest error / budget ratio; a one-row
    note (:data:`NO_RESULTS`) without a committed record."""
    import pandas as pd
    cases = (_validation(gpu) or {}).get("gradients")
    if not cases:
        return pd.DataFrame([{"gradient cases": NO_RESULTS}])
    df = pd.DataFrame(cases)
    out = df.groupby(["precision", "mode"], sort=False).agg(cases=("passed", "size"), passed=("passed", "sum"),
                                                            worst_ratio=("worst_ratio", "max")).reset_index()
    out["worst_ratio"] = out.worst_ratio.map("{:.2f}".format)
    return out


def errors_table(cases):
    """The numbers of check.run_case records as a small DataFrame (errors in scientific notation)."""
    import pandas as pd
    df = pd.DataFrame(cases)
    cols = ["problem", "mode", "precision", "shape", "input_kind", "max_abs_err", "rel_err", "buffer_rel_err",
            "ref_fp32_rel_err", "budget", "passed"]
    df = df[[c for c in cols if c in df.columns]].copy()
    for c in ("max_abs_err", "rel_err", "buffer_rel_err", "ref_fp32_rel_err", "budget"):
        if c in df:
            df[c] = df[c].map("{:.1e}".format)
    return df


def cancellation_lab(ratios=(1, 3, 10, 30, 100, 300, 1000, 3000, 10000), rows: int = 4096, cols: int = 64,
                     tile_rows: int = 64, seed: int = 0):
    """Relative error of the float32 column variance against the exact variance of the same
    float32 numbers, for columns with |mean|/std = ratio: the textbook Σz/Σz² one pass
    (algebra.column_stats_textbook) against Chan-merged tile partials
    (algebra.column_stats_chan). Returns a DataFrame (|mean|/std, method, max relative error)."""
    import pandas as pd
    import torch

    from .. import algebra
    g = torch.Generator().manual_seed(seed)
    out = []
    for ratio in ratios:
        z = (ratio + torch.randn(rows, cols, generator=g, dtype=torch.float64)).float()
        _, exact = algebra.column_stats_two_pass(z.double())
        for name, fn in (("textbook Σz, Σz²", algebra.column_stats_textbook), ("Chan merge", algebra.column_stats_chan)):
            _, v = fn(z, tile_rows)
            out.append({"|mean|/std": ratio, "method": name,
                        "max relative error": ((v.double() - exact).abs() / exact).max().item()})
    return pd.DataFrame(out)


def _to_float32(s, rounding: str):
    """float64 array -> float32, rounded to nearest or toward zero."""
    import numpy as np
    f = s.astype(np.float32)
    if rounding == "toward_zero":
        over = np.abs(f.astype(np.float64)) > np.abs(s)
        f[over] = np.nextafter(f[over], np.float32(0))
    elif rounding != "nearest":
        raise ValueError(f"rounding: expected 'nearest' or 'toward_zero', got {rounding!r}")
    return f


def ffma_chain_matmul(x, w, step: int | None = None, rounding: str = "nearest"):
    """Z = X Wᵀ (N×K, M×K float32 → N×M float32) summed over K the way one thread of a tile
    GEMM sums it: a chain of fused multiply-adds, one rounding to float32 per product.

    Args:
        step: None, one chain over K; else two-level accumulation: the products of each K
            step of ``step`` are summed into a fresh partial (``rounding``), which is then
            added to the accumulator with round-to-nearest (a CUDA-core FADD) — the SIMT tile's
            per-K-step partials, or the 3xTF32 kernel's promotion windows.
        rounding: "nearest" (FFMA) or "toward_zero": a model of the tensor cores' fp32
            accumulation, which truncates (the real datapath aligns and truncates the
            significands; this rounds each sum toward zero).

    Emulated with float64 arithmetic (a float32 product is exact in float64) rounded to
    float32 after every addition; with "nearest" this can differ from a hardware FMA by
    double rounding, rarely and in the last bit.
    """
    import numpy as np
    import torch

    xs, ws = x.double().numpy(), w.double().numpy()
    acc = np.zeros((xs.shape[0], ws.shape[0]), np.float32)
    part = np.zeros_like(acc)
    k_total = xs.shape[1]
    for k in range(k_total):
        prod = np.outer(xs[:, k], ws[:, k])
        if step is None:
            acc = _to_float32(acc.astype(np.float64) + prod, rounding)
            continue
        part = _to_float32(prod if k % step == 0 else part.astype(np.float64) + prod, rounding)
        if (k + 1) % step == 0 or k == k_total - 1:
            acc = (acc.astype(np.float64) + part.astype(np.float64)).astype(np.float32)
    return torch.from_numpy(acc)


def accumulation_lab(ks=(256, 512, 1024, 2048, 4096, 8192), rows: int = 32, cols: int = 32, window: int = 128,
                     seed: int = 0):
    """Normwise relative error of Z = X Wᵀ against float64 as K grows, for three ways of
    accumulating (:func:`ffma_chain_matmul`): round to nearest (an FFMA chain), truncating (the
    tensor-core model) and truncating with promotion every ``window`` products. X uniform in
    [0, 1) like KernelBench's inputs, W uniform in ±1/√K like nn.Linear's initialisation.
    Returns a DataFrame: K, accumulation, rel_err."""
    import pandas as pd
    import torch
    g = torch.Generator().manual_seed(seed)
    rows_out = []
    for k in ks:
        x = torch.rand(rows, k, generator=g)
        w = (2 * torch.rand(cols, k, generator=g) - 1) / k ** 0.5
        exact = x.double() @ w.double().T
        for name, step, rounding in (("round to nearest (FFMA chain)", None, "nearest"),
                                     ("truncating (tensor-core model)", None, "toward_zero"),
                                     (f"truncating, promoted every {window}", window, "toward_zero")):
            z = ffma_chain_matmul(x, w, step, rounding).double()
            rows_out.append({"K": k, "accumulation": name,
                             "rel_err": ((z - exact).norm() / exact.norm()).item()})
    return pd.DataFrame(rows_out)


def _offset_case(problem: str, sh, seed: int):
    """check.run_case's train-mode sequence for ``offset`` inputs on the CPU: the case's
    model, its K permutation (run_case's first draw) and its third input. Returns
    (ref, ref64, perm, x, y32, y64)."""
    import copy

    import torch

    from ..check import case_model
    from ..reference import get_inputs
    ref, gen = case_model(problem, sh, seed)
    ref64 = copy.deepcopy(ref).double()
    perm = torch.randperm(sh.in_features, generator=gen)
    for _ in range(3):
        x = get_inputs(sh, "offset", gen)
        with torch.no_grad():
            y32, y64 = ref(x), ref64(x.double())
    return ref, ref64, perm, x, y32, y64


def _emulated_output(kind: str, ref, ref64, x, step):
    """The train-mode output when Z' = XWᵀ is summed by :func:`ffma_chain_matmul` (``step``)
    and everything after the GEMM is computed in float64 from ref64's BatchNorm state."""
    import torch

    from .. import algebra
    bn = ref64.bn
    state = algebra.BNState(bn.weight.detach(), bn.bias.detach(), bn.running_mean.clone(),
                            bn.running_var.clone(), bn.num_batches_tracked.clone(), bn.momentum, bn.eps)
    z = ffma_chain_matmul(x, ref.gemm.weight.detach(), step).double()
    mean, var = algebra.column_stats_two_pass(z)
    a, c = algebra.train_coefficients(kind, mean, var, state, ref64.scale.detach())
    v = a * z + c
    return torch.softmax(v, dim=1) if kind == "84" else v


def summation_order_lab(problem: str = "84", shapes=("2x64->3", "7x33->65", "257x1000->99"), seeds=range(12),
                        steps=(None, 16, 8)):
    """Error of problem ``problem``'s train-mode output (third step of check.run_case's
    sequence, ``offset`` inputs) when Z' = XWᵀ is summed as one FFMA chain over K or with
    two-level accumulation (:func:`ffma_chain_matmul`), everything after the GEMM in float64,
    against the float64 model; PyTorch's fp32 module beside it. Returns a DataFrame: shape,
    seed, summation ("one FFMA chain", "two-level, step 16", ..., "PyTorch fp32"), rel_err
    (normwise)."""
    import pandas as pd

    from ..check import _relerr
    from ..reference import parse_shape, problem_kind
    kind = problem_kind(problem)
    rows = []
    for shape in shapes:
        sh = parse_shape(shape)
        for seed in seeds:
            ref, ref64, _, x, y32, y64 = _offset_case(problem, sh, seed)
            rows.append({"shape": shape, "seed": seed, "summation": "PyTorch fp32", "rel_err": _relerr(y32, y64)})
            for step in steps:
                name = "one FFMA chain" if step is None else f"two-level, step {step}"
                rows.append({"shape": shape, "seed": seed, "summation": name,
                             "rel_err": _relerr(_emulated_output(kind, ref, ref64, x, step), y64)})
    return pd.DataFrame(rows)


def pass_rule_lab(problem: str = "33", shape: str = "2x64->3", seeds=range(100), step: int = 16):
    """How often does the validation's per-case rule (:func:`fusedlib.check.run_case`: error
    ≤ max(1e-5, 2 × the worse of PyTorch fp32's errors in two K orders)) fail an fp32 result
    that is as good as PyTorch's own? For each seed of ``offset`` inputs (the inputs and the
    K permutation of check.run_case's train-mode sequence), on the CPU:

    * ``noise``: the rule's noise estimate (PyTorch fp32 in the natural and the permuted K order);
    * ``pytorch_third``: PyTorch fp32 summed in a third K order (another permutation);
    * ``two_level``: the SIMT kernel's sum over X itself (:func:`ffma_chain_matmul` with ``step``; in
      train mode the kernels now sum over X shifted by its first row, :func:`fusedlib.algebra.train_gemm`);
    * ``one_chain``: one FFMA chain over K;

    each as the normwise relative error of the train-mode output against float64 (everything
    after the GEMM in float64 for the two emulated sums). Returns a DataFrame with one row per
    seed and the boolean columns ``<name>_fails`` (error above the rule's budget)."""
    import pandas as pd
    import torch

    from ..check import _relerr, case_budget, in_k_order
    from ..reference import parse_shape, problem_kind
    kind, sh = problem_kind(problem), parse_shape(shape)
    rows = []
    for seed in seeds:
        ref, ref64, perm, x, y32, y64 = _offset_case(problem, sh, seed)
        third = torch.randperm(sh.in_features, generator=torch.Generator().manual_seed(10_000 + seed))
        row = {"seed": seed, "noise": max(_relerr(y32, y64), _relerr(in_k_order(ref, x, perm), y64)),
               "pytorch_third": _relerr(in_k_order(ref, x, third), y64)}
        for name, st in (("two_level", step), ("one_chain", None)):
            row[name] = _relerr(_emulated_output(kind, ref, ref64, x, st), y64)
        budget = case_budget("fp32", row["noise"])
        for name in ("pytorch_third", "two_level", "one_chain"):
            row[name + "_fails"] = row[name] > budget
        rows.append(row)
    return pd.DataFrame(rows)


def show_figure(fig, alt: str) -> None:
    """Display a matplotlib Figure in a notebook as a PNG carrying ``alt`` (alt text: what the
    picture shows, for screen readers and slides), then close it.

    Raises:
        ValueError: ``alt`` is empty.
    """
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    if not alt.strip():
        raise ValueError("alt: expected a sentence saying what the figure shows, got an empty string")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", dpi=110)
    plt.close(fig)
    display(Image(data=buf.getvalue(), format="png", alt=alt))


# ---------------------------------------------------------------- notebooks 00–02: take-aways
def pct_saved(before: float, after: float) -> float:
    """The % of ``before``'s time that ``after`` saves, 100·(before − after)/before (negative:
    slower): the one formula of every "% saved" the course shows."""
    return 100 * (before - after) / before


def preset_times(mode: str = "train", gpu: str = RESULTS_GPU):
    """Median ms of one run of the committed bench.csv (:func:`fusedlib.lab.figures.one_run`)
    at each problem's KernelBench shape, as a function ``ms(problem, impl, precision)`` (NaN
    where the run has no row), or None without bench.csv: what every savings table reads."""
    from .figures import one_run
    bench = measured(gpu=gpu)
    if bench is None:
        return None
    kb = at_presets(one_run(bench), mode)
    times = {(r.problem, r.impl, r.precision): float(r.median_ms) for r in kb.itertuples()}
    return lambda problem, impl, precision: times.get((problem, impl, precision), float("nan"))


def _previous_stage(stage: str) -> str | None:
    from ..algebra import STAGES
    return STAGES[STAGES.index(stage) - 1] if stage in STAGES and STAGES.index(stage) > 0 else None


def stage_savings(stage: str, precisions=("fp32",), mode: str = "train", gpu: str = RESULTS_GPU):
    """What ``stage`` saves, from one run of the committed bench.csv at the KernelBench shapes
    (:func:`preset_times`): one row per problem and precision with the stage's median ms, the
    previous stage's (same precision) and eager PyTorch's (its precision: fp32 for 3xtf32), and
    the % of their time the stage saves (:func:`pct_saved`; negative: the stage is slower).
    NaN where the run has no row; no previous-stage columns for the first stage. None without
    bench.csv."""
    import pandas as pd
    ms = preset_times(mode, gpu)
    if ms is None:
        return None
    previous = _previous_stage(stage)
    rows = []
    for problem in PROBLEMS:
        for precision in precisions:
            t = ms(problem, stage, precision)
            row = {"problem": problem, "precision": precision, f"{stage} ms": t}
            if previous is not None:
                p = ms(problem, previous, precision)
                row.update({f"{previous} ms": p, f"% saved vs {previous}": pct_saved(p, t)})
            e = ms(problem, "eager", _peer_precision(precision))
            row.update({"eager ms": e, "% saved vs eager": pct_saved(e, t)})
            rows.append(row)
    return pd.DataFrame(rows)


def gemm_share(stage: str, precisions=("fp32",), mode: str = "train", gpu: str = RESULTS_GPU):
    """Where ``stage``'s device time goes, from the committed profile.csv at the KernelBench
    shapes: one row per problem and precision with the µs per call of the GEMM kernels (names
    containing "gemm"), of 3xTF32's operand-split pass before it (``x_parts_kernel``,
    ``w_parts_kernel``: names containing "parts"; 0 where there is none), of all kernels after
    the GEMM, and the % of the total spent after the GEMM: the kernels a later stage can remove,
    so the most it can save (no later stage removes the GEMM or the parts pass). None without
    profile.csv or rows for the stage."""
    table = profile_table(stage, precisions, mode, gpu)
    if table is None:
        return None
    group = table.kernel.map(lambda k: "GEMM µs" if "gemm" in k else "3xTF32 parts µs" if "parts" in k
                             else "after the GEMM µs")
    out = (table.assign(group=group).pivot_table(index=["problem", "precision"], columns="group",
                                                  values="µs per forward", aggfunc="sum", sort=False)
           .reindex(columns=["GEMM µs", "3xTF32 parts µs", "after the GEMM µs"]).fillna(0.0))
    out.columns.name = None
    out["% after the GEMM"] = 100 * out["after the GEMM µs"] / out.sum(axis=1)
    return out.reset_index()


#: An experiment ID of the lab's history ("run80"), which the course's listings leave out.
RUN_ID = r"\brun\d+\b"


def without_history(listing: str) -> str:
    """A kernel listing (:func:`kernel_source`) without the lab's history in its comments: a
    parenthesis naming an experiment ID (``(variants timed: run59–run61)``) is removed; a
    ``//`` comment still naming one, or NOTES.md, or left empty, is removed whole, and so is a
    line left empty by that. Code is never changed."""
    import re
    out = []
    for line in listing.splitlines():
        at = line.find("//")
        if at < 0 or not re.search(RUN_ID + r"|NOTES\.md", line[at:]):
            out.append(line)
            continue
        comment = re.sub(r"\s*\([^()]*" + RUN_ID + r"[^()]*\)", "", line[at:])
        if re.search(RUN_ID + r"|NOTES\.md", comment) or comment.strip() == "//":  # (nothing left of it)
            comment = ""
        code = line[:at].rstrip()
        if code or comment:
            out.append((line[:at] + comment).rstrip() if comment else code)
    return "\n".join(out)


# ------------------------------------------------------------------ notebooks 03–04 (fold, sums)
# The step a stage takes over the one before it, measured (one run of bench.csv) and predicted.

def step_table(stage: str, precisions=("fp32", "tf32", "3xtf32"), mode: str = "train", gpu: str = RESULTS_GPU):
    """What ``stage`` saves over the stage before it (:data:`fusedlib.algebra.STAGES`), one row
    per problem (84, 33, 39 at their KernelBench shapes) and precision: the previous stage's
    and this stage's median ms from one run of bench.csv (:func:`preset_times`), the % of the
    previous time saved (:func:`pct_saved`; negative: the step costs time), and the % the cost
    model predicts (:func:`prediction`). NaN where the run lacks a row. None without bench.csv.

    Raises:
        ValueError: ``stage`` is the first stage (nothing before it).
    """
    import pandas as pd
    previous = _previous_stage(stage)
    if previous is None:
        raise ValueError(f"step_table: {stage!r} is the first stage; there is no step before it")
    ms = preset_times(mode, gpu)
    if ms is None:
        return None
    rows = []
    for problem in PROBLEMS:
        for precision in precisions:
            before, after = ms(problem, previous, precision), ms(problem, stage, precision)
            p0 = prediction(previous, problem, None, mode, precision, gpu)[1]
            p1 = prediction(stage, problem, None, mode, precision, gpu)[1]
            rows.append({"problem": problem, "precision": precision, f"{previous} ms": before, f"{stage} ms": after,
                         "% saved": pct_saved(before, after), "% saved predicted": pct_saved(p0, p1)})
    return pd.DataFrame(rows)


def step_md(stage: str, precisions=("fp32", "tf32", "3xtf32"), mode: str = "train", gpu: str = RESULTS_GPU) -> str:
    """:func:`step_table` in words (Markdown): one line per problem, the time and the % saved
    at each precision, measured and predicted; :data:`NO_RESULTS` without bench.csv."""
    table = step_table(stage, precisions, mode, gpu)
    if table is None:
        return f"*{NO_RESULTS} (results/{gpu}/bench.csv).*"
    previous = table.columns[2].removesuffix(" ms")
    lines = []
    for problem, grp in table.groupby("problem", sort=False):
        parts = []
        for r in grp.to_dict("records"):
            if r[f"{stage} ms"] != r[f"{stage} ms"] or r[f"{previous} ms"] != r[f"{previous} ms"]:
                parts.append(f"{r['precision']} {NOT_MEASURED}")
                continue
            verb = "saves" if r["% saved"] >= 0 else "costs"
            parts.append(f"{r['precision']} {r[f'{previous} ms']:.3f} → **{r[f'{stage} ms']:.3f} ms**, {verb} "
                         f"**{abs(r['% saved']):.1f} %** (predicted {r['% saved predicted']:.1f} %)")
        lines.append(f"- **{problem}**: " + "; ".join(parts) + ".")
    return (f"`{previous}` → `{stage}`, {mode} mode, KernelBench shapes, median ms of one run of bench.csv "
            "(% of the previous stage's time saved):\n\n" + "\n".join(lines))


# ---------------------------------------------------------------- notebooks 05–06 (fused stage,
# roofline and throughput) and the appendix on the GEMM engine


def fused_versus_sums(mode: str = "train", gpu: str = RESULTS_GPU):
    """What ``fused`` changes over ``sums``, kernel by kernel, at the KernelBench shapes: one
    row per problem and precision with the device time per call (µs, profile.csv) of sums'
    GEMM (ColumnStats epilogue), its finalize kernel and its row pass (3xTF32's operand-parts
    pass, the same in both stages, left out), fused's GEMM
    (ColumnStatsMerge epilogue: the merge inside the GEMM) and its row pass; ``merge cost µs``
    = fused GEMM − sums GEMM (what the merge adds to the GEMM), ``launch saved µs`` = sums'
    finalize; and both stages' medians (ms, bench.csv) with ``fused − sums µs``. None without
    profile.csv or bench.csv."""
    import pandas as pd

    from ..reference import PRESETS
    prof, bench = profile(gpu), measured(gpu=gpu)
    if prof is None or bench is None:
        return None
    kb = at_presets(bench, mode)
    rows = []
    for problem in PROBLEMS:
        for precision in ("fp32", "tf32", "3xtf32"):
            sel = prof[(prof.problem == problem) & (prof["shape"] == str(PRESETS[problem])) & (prof["mode"] == mode)
                       & (prof.precision == precision)].drop_duplicates(["impl", "kernel"], keep="last")

            def us(impl: str, gemm: bool) -> float:
                """The GEMM's µs, or the row pass's (neither the finalize nor 3xTF32's parts pass)."""
                k = sel[(sel.impl == impl) & (sel.kernel.str.contains("gemm") == gemm)]
                if not gemm:
                    k = k[~k.kernel.str.contains("finalize|parts_kernel")]
                return float(k.cuda_time_us_per_call.sum()) if len(k) else float("nan")

            fin = sel[(sel.impl == "sums") & sel.kernel.str.contains("finalize")].cuda_time_us_per_call.sum()
            ms = kb[(kb.problem == problem) & (kb.precision == precision)].set_index("impl").median_ms
            if "sums" not in ms or "fused" not in ms:
                continue
            row = {"problem": problem, "precision": precision, "sums GEMM µs": us("sums", True),
                   "sums finalize µs": float(fin), "fused GEMM µs": us("fused", True),
                   "sums row pass µs": us("sums", False), "fused row pass µs": us("fused", False),
                   "sums ms": float(ms["sums"]), "fused ms": float(ms["fused"])}
            row["merge cost µs"] = row["fused GEMM µs"] - row["sums GEMM µs"]
            row["launch saved µs"] = row["sums finalize µs"]
            row["fused − sums µs"] = 1e3 * (row["fused ms"] - row["sums ms"])
            rows.append(row)
    return pd.DataFrame(rows).set_index(["problem", "precision"]) if rows else None


def gemm_run_spread(precisions=("fp32", "tf32", "3xtf32"), mode: str = "train", gpu: str = RESULTS_GPU):
    """How much one GEMM kernel's time moves between two runs, from profile.csv: ``naive`` and
    ``fold`` run the same GEMM kernel (BiasStore epilogue, the same name) at the same shape, each
    in its own profiled run, so their two timings differ by noise alone. One row per (problem,
    precision, kernel) at the KernelBench shapes timed in both: ``naive`` and ``fold`` (µs per
    call) and ``spread %`` (max/min − 1). None without profile.csv or without such pairs.
    Read a difference between stages against its precision's largest spread
    (``.groupby(level="precision")["spread %"].max()``)."""
    from ..reference import PRESETS
    prof = profile(gpu)
    if prof is None:
        return None
    same = prof[(prof["mode"] == mode) & prof.impl.isin(["naive", "fold"]) & prof.precision.isin(list(precisions))
                & prof.kernel.str.contains("gemm") & (prof["shape"] == prof.problem.map(lambda p: str(PRESETS.get(p))))]
    pairs = same.pivot_table(index=["problem", "precision", "kernel"], columns="impl",
                             values="cuda_time_us_per_call", aggfunc="last")
    pairs = pairs.dropna() if {"naive", "fold"} <= set(pairs.columns) else pairs.iloc[0:0]
    if pairs.empty:
        return None
    pairs = pairs[["naive", "fold"]].copy()
    pairs["spread %"] = 100 * (pairs.max(axis=1) / pairs.min(axis=1) - 1)
    return pairs


def _profiled_kernels(prof, problem: str, impl: str, precision: str, mode: str):
    """The rows of profile.csv (a DataFrame, :func:`profile`) of ``impl``'s forward at ``problem``'s
    KernelBench shape in ``mode`` and ``precision``, the latest profile of each kernel (empty where
    it has none)."""
    from ..reference import PRESETS
    return prof[(prof.problem == problem) & (prof["shape"] == str(PRESETS[problem])) & (prof["mode"] == mode)
                & (prof.impl == impl) & (prof.precision == precision)].drop_duplicates("kernel", keep="last")


def _flush_us(gpu: str = RESULTS_GPU) -> float:
    """µs the L2 flush before each timed call keeps the GPU busy: FLUSH_MB written at the measured
    copy bandwidth (docs/design.md §6)."""
    from .timing import FLUSH_MB
    return FLUSH_MB * 2**20 / (ceilings(gpu)["bandwidth"] * 1e3)


def eval_versus_train(stage: str = "fused", precisions=("fp32", "tf32", "3xtf32"), gpu: str = RESULTS_GPU):
    """``stage``'s forward in eval mode against train mode at the KernelBench shapes, one row per
    problem and precision that bench.csv holds in both modes: the medians (``train ms``, ``eval
    ms``, bench.csv), ``% saved`` (:func:`pct_saved`; negative: eval is slower), the host time to
    enqueue each call (``train host µs``, ``eval host µs``), and from profile.csv, where it holds
    the row, the GEMM kernel's device time (``train GEMM µs``, ``eval GEMM µs``) and all of the
    forward's kernels' (``train kernels µs``, ``eval kernels µs``; NaN where the profile lacks
    them). None without bench.csv."""
    import pandas as pd
    bench = measured(gpu=gpu)
    if bench is None:
        return None
    prof = profile(gpu)
    rows = []
    for problem in PROBLEMS:
        for precision in precisions:
            row = {"problem": problem, "precision": precision}
            for mode in ("train", "eval"):
                b = at_presets(bench, mode)
                b = b[(b.problem == problem) & (b.impl == stage) & (b.precision == precision)]
                row[f"{mode} ms"] = float(b.median_ms.iloc[0]) if len(b) else float("nan")
                row[f"{mode} host µs"] = (float(b.host_us.iloc[0]) if len(b) and "host_us" in b else float("nan"))
                k = _profiled_kernels(prof, problem, stage, precision, mode) if prof is not None else None
                has = k is not None and len(k) > 0
                gemm = k.kernel.str.contains("gemm") if has else None
                row[f"{mode} GEMM µs"] = float(k.cuda_time_us_per_call[gemm].sum()) if has else float("nan")
                row[f"{mode} kernels µs"] = float(k.cuda_time_us_per_call.sum()) if has else float("nan")
            if row["train ms"] != row["train ms"] or row["eval ms"] != row["eval ms"]:
                continue
            row["% saved"] = pct_saved(row["train ms"], row["eval ms"])
            rows.append(row)
    if not rows:
        return None
    cols = ["train ms", "eval ms", "% saved", "train GEMM µs", "eval GEMM µs", "train kernels µs", "eval kernels µs",
            "train host µs", "eval host µs"]
    return pd.DataFrame(rows).set_index(["problem", "precision"])[cols]


def eval_slower_md(stage: str = "fused", precisions=("fp32", "tf32", "3xtf32"), gpu: str = RESULTS_GPU) -> str:
    """Where ``stage``'s eval-mode forward is slower than its train-mode one (bench.csv medians,
    :func:`eval_versus_train`), what the records say about each such case (Markdown), rendered
    from them: whether the eval GEMM kernel took longer in profile.csv than the train one, and
    whether by more than the same GEMM kernel moves between two runs in that precision
    (:func:`gemm_run_spread`); where it did not take longer, whether the forward's difference is
    within that spread, or else whether the eval call's host time outlasted the L2 flush before it
    (so that the GPU may have waited for the host, docs/design.md §6). One sentence where eval is
    nowhere slower; :data:`NO_RESULTS` without bench.csv."""
    t = eval_versus_train(stage, precisions, gpu)
    if t is None:
        return f"*{NO_RESULTS} (results/{gpu}/bench.csv).*"
    slower = t[t["% saved"] < 0]
    if slower.empty:
        return f"Eval mode is nowhere slower than train mode for `{stage}` in these records."
    pairs = gemm_run_spread(gpu=gpu)
    spread = pairs.groupby(level="precision")["spread %"].max() if pairs is not None else None
    flush = _flush_us(gpu)
    lines = []
    for (problem, precision), r in slower.iterrows():
        d = -r["% saved"]
        s = float(spread[precision]) if spread is not None and precision in spread.index else None
        head = f"- **{problem} in {precision}** ({r['train ms']:.3f} → {r['eval ms']:.3f} ms, {d:.1f} % slower): "
        if r["eval GEMM µs"] != r["eval GEMM µs"] or r["train GEMM µs"] != r["train GEMM µs"]:
            lines.append(head + "the per-kernel profile has no row for it: these records do not say why.")
            continue
        g = 100 * (r["eval GEMM µs"] / r["train GEMM µs"] - 1)
        gemm = f"eval's GEMM took {r['eval GEMM µs']:.1f} µs against train's {r['train GEMM µs']:.1f}"
        spread_txt = f"the same kernel's spread ({s:.1f} % in {precision})"
        if g > 0 and s is not None and g <= s:
            lines.append(head + gemm + f" ({g:+.1f} %): longer, but within {spread_txt}, so not resolved.")
        elif g > 0:
            lines.append(head + gemm + f" ({g:+.1f} %): longer" + (f", beyond {spread_txt}." if s is not None else
                         " (no estimate of the spread between runs to read it against)."))
        elif s is not None and d <= s:
            lines.append(head + gemm + f": less; the forward's {d:.1f} % is within {spread_txt}.")
        else:
            text = (head + gemm + f", all its kernels {r['eval kernels µs']:.1f} against "
                    f"{r['train kernels µs']:.1f}: less, so the extra time lies outside the kernels.")
            if r["eval host µs"] > flush and r["eval host µs"] > r["train host µs"]:
                text += (f" The host (the CPU issuing the launches) took {r['eval host µs']:.0f} µs to enqueue "
                         f"the eval call (train's "
                         f"{r['train host µs']:.0f}), more than the L2 flush before it lasts (about {flush:.0f} µs): "
                         f"up to {r['eval host µs'] - flush:.0f} of the {1e3 * (r['eval ms'] - r['train ms']):.0f} µs "
                         "may be the GPU waiting for the host.")
            else:
                text += " These records do not say where it went."
            lines.append(text)
    cases = ", ".join(f"{p} in {q}" for p, q in slower.index)
    return (f"Eval mode is slower in {cases}. Case by case, the per-kernel profile (`profile.csv`, a run of its "
            "own), and the spread of one GEMM kernel between two runs (notebook 05):\n\n" + "\n".join(lines))


def saved_table(stage: str = "fused", mode: str = "train", gpu: str = RESULTS_GPU):
    """The ladder's savings at the KernelBench shapes, one row per problem and precision:
    ``naive ms``, the previous stage's ms, ``stage``'s ms (one run of bench.csv,
    :func:`preset_times`) and the % of time ``stage`` saves over each (:func:`pct_saved`;
    negative: slower). Configurations the run lacks are left out. None without bench.csv.

    Raises:
        ValueError: ``stage`` is not one of algebra.STAGES after naive.
    """
    import pandas as pd

    from ..algebra import STAGES
    if stage not in STAGES[1:]:
        raise ValueError(f"stage: expected one of {STAGES[1:]}, got {stage!r}")
    ms = preset_times(mode, gpu)
    if ms is None:
        return None
    previous = _previous_stage(stage)
    rows = []
    for problem in PROBLEMS:
        for precision in ("fp32", "tf32", "3xtf32"):
            naive, before, t = (ms(problem, impl, precision) for impl in ("naive", previous, stage))
            if naive != naive or before != before or t != t:
                continue
            rows.append({"problem": problem, "precision": precision, "naive ms": naive, f"{previous} ms": before,
                         f"{stage} ms": t, "% saved vs naive": pct_saved(naive, t),
                         f"% saved vs {previous}": pct_saved(before, t)})
    return pd.DataFrame(rows).set_index(["problem", "precision"]) if rows else None


def peer_spread(mode: str = "train", gpu: str = RESULTS_GPU):
    """How much the peers (eager, torch.compile, the GEMM alone) move between runs of the
    benchmark at the KernelBench shapes: bench.csv's run and the runs of :data:`PEER_REPEATS`
    together, one row per impl with the number of configurations (problem, precision) timed
    more than once and the largest and median relative spread (max/min − 1, in %) of their
    medians. None without bench.csv or without repeated configurations."""
    import pandas as pd

    from ..reference import presets_of
    runs = [df for df in (measured(PEERS, gpu), measured(PEERS, gpu, PEER_REPEATS)) if df is not None]
    if not runs:
        return None
    bench = pd.concat(runs, ignore_index=True)
    sel = bench[[p not in (None, "v0") for p in presets_of(bench)]]
    sel = sel[(sel["mode"] == mode) & sel.impl.isin(list(PEERS))]
    g = sel.groupby(["problem", "precision", "impl"]).median_ms.agg(["min", "max", "size"])
    g = g[g["size"] > 1]
    if g.empty:
        return None
    g["spread %"] = 100 * (g["max"] / g["min"] - 1)
    out = g.groupby("impl")["spread %"].agg(configurations="size", largest="max", median="median")
    return out.reindex([p for p in PEERS if p in out.index])


def sync_summary(sync) -> "object":
    """The data-parallel train step (``python -m fusedlib sync-bench``'s sync.csv as a
    DataFrame) in one row per (world size, problem, precision), the latest run of each: the
    fused step with the group (ms, one step between barriers), what synchronising BatchNorm
    costs it against each rank's own statistics (``fused-local``, %), its time over DDP with
    ``nn.SyncBatchNorm`` (``eager-syncbn``, ×), and the weak-scaling efficiency t₁ / t_R of the
    fused step (world size 1's ``fused-local``; empty without it), then of the same step with each
    rank's own statistics (``fused-local`` at R ranks: what data parallelism costs without them). Where the CSV has
    ``loop_ms`` (steps back to back, as a training loop runs them), the cost of synchronising
    and the ratio to ``eager-syncbn`` in that timing too ("loop" columns). Where it has the
    synchronised implementations under DDP without its broadcast of the buffers
    (``fused-sync-nobcast``, ``eager-syncbn-nobcast``), the same two measures for them ("no
    broadcast" columns; back to back where the CSV has ``loop_ms``), against ``fused-local`` as it
    is."""
    import pandas as pd
    latest = sync.drop_duplicates(["world", "problem", "precision", "impl"], keep="last")
    keys = ["world", "problem", "precision"]
    t = latest.pivot_table(index=keys, columns="impl", values="median_ms")
    loop = latest.pivot_table(index=keys, columns="impl", values="loop_ms") if "loop_ms" in latest else None
    one = t.xs(1, level="world")["fused-local"] if 1 in t.index.get_level_values("world") else None
    rows = []
    for (world, problem, precision), r in t.iterrows():
        if world == 1:
            continue
        base = None if one is None else one.get((problem, precision))
        row = {"world": world, "problem": problem, "precision": precision,
               "fused-sync ms": r.get("fused-sync"),
               "sync cost %": 100 * (r.get("fused-sync") / r.get("fused-local") - 1),
               "× eager-syncbn": r.get("fused-sync") / r.get("eager-syncbn")}
        if loop is not None:
            q = loop.loc[(world, problem, precision)]
            row.update({"loop: sync cost %": 100 * (q.get("fused-sync") / q.get("fused-local") - 1),
                        "loop: × eager-syncbn": q.get("fused-sync") / q.get("eager-syncbn")})
        if "fused-sync-nobcast" in t.columns:  # DDP without the buffers' broadcast, the synchronised ones
            q = r if loop is None else loop.loc[(world, problem, precision)]
            row.update({"no broadcast: sync cost %": 100 * (q.get("fused-sync-nobcast") / q.get("fused-local") - 1),
                        "no broadcast: × eager-syncbn": q.get("fused-sync-nobcast") / q.get("eager-syncbn-nobcast")})
        row["weak-scaling efficiency"] = None if base is None else base / r.get("fused-sync")
        row["weak-scaling efficiency, own statistics"] = None if base is None else base / r.get("fused-local")
        rows.append(row)
    return pd.DataFrame(rows)


def peer_spread_md(mode: str = "train", gpu: str = RESULTS_GPU) -> str:
    """:func:`peer_spread` in words (Markdown), for reading every ratio against a peer: how
    many runs, and per peer the largest and median spread; where no configuration was timed
    twice (no ``results/<gpu>/peers/bench.csv``), one line saying that the records do not
    measure it."""
    spread = peer_spread(mode, gpu)
    if spread is None and measured(gpu=gpu) is None:
        return f"The peers' run-to-run spread: {NO_RESULTS} (results/{gpu}/bench.csv)."
    if spread is None:
        return (f"The peers' run-to-run spread: {NOT_MEASURED} in this GPU's records (results/{gpu}/ holds "
                f"one run of each peer and no `{PEER_REPEATS}`), so the ratios against the peers come without it.")
    return ("Read the ratios against the peers with their own run-to-run spread, the same configuration "
            "timed in separate runs of the benchmark: " + "; ".join(
                f"{impl} moved by up to **{r['largest']:.1f} %** (median {r['median']:.1f} %) over "
                f"{r['configurations']:.0f} configurations" for impl, r in spread.iterrows()) + ".")


# ---------------------------------------------------------------- notebooks 05–06: the 16-bit precisions
#: The 16-bit precisions a benchmark row may name (bf16, fp16: the module and its input in that
#: dtype), in the order the course shows them.
SIXTEEN = PRECISIONS_16
#: The implementations the 16-bit tables show: the first and last stage, and the peers a stage is
#: judged against.
SIXTEEN_IMPLS = ("naive", "fused", "eager", "gemm_only")


def is_gemm_pass(name: str) -> bool:
    """Whether a cost-model pass (:func:`fusedlib.lab.costmodel.cost`) is the GEMM: its name
    contains "GEMM" (the stages' GEMM with its epilogue, the peers' cuBLAS GEMM + bias). Every
    other pass is one of the passes around it (statistics, normalise, softmax, …)."""
    return "GEMM" in name


def pass_share(impl: str, problem: str, precision: str = "tf32", shape: str | None = None, mode: str = "train",
               gpu: str = RESULTS_GPU) -> dict:
    """The cost model's split of ``impl``'s predicted time (:func:`prediction`, each pass at its
    roof) into the GEMM and the passes around it, for ``problem`` (84, 33 or 39) at ``shape``
    (default: its KernelBench shape) and ``precision`` (fp32, tf32, 3xtf32, bf16 or fp16).

    Returns:
        ``{"GEMM ms", "passes ms", "total ms", "passes %"}``: milliseconds, and the passes'
        share of the total in percent (0 for ``gemm_only``).

    Raises:
        ValueError: unknown impl, problem, precision, mode or shape (from the cost model).
    """
    table, total = prediction(impl, problem, shape, mode, precision, gpu)
    gemm = float(table.loc[table["pass"].map(is_gemm_pass), "ms at its roof"].sum())
    return {"GEMM ms": gemm, "passes ms": total - gemm, "total ms": total, "passes %": 100 * (total - gemm) / total}


def pass_share_table(impls=("eager", "fused"), precisions=("tf32", "bf16"), mode: str = "train",
                     gpu: str = RESULTS_GPU):
    """:func:`pass_share` at the KernelBench shapes: one row per problem (84, 33, 39) and
    precision, for each of ``impls`` the columns ``<impl> GEMM ms``, ``<impl> passes ms`` and
    ``<impl> passes %``; then, for the last impl against each other one, ``% saved vs <impl>``
    (:func:`pct_saved` of the predicted totals). Ceilings: :func:`ceilings` (env.json, else the
    datasheet); the bf16/fp16 GEMM at :func:`bf16_roof`'s rate. Works without a GPU and without
    bench.csv.

    Raises:
        ValueError: an impl or precision the cost model does not know.
    """
    import pandas as pd
    rows = []
    for problem in PROBLEMS:
        for precision in precisions:
            row, totals = {"problem": problem, "precision": precision}, {}
            for impl in impls:
                s = pass_share(impl, problem, precision, None, mode, gpu)
                totals[impl] = s["total ms"]
                row.update({f"{impl} GEMM ms": s["GEMM ms"], f"{impl} passes ms": s["passes ms"],
                            f"{impl} passes %": s["passes %"]})
            last = impls[-1]
            for impl in impls[:-1]:
                row[f"{last}: % saved vs {impl}"] = pct_saved(totals[impl], totals[last])
            rows.append(row)
    return pd.DataFrame(rows).set_index(["problem", "precision"])


def _by_problem(values: dict, fmt: str = "{:.1f} %") -> str:
    """"a → b at 84, …": one pair of values a problem, ``values[(problem, i)]`` for i = 0, 1."""
    return ", ".join(f"{fmt.format(values[p, 0])} → {fmt.format(values[p, 1])} at {p}" for p in PROBLEMS)


def pass_share_md(precisions=("tf32", "bf16"), mode: str = "train", gpu: str = RESULTS_GPU) -> str:
    """What the cost model predicts when the precision goes from ``precisions[0]`` to
    ``precisions[1]`` (default tf32 → bf16), in three sentences (Markdown) rendered from
    :func:`pass_share_table` for naive, eager and fused at the KernelBench shapes: the fused
    stage's passes' share of its time, the % of naive's time that fusion saves, and the fused
    stage's lead over eager PyTorch; each says which way the model expects it to move. A
    prediction only: :func:`measured_pass_share_md` sets the records beside it.

    Raises:
        ValueError: ``precisions`` is not two precisions the cost model knows.
    """
    if len(precisions) != 2:
        raise ValueError(f"precisions: expected two (before, after), got {precisions!r}")
    t = pass_share_table(("naive", "eager", "fused"), precisions, mode, gpu)
    a, b = precisions

    def pairs(col):
        return {(p, i): float(t.loc[(p, q), col]) for p in PROBLEMS for i, q in enumerate(precisions)}

    def trend(values):
        up = [values[p, 1] > values[p, 0] for p in PROBLEMS]
        return "to grow at every shape" if all(up) else "to shrink at every shape" if not any(up) else "to move both ways"

    share, saved, lead = pairs("fused passes %"), pairs("fused: % saved vs naive"), pairs("fused: % saved vs eager")
    eager, gemm = pairs("eager passes %"), pairs("fused GEMM ms")
    return "\n".join([
        f"**Predicted** by the cost model, {a} → {b}, {mode} mode, KernelBench shapes:\n",
        f"- **The fused stage's passes** (the row pass over Z′, kept in the module's dtype): {_by_problem(share)} of "
        f"its time; the model expects the share {trend(share)}. The GEMM takes {_by_problem(gemm, '{:.3f} ms')}.",
        f"- **What fusion removes**: `fused` saves {_by_problem(saved)} of `naive`'s time; the model expects the "
        f"saving {trend(saved)}: the passes it removes run over float32 Z at every precision, so against a faster "
        "GEMM they weigh more.",
        f"- **Against eager PyTorch**, which stores its Z in {b} (its passes: {_by_problem(eager)} of its time): "
        f"`fused` saves {_by_problem(lead)} of eager's time; the model expects the saving {trend(lead)}, because it "
        "prices eager's passes, like the fused row pass, by their bytes, which halve with the 16-bit Z.",
    ])


def _direction(values: dict, verb: bool = False) -> str:
    """Which way ``values[(problem, 1)]`` moves from ``values[(problem, 0)]`` over :data:`PROBLEMS`:
    "grows at every shape", "shrinks at every shape", or where it does which ("grows at 84 and
    39 and shrinks at 33"); with ``verb``, the plain verb ("grow", "shrink") for "to …"."""
    grow, shrink = ("grow", "shrink") if verb else ("grows", "shrinks")
    up = [p for p in PROBLEMS if values[p, 1] > values[p, 0]]
    down = [p for p in PROBLEMS if p not in up]
    if not down:
        return f"{grow} at every shape"
    if not up:
        return f"{shrink} at every shape"
    return f"{grow} at {' and '.join(up)} and {shrink} at {' and '.join(down)}"


def _kernel_us(impl: str, problem: str, precision: str, mode: str = "train", gpu: str = RESULTS_GPU):
    """(µs in GEMM kernels, µs in the other kernels) of one forward of ``impl`` at ``problem``'s
    KernelBench shape, from profile.csv (:func:`is_gemm_kernel`); None where it lacks the row."""
    prof = profile(gpu)
    if prof is None:
        return None
    sel = _profiled_kernels(prof, problem, impl, precision, mode)
    if sel.empty:
        return None
    us = sel.cuda_time_us_per_call  # (every launch of the kernel in one forward)
    gemm = sel.kernel.map(is_gemm_kernel)
    return float(us[gemm].sum()), float(us[~gemm].sum())


def measured_pass_share_md(precisions=("tf32", "bf16"), mode: str = "train", gpu: str = RESULTS_GPU) -> str | None:
    """The records beside :func:`pass_share_md`'s prediction (Markdown), ``precisions[0]`` →
    ``precisions[1]`` at the KernelBench shapes: eager PyTorch's kernels around its GEMM (µs per
    forward, profile.csv) against the half of their time the cost model expects from their bytes,
    and their share of eager's kernel time (:func:`kernel_pass_share`); the fused stage's passes'
    share; `fused`'s saving over eager (bench.csv, :func:`preset_times`); and the two GEMM roofs'
    ratio (:func:`ceilings`, :func:`bf16_roof`). Every direction ("grows", "shrinks") is read from
    the numbers it follows, and set against the model's. None where profile.csv or bench.csv
    lacks a row.

    Raises:
        ValueError: ``precisions`` is not two precisions.
    """
    if len(precisions) != 2:
        raise ValueError(f"precisions: expected two (before, after), got {precisions!r}")
    a, b = precisions
    ms = preset_times(mode, gpu)
    kernels = {(p, i): _kernel_us("eager", p, q, mode, gpu) for p in PROBLEMS for i, q in enumerate(precisions)}
    eager = {k: kernel_pass_share("eager", k[0], precisions[k[1]], mode, gpu) for k in kernels}
    fused = {k: kernel_pass_share("fused", k[0], precisions[k[1]], mode, gpu) for k in kernels}
    if ms is None or any(v is None for d in (kernels, eager, fused) for v in d.values()):
        return None
    lead = {(p, i): pct_saved(ms(p, "eager", q), ms(p, "fused", q)) for p in PROBLEMS for i, q in enumerate(precisions)}
    if any(v != v for v in lead.values()):
        return None
    t = pass_share_table(("eager", "fused"), precisions, mode, gpu)
    predicted = lambda col: {(p, i): float(t.loc[(p, q), col]) for p in PROBLEMS for i, q in enumerate(precisions)}
    around = {k: v[1] for k, v in kernels.items()}
    kept = {p: around[p, 1] / around[p, 0] for p in PROBLEMS}  # the measured time ratio b / a
    expected = {p: float(t.loc[(p, b), "eager passes ms"] / t.loc[(p, a), "eager passes ms"]) for p in PROBLEMS}
    how = ("barely get faster" if min(kept.values()) > 0.8 else
           "get faster by about as much as their bytes shrink" if all(kept[p] < 1.15 * expected[p] for p in PROBLEMS)
           else "get faster, but less than their bytes shrink")
    lines = [
        f"**Measured** (`profile.csv` kernel by kernel, `bench.csv` for whole forwards), {a} → {b}:\n",
        f"- **Eager's kernels around its GEMM**: {_by_problem(around, '{:.0f} µs')}. In {b} they take "
        + ", ".join(f"{100 * kept[p]:.0f} %" for p in PROBLEMS) + f" of their {a} time ({', '.join(PROBLEMS)}), "
        f"where their bytes alone give about {_span([100 * v for v in expected.values()], '{:.0f}')} %: they {how}. Their share of eager's "
        f"kernel time {_direction(eager)}: {_by_problem(eager)} (predicted: {_by_problem(predicted('eager passes %'))}).",
        f"- **The fused stage's passes**: {_by_problem(fused)} of its kernel time; the share {_direction(fused)} "
        f"(predicted: to {_direction(predicted('fused passes %'), verb=True)}).",
        f"- **`fused` against eager**, whole forwards: `fused` saves {_by_problem(lead)} of eager's time. The saving "
        f"{_direction(lead)}; the model expected it to {_direction(predicted('fused: % saved vs eager'), verb=True)}."
        + (" Fusion replaces eager's kernels around the GEMM by one row pass, and those kernels barely got faster "
           "with the GEMM." if how.startswith("barely") else ""),
    ]
    ceil = ceilings(gpu)
    if a in ceil:
        from .bench import DATASHEET_H100, datasheet
        sheet = {**DATASHEET_H100, **datasheet(env(gpu))}
        lines.append(f"- **The GEMM roof**: cuBLAS's {b} rate is {bf16_roof(gpu)[0] / ceil[a]:.2f} times its {a} "
                     f"rate as measured (the datasheet: {sheet['bf16_tflops'] / sheet['tf32_tflops']:.1f} times); "
                     "the model speeds up every GEMM by that measured factor.")
    return "\n".join(lines)


def is_gemm_kernel(name: str) -> bool:
    """Whether a profiled kernel (profile.csv's ``kernel``) is a GEMM's: the engine's
    (``…gemm_kernel``), cuBLAS's (``sm90_xmma_gemm…``, ``nvjet…``, cutlass's ``…gemm…``, and its
    split-K reduction). Every other kernel is one of the passes around it."""
    low = name.lower()
    return "gemm" in low or low.startswith("nvjet") or "splitkreduce" in low


def kernel_pass_share(impl: str, problem: str, precision: str, mode: str = "train", gpu: str = RESULTS_GPU):
    """The measured counterpart of :func:`pass_share`: the % of ``impl``'s profiled kernel time at
    ``problem``'s KernelBench shape spent outside its GEMM kernels (:func:`is_gemm_kernel`), from
    profile.csv (the latest profile of each kernel); None where the profile lacks the row."""
    split = _kernel_us(impl, problem, precision, mode, gpu)
    if split is None or sum(split) <= 0:
        return None
    return 100 * split[1] / sum(split)


def pass_share_trend_md(impls=("naive", "fold", "sums", "fused", "eager"), precisions=("tf32", "bf16"),
                        mode: str = "train", gpu: str = RESULTS_GPU) -> str:
    """How the share of the passes around the GEMM moves from ``precisions[0]`` to
    ``precisions[1]`` (default tf32 → bf16) at the KernelBench shapes, predicted
    (:func:`pass_share`) and measured (:func:`kernel_pass_share`), in one line per group of
    ``impls`` that move alike (Markdown): "grows at every shape", "shrinks at every shape" or
    "moves both ways", each impl with where it keeps Z (:data:`fusedlib.algebra.Z16_STAGES`:
    the 16-bit dtype; the other stages float32; eager PyTorch the dtype) and its measured shares
    (the range over the problems). A measured trend reads "not profiled" where profile.csv lacks
    a row.

    Raises:
        ValueError: ``precisions`` is not two precisions.
    """
    from ..algebra import STAGES, Z16_STAGES
    if len(precisions) != 2:
        raise ValueError(f"precisions: expected two (before, after), got {precisions!r}")
    a, b = precisions

    def trend(pairs):
        if any(x is None or y is None for x, y in pairs):
            return "not profiled"
        up = [y > x for x, y in pairs]
        return "grows at every shape" if all(up) else "shrinks at every shape" if not any(up) else "moves both ways"

    groups: dict[tuple[str, str], list[str]] = {}
    for impl in impls:
        predicted = [(pass_share(impl, p, a, None, mode, gpu)["passes %"], pass_share(impl, p, b, None, mode, gpu)["passes %"])
                     for p in PROBLEMS]
        measured_ = [(kernel_pass_share(impl, p, a, mode, gpu), kernel_pass_share(impl, p, b, mode, gpu))
                     for p in PROBLEMS]
        dtype = b if b in SIXTEEN else "the module's dtype"
        z = f"Z′ in {dtype}" if impl in Z16_STAGES else "Z in float32" if impl in STAGES else f"Z in {dtype}"
        name = f"`{impl}`" if impl in STAGES else impl
        label = f"{name} ({z}"
        if trend(measured_) != "not profiled":
            label += (f"; measured {_span([x for x, _ in measured_], '{:.0f}')} % → "
                      f"{_span([y for _, y in measured_], '{:.0f}')} %")
        groups.setdefault((trend(predicted), trend(measured_)), []).append(label + ")")
    to = {"grows at every shape": "to grow at every shape", "shrinks at every shape": "to shrink at every shape",
          "moves both ways": "to move both ways"}
    lines = []
    for (p, m), names in groups.items():
        head = (f"**{p[0].upper() + p[1:]}**, predicted and measured" if p == m else
                f"**Predicted {to[p]}** (not profiled)" if m == "not profiled" else
                f"**Predicted {to[p]}, measured {to[m]}**")
        lines.append(f"- {head}: " + ", ".join(names) + ".")
    return (f"The passes' share of each implementation's time, {a} → {b}, {mode} mode, at the three KernelBench "
            f"shapes, predicted by the cost model and measured kernel by kernel (`profile.csv`):\n\n" + "\n".join(lines))


def pass_share_correction_md(impls=("sums", "eager"), precisions=("tf32", "bf16"), mode: str = "train",
                             gpu: str = RESULTS_GPU) -> str | None:
    """One sentence (Markdown) reading :func:`pass_share_trend_md` for ``impls`` (default the two
    whose Z or Z′ is in the 16-bit dtype besides the fused stage): which way each one's measured
    share of the passes (:func:`kernel_pass_share`) moves from ``precisions[0]`` to
    ``precisions[1]`` at the KernelBench shapes, against the cost model's (:func:`pass_share`), and,
    where the two differ, that the measurement corrects the prediction notebook 05 printed. None
    where profile.csv lacks a row.

    Raises:
        ValueError: ``precisions`` is not two precisions.
    """
    from ..algebra import STAGES
    if len(precisions) != 2:
        raise ValueError(f"precisions: expected two (before, after), got {precisions!r}")
    groups: dict[tuple[str, str], list[str]] = {}
    for impl in impls:
        measured_ = {(p, i): kernel_pass_share(impl, p, q, mode, gpu) for p in PROBLEMS for i, q in enumerate(precisions)}
        if any(v is None for v in measured_.values()):
            return None
        predicted = {(p, i): pass_share(impl, p, q, None, mode, gpu)["passes %"]
                     for p in PROBLEMS for i, q in enumerate(precisions)}
        name = f"`{impl}`" if impl in STAGES else impl
        key = (_direction(measured_), _direction(measured_, verb=True), _direction(predicted, verb=True))
        groups.setdefault(key, []).append(name)
    a, b = precisions
    said = []
    for (m, m_verb, p), names in groups.items():
        who = " and ".join(names)
        if m_verb == p:
            said.append(f"the passes' share of {who} {m}, as the cost model predicted")
        else:
            said.append(f"the passes' share of {who} {m}, where the cost model predicted it to {p}: this "
                        "corrects the prediction of notebook 05's bf16 section, which priced those passes by "
                        "their bytes")
    return f"Read from {a} to {b}, measured: " + "; ".join(said) + "."


def predicted_ladder(precisions=("tf32", "bf16"), impls=("naive", "fold", "sums", "fused", "eager", "gemm_only"),
                     mode: str = "train", gpu: str = RESULTS_GPU):
    """The cost model's ladder (:func:`prediction`, ms) at the KernelBench shapes: one row per
    problem (84, 33, 39) and precision, one column per impl, and ``% saved, naive → fused``
    (:func:`pct_saved`) where both stages are among ``impls``. Needs no GPU and no bench.csv.

    Raises:
        ValueError: an impl or precision the cost model does not know.
    """
    import pandas as pd
    rows = []
    for problem in PROBLEMS:
        for precision in precisions:
            row = {"problem": problem, "precision": precision}
            row.update({impl: prediction(impl, problem, None, mode, precision, gpu)[1] for impl in impls})
            if "naive" in impls and "fused" in impls:
                row["% saved, naive → fused"] = pct_saved(row["naive"], row["fused"])
            rows.append(row)
    return pd.DataFrame(rows).set_index(["problem", "precision"])

def bf16_roof(gpu: str = RESULTS_GPU) -> tuple[float, str]:
    """(TFLOP/s, where it comes from) of the bf16/fp16 GEMM the predictions use: cuBLAS's bf16
    rate measured on the GPU (env.json ``gemm_bf16_tflops``), else twice the measured tf32 rate
    (:func:`fusedlib.lab.costmodel.gemm_tflops`), else, without env.json, the H100 SXM
    datasheet's dense bf16 rate. The second item is a phrase for a sentence ("measured ...",
    "twice ...", "the ... datasheet")."""
    from .costmodel import gemm_tflops
    ceil = ceilings(gpu)
    rate, source = gemm_tflops("bf16", ceil)
    if source != "bf16":
        return rate, (f"twice the measured tf32 rate of {ceil['tf32']:.0f} TFLOP/s: results/{gpu}/env.json has no "
                      "measured bf16 rate yet")
    if env(gpu) is None or "measured" not in env(gpu):
        return rate, "the H100 SXM datasheet's dense bf16 rate (no env.json committed yet)"
    return rate, f"cuBLAS's bf16 GEMM measured at 8192³ (results/{gpu}/env.json)"


def bf16_roof_md(gpu: str = RESULTS_GPU) -> str:
    """The bf16/fp16 GEMM roof in a sentence (Markdown) from :func:`bf16_roof`: its rate, where
    it comes from, its ratio to the tf32 roof, its ridge point against the copy bandwidth beside
    tf32's, and the datasheet's dense bf16 and TF32 rates (:func:`fusedlib.lab.bench.datasheet` of env.json's
    device, else the H100 SXM's)."""
    from .bench import DATASHEET_H100, datasheet
    ceil = ceilings(gpu)
    rate, source = bf16_roof(gpu)
    sheet = {**DATASHEET_H100, **datasheet(env(gpu))}
    return (f"bf16/fp16 GEMM roof: **{rate:.0f} TFLOP/s**, {source}: **{rate / ceil['tf32']:.2f} times** tf32's "
            f"{ceil['tf32']:.0f} TFLOP/s; ridge point {rate * 1e3 / ceil['bandwidth']:.0f} FLOP/byte, against tf32's "
            f"{ceil['tf32'] * 1e3 / ceil['bandwidth']:.0f} FLOP/byte. The {sheet['device']} datasheet's dense "
            f"rates: {sheet['bf16_tflops']:.0f} TFLOP/s bf16, {sheet['tf32_tflops']:.0f} TFLOP/s TF32 "
            f"({sheet['bf16_tflops'] / sheet['tf32_tflops']:.1f} times).")


def measured_16bit(impls=SIXTEEN_IMPLS, mode: str = "train", gpu: str = RESULTS_GPU):
    """The committed bf16 and fp16 timings at the KernelBench shapes beside the cost model's
    prediction: one row per problem and 16-bit precision that bench.csv holds (one run,
    :func:`preset_times`), for each of ``impls`` ``<impl> ms`` (measured median, NaN where the
    run lacks it) and ``<impl> predicted ms``; and ``% saved naive → fused``, measured and
    predicted, where both stages are among ``impls``.

    Returns:
        a DataFrame indexed by (problem, precision); **empty** (no rows, the same columns)
        when bench.csv is absent or holds no bf16/fp16 row: the notebooks then print
        :func:`sixteen_bit_note`.
    """
    import pandas as pd
    columns = [f"{impl} ms" for impl in impls] + [f"{impl} predicted ms" for impl in impls]
    both = "naive" in impls and "fused" in impls
    if both:
        columns += ["% saved naive → fused", "% saved naive → fused, predicted"]
    bench = measured(gpu=gpu)
    held = set() if bench is None else set(at_presets(bench, mode).precision)
    ms = preset_times(mode, gpu) if held & set(SIXTEEN) else None
    rows = []
    for problem in PROBLEMS:
        for precision in SIXTEEN:
            if ms is None or precision not in held or all(ms(problem, i, precision) != ms(problem, i, precision)
                                                          for i in impls):
                continue
            row = {"problem": problem, "precision": precision}
            for impl in impls:
                row[f"{impl} ms"] = ms(problem, impl, precision)
                row[f"{impl} predicted ms"] = prediction(impl, problem, None, mode, precision, gpu)[1]
            if both:
                row["% saved naive → fused"] = pct_saved(row["naive ms"], row["fused ms"])
                row["% saved naive → fused, predicted"] = pct_saved(row["naive predicted ms"],
                                                                    row["fused predicted ms"])
            rows.append(row)
    index = pd.MultiIndex.from_arrays([[r.pop("problem") for r in rows], [r.pop("precision") for r in rows]],
                                      names=["problem", "precision"])
    return pd.DataFrame(rows, index=index, columns=columns, dtype=float)


def _forward_split(problem: str, precision: str, mode: str, gpu: str):
    """One fused forward at ``problem``'s KernelBench shape taken apart from the records:
    ``{"total", "gemm", "copies", "rows", "idle", "host", "kernels", "launches"}`` (µs; ``idle`` the
    bench median less the kernels' device time, ``launches`` the dtype conversions), or None where
    profile.csv or bench.csv lacks the row."""
    prof, bench = profile(gpu), measured(gpu=gpu)
    if prof is None or bench is None:
        return None
    sel = _profiled_kernels(prof, problem, "fused", precision, mode)
    row = at_presets(bench, mode)
    row = row[(row.problem == problem) & (row.impl == "fused") & (row.precision == precision)]
    if sel.empty or row.empty:
        return None
    us = sel.cuda_time_us_per_call
    gemm, copies = sel.kernel.str.contains("gemm"), sel.kernel.str.contains("copy", case=False)
    g, c, r = float(us[gemm].sum()), float(us[copies].sum()), float(us[~gemm & ~copies].sum())
    total = 1e3 * float(row.median_ms.iloc[0])
    return {"total": total, "gemm": g, "copies": c, "rows": r, "idle": total - (g + c + r),
            "host": float(row.host_us.iloc[0]), "kernels": int(sel.calls.sum()), "launches": int(sel.calls[copies].sum())}


def sixteen_bit_time_md(problem: str = "84", precision: str = "bf16", mode: str = "train",
                        gpu: str = RESULTS_GPU, against: str = "tf32") -> str | None:
    """Markdown: where the fused stage's 16-bit forward spends its time at ``problem``'s
    KernelBench shape, from the committed records: its median time (bench.csv), its kernels per
    forward in three groups (profile.csv: the GEMM with its epilogue, the dtype conversions
    (kernels whose name holds "copy"), the passes), the time no kernel of it ran, and the host
    time to enqueue it (``host_us``) against the L2 flush's time before each timed call (its
    FLUSH_MB written at the measured copy bandwidth): only a host slower than the flush leaves
    the GPU waiting for it. Then the same split of the ``against`` forward (tf32): the GEMM's
    time and what lies around it (conversions and the time no kernel ran) in both, in µs and as a
    share of the forward, and whether that share grows or shrinks, read from those numbers (left
    out where the records lack the ``against`` row). Times in µs. None where either file lacks
    the row."""
    f = _forward_split(problem, precision, mode, gpu)
    if f is None:
        return None
    total, host, idle, c, launches, kernels = f["total"], f["host"], f["idle"], f["copies"], f["launches"], f["kernels"]
    flush = _flush_us(gpu)
    if idle <= 0:
        wait = f"The kernels account for the whole time; the host took {host:.0f} µs to enqueue it."
    elif host > flush:
        wait = (f"For the other **{idle:.0f} µs** no kernel of it ran. The host (the CPU running Python and "
                f"issuing the launches) took {host:.0f} µs to enqueue the forward (the bench's `host_us`), longer "
                f"than the L2 flush before each timed call keeps the GPU busy (about {flush:.0f} µs), so part of "
                f"that is the GPU waiting for the host; the rest lies between its {kernels} kernels.")
    else:
        wait = (f"For the other **{idle:.0f} µs** no kernel of it ran: the gaps between its {kernels} kernels "
                f"and around them. The host (the CPU running Python and issuing the launches) took only "
                f"{host:.0f} µs to enqueue the forward (the bench's `host_us`), within the L2 flush before each "
                f"timed call (about {flush:.0f} µs), so the GPU did not wait for it.")
    if launches:
        conversions = (f"and {launches} dtype conversion{'s' if launches != 1 else ''} {c:.0f} µs (the module's "
                       f"{precision} vectors to float32)")
        around = "the conversions and the time between kernels"
    else:
        conversions = f"and no dtype conversion (the kernels read the module's {precision} vectors as they are)"
        around = "the time between kernels"
    text = (f"At {problem}'s KernelBench shape ({mode} mode) the {precision} fused forward takes **{total:.0f} µs** "
            f"(`bench.csv`). Its kernels, per forward (`profile.csv`): the GEMM with its statistics epilogue "
            f"**{f['gemm']:.0f} µs**, the row pass {f['rows']:.0f} µs, {conversions}. {wait}")
    ref = _forward_split(problem, against, mode, gpu) if against != precision else None
    if ref is None:
        return text
    rest, rest_ref = c + max(idle, 0), ref["copies"] + max(ref["idle"], 0)
    share, share_ref = 100 * rest / total, 100 * rest_ref / ref["total"]
    way = "a larger" if share > share_ref else "a smaller" if share < share_ref else "the same"
    return (text + f" Against {against}: the GEMM takes {f['gemm']:.0f} µs here against {ref['gemm']:.0f} µs; "
            f"{around} {'come' if launches else 'comes'} to {rest:.1f} µs (**{share:.1f} %** of this forward) against "
            f"{rest_ref:.1f} µs ({share_ref:.1f} % of the {against} one): {way} share of a faster forward.")


def sixteen_bit_note(gpu: str = RESULTS_GPU) -> str | None:
    """The one line the notebooks print where bench.csv has no bf16/fp16 timings yet (which file
    lacks them, and the command that makes them), or None where it has some."""
    if not measured_16bit(gpu=gpu).empty:
        return None
    return (f"bf16 and fp16: {NOT_MEASURED} (results/{gpu}/bench.csv has no bf16 or fp16 rows; "
            "`make results-16bit` on a GPU machine times them).")


def predicted_roofline_16bit(impls=("naive", "fold", "sums", "fused", "eager", "compile"), gpu: str = RESULTS_GPU):
    """A roofline Figure (one panel per problem at its KernelBench shape, train mode) of the cost
    model's predictions in tf32 (squares) and bf16 (diamonds): each implementation at its
    intensity (cost-model FLOPs / bytes: bf16 counts X, W and Y at 2 bytes) and its predicted
    rate (FLOPs / predicted time), hollow; the measured bf16 points filled where bench.csv holds
    them. Roofs: the copy bandwidth, the tf32 GEMM and the bf16 GEMM of :func:`bf16_roof`.
    Drawn without pyplot (:func:`fusedlib.lab.figures.subplots`); needs no GPU and no bench.csv."""
    import numpy as np

    from .costmodel import cost
    from .figures import _impl_color, subplots
    from ..reference import PRESETS, problem_kind
    ceil = ceilings(gpu)
    roof16, _ = bf16_roof(gpu)
    ms = preset_times("train", gpu)
    markers = {"tf32": "s", "bf16": "D"}
    fig, axes = subplots(1, len(PROBLEMS), figsize=(15, 4.6), sharey=True)
    ai = np.geomspace(20, 4000, 200)
    for ax, problem in zip(axes, PROBLEMS):
        s = PRESETS[problem]
        ax.plot(ai, np.minimum(ai * ceil["bandwidth"] / 1e3, roof16 * 1.5), color="gray", lw=1,
                label=f"memory roof {ceil['bandwidth'] / 1e3:.2f} TB/s")
        ax.axhline(ceil["tf32"], color="tab:orange", ls="--", lw=1, label=f"tf32 GEMM roof {ceil['tf32']:.0f} TFLOP/s")
        ax.axhline(roof16, color="tab:green", ls="--", lw=1, label=f"bf16 GEMM roof {roof16:.0f} TFLOP/s")
        for precision, marker in markers.items():
            for impl in impls:
                c = cost(problem_kind(problem), impl, s.batch, s.in_features, s.out_features, "train", precision)
                t = prediction(impl, problem, None, "train", precision, gpu)[1]
                ax.scatter([c.intensity], [c.flops / (t * 1e-3) / 1e12], marker=marker, s=45, facecolor="none",
                           edgecolor=_impl_color(impl), linewidth=1.2, zorder=3,
                           label=f"{impl}, {precision}, predicted")
                m = ms(problem, impl, precision) if ms is not None and precision == "bf16" else float("nan")
                if m == m:
                    ax.scatter([c.intensity], [c.flops / (m * 1e-3) / 1e12], marker=marker, s=45,
                               color=_impl_color(impl), edgecolor="black", linewidth=0.4, zorder=4,
                               label=f"{impl}, bf16, measured")
        ax.set(xscale="log", yscale="log", xlim=(ai[0], ai[-1]), ylim=(50, roof16 * 1.5),
               title=f"problem {problem} @{s}", xlabel="arithmetic intensity (FLOP/byte, cost model)")
        ax.grid(True, which="major", lw=0.3)
    axes[0].set_ylabel("TFLOP/s (cost-model FLOPs / time)")
    from matplotlib.lines import Line2D
    handles, labels = axes[0].get_legend_handles_labels()
    handles, labels = handles[:3], labels[:3]  # the roofs
    for impl in impls:
        handles.append(Line2D([], [], marker="o", ls="", color=_impl_color(impl), markeredgecolor="black"))
        labels.append(impl)
    for precision, marker in markers.items():
        handles.append(Line2D([], [], marker=marker, ls="", markerfacecolor="none", markeredgecolor="black"))
        labels.append(f"{precision}, predicted")
    if any(lab.endswith("measured") for ax in axes for lab in ax.get_legend_handles_labels()[1]):
        handles.append(Line2D([], [], marker=markers["bf16"], ls="", color="gray", markeredgecolor="black"))
        labels.append("bf16, measured")
    fig.legend(handles, labels, fontsize=9, loc="outside right center")
    fig.suptitle("Predicted tf32 (squares) and bf16 (diamonds) points, hollow; measured bf16 filled where committed")
    return fig

# ---------------------------------------------------------------- notebooks 07–08: eval mode and the backward
#: The fused train-mode backward's passes (``kernels/backward.cu``, ``ops.backward_gemms``) with x the input
#: data (no dX, as the train step times it): (kernel, {tensor: size}, {tensor: size}, GEMM or not), the sizes
#: in units "NM", "NK", "MK" (float32 tensors), "N", "M" (vectors), "TM" (tile partials, T row tiles).
#: ``P`` is the number of TF32 planes (1, or 2 for 3xTF32's parts); 84's Y is read, 33's is not.
def backward_plan(problem: str, precision: str = "fp32") -> list[dict]:
    """The fused train-mode backward of ``problem`` (84, 33 or 39) at ``precision`` as a list of
    kernels in launch order, each a dict: ``kernel``, ``reads`` and ``writes`` ({tensor name:
    (count, unit)}, unit one of "NM", "NK", "MK", "N", "M", "TM"; count × one float32 tensor of
    that unit), ``gemm`` (True for a GEMM: 2·N·K·M FLOPs). x is the input data: no dX GEMM
    (as ``python -m fusedlib train-step`` times it). Source: ``fusedlib/kernels/backward.cu``,
    ``ops.backward_gemms`` and ``ops.x_operand`` (tf32 multiplies X itself: no centring).

    Raises:
        ValueError: unknown problem or precision.
    """
    from ..reference import PROBLEMS as FAMILY
    if problem not in FAMILY or precision not in PRECISIONS:
        raise ValueError(f"backward_plan: expected a problem in {sorted(FAMILY)} and a precision in {PRECISIONS}, "
                         f"got {problem!r}, {precision!r}")
    k84, planes = FAMILY[problem] == "84", 2 if precision == "3xtf32" else 1
    g = {"Y": (1, "NM"), "dY": (1, "NM")} if k84 else {"dY": (1, "NM")}   # what G = Y∘(dY − r) or dY reads
    plan = []
    if k84:
        plan.append({"kernel": "row_dot_kernel", "reads": {"Y": (1, "NM"), "dY": (1, "NM")},
                     "writes": {"r": (1, "N")}, "gemm": False})
    plan.append({"kernel": "backward_partials_kernel", "reads": {**g, "Z'": (1, "NM"), **({"r": (1, "N")} if k84 else {})},
                 "writes": {"partials": (4, "TM"), "dγ, dβ, ds, a": (6, "M")}, "gemm": False})
    plan.append({"kernel": "backward_dz_kernel", "reads": {**g, "Z'": (1, "NM"), "a": (3, "M")},
                 "writes": {"dZ'": (planes, "NM"), "dZ'ᵀ": (planes, "NM")}, "gemm": False})
    if precision != "tf32":
        plan.append({"kernel": "x_chunk_sums, x_mean, x_center", "reads": {"X": (2, "NK")},
                     "writes": {"X − x̄": (planes, "NK")}, "gemm": False})
    operand = "X" if precision == "tf32" else "X − x̄"
    plan.append({"kernel": "dW = dZ'ᵀ·" + ("X" if precision == "tf32" else "(X − x̄)") + " (cuBLAS)",
                 "reads": {"dZ'ᵀ": (planes, "NM"), operand: (planes, "NK")},
                 "writes": {"dW": (1, "MK")}, "gemm": True})
    return plan


def _unit_bytes(unit: str, shape) -> int:
    from ..algebra import BACKWARD_TILE_ROWS
    n, k, m = shape.batch, shape.in_features, shape.out_features
    tiles = -(-n // BACKWARD_TILE_ROWS)
    return 4 * {"NM": n * m, "NK": n * k, "MK": m * k, "N": n, "M": m, "TM": tiles * m}[unit]


def backward_prediction(problem: str, precision: str = "fp32", gpu: str = RESULTS_GPU):
    """(passes table, predicted ms) of the fused train-mode backward (:func:`backward_plan`) at
    ``problem``'s KernelBench shape: one row per kernel with the tensors it reads and writes,
    MB read, MB written, GFLOP and its time at its roof (the GEMM rate of ``precision``, the
    copy bandwidth otherwise; :func:`ceilings`), as :func:`prediction` does for the forward."""
    import pandas as pd

    from ..reference import PRESETS
    shape, ceil = PRESETS[problem], ceilings(gpu)
    rate = gemm_rate(precision, ceil)
    rows = []
    for p in backward_plan(problem, precision):
        read = sum(c * _unit_bytes(u, shape) for c, u in p["reads"].values())
        written = sum(c * _unit_bytes(u, shape) for c, u in p["writes"].values())
        flops = 2 * shape.batch * shape.in_features * shape.out_features if p["gemm"] else 0
        t_compute, t_memory = flops / (rate * 1e12), (read + written) / (ceil["bandwidth"] * 1e9)
        rows.append({"kernel": p["kernel"], "reads": ", ".join(p["reads"]), "writes": ", ".join(p["writes"]),
                     "MB read": read / 1e6, "MB written": written / 1e6, "GFLOP": flops / 1e9,
                     "bound by": "compute" if t_compute > t_memory else "memory",
                     "ms at its roof": max(t_compute, t_memory) * 1e3})
    table = pd.DataFrame(rows)
    return table, float(table["ms at its roof"].sum())


def backward_memory(problem: str, precision: str = "fp32") -> dict:
    """MiB the fused train step holds while its dW GEMM runs, above what was allocated before
    the step (x, dY, the parameters), tensor by tensor: the output Y (alive through
    ``backward``; 84 also saves it), the saved Z', dZ' and dZ'ᵀ (P planes each), X − x̄ (P
    planes; none in tf32) and dW. Small vectors and scratch are left out. This is what
    train_step.csv's ``peak_mib`` measures."""
    from ..reference import PRESETS
    shape = PRESETS[problem]
    planes = 2 if precision == "3xtf32" else 1
    mib = lambda count, unit: count * _unit_bytes(unit, shape) / 2 ** 20
    out = {"Y (output)": mib(1, "NM"), "Z' (saved)": mib(1, "NM"), "dZ' and dZ'ᵀ": mib(2 * planes, "NM")}
    if precision != "tf32":
        out["X − x̄"] = mib(planes, "NK")
    out["dW"] = mib(1, "MK")
    return out


def train_step_summary(gpu: str = RESULTS_GPU):
    """One row per problem and float32 precision (:data:`FLOAT32_STEPS`) of the committed
    train_step.csv: the fused step and eager PyTorch's (3xtf32: eager fp32, the same accuracy
    class), their forwards alone and their backwards (step minus the forward alone), % of eager's
    step the fused step saves (negative: it costs more), the fused backward's prediction
    (:func:`backward_prediction`), and peak memory (MiB): fused measured and predicted
    (:func:`backward_memory`), eager measured. None without the file. (The 16-bit steps:
    :func:`train_step_16bit_md`.)"""
    import pandas as pd
    df = train_steps(gpu)
    if df is None:
        return None
    df = df[df.precision.isin(FLOAT32_STEPS)]
    rows = []
    for (problem, precision), g in df.groupby(["problem", "precision"], sort=False):
        f = g.set_index("impl").loc["fused"]
        peer = df[(df.problem == problem) & (df.precision == _peer_precision(precision))].set_index("impl")
        e = peer.loc["eager"] if "eager" in peer.index else None
        nan = float("nan")
        rows.append({"problem": problem, "precision": precision,
                     "fused step ms": f.median_ms, "eager step ms": e.median_ms if e is not None else nan,
                     "% saved": 100 * (1 - f.median_ms / e.median_ms) if e is not None else nan,
                     "fused forward ms": f.forward_ms, "eager forward ms": e.forward_ms if e is not None else nan,
                     "fused backward ms": f.median_ms - f.forward_ms,
                     "predicted backward ms": backward_prediction(problem, precision, gpu)[1],
                     "eager backward ms": e.median_ms - e.forward_ms if e is not None else nan,
                     "fused peak MiB": f.peak_mib, "predicted peak MiB": sum(backward_memory(problem, precision).values()),
                     "eager peak MiB": e.peak_mib if e is not None else nan})
    return pd.DataFrame(rows)


def _span(values, fmt: str = "{:.2f}") -> str:
    """"a–b" of the smallest and largest value (one value when they print alike)."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def train_step_16bit_md(gpu: str = RESULTS_GPU) -> str:
    """The 16-bit train steps of train_step.csv in sentences (Markdown): per precision of
    :data:`SIXTEEN_STEPS` held, the fused step's time, its forward's and its largest gradient
    error against float64, each over eager PyTorch's in the same setting (the range over the
    problems held); a line saying they are not measured
    (:data:`NOT_MEASURED`) where the file holds none."""
    df = train_steps(gpu)
    held = [] if df is None else [p for p in SIXTEEN_STEPS if (df.precision == p).any()]
    if not held:
        return (f"*bf16, fp16 and autocast train steps: {NOT_MEASURED} (`python -m fusedlib train-step "
                "--precision 16bit,autocast-bf16` on a GPU machine).*")
    lines = []
    for precision in held:
        rows = df[df.precision == precision].set_index(["problem", "impl"])
        problems = [p for p in PROBLEMS if (p, "fused") in rows.index and (p, "eager") in rows.index]
        step, fwd, err = ([rows.loc[(p, "fused"), c] / rows.loc[(p, "eager"), c] for p in problems]
                          for c in ("median_ms", "forward_ms", "grad_rel_err"))
        lines.append(f"- **{precision}** ({', '.join(problems)}): the fused step takes {_span(step)}× eager's time, "
                     f"its forward {_span(fwd)}× eager's forward; its gradients' error against float64 is "
                     f"{_span(err)}× eager's.")
    return "\n".join(lines)


def train_step_inversions(precisions=None, gpu: str = RESULTS_GPU):
    """Where the committed train steps break the ladder's order: one row per problem and precision
    (those of ``precisions``, default all) in which a later stage's median step takes longer than
    an earlier stage's, with its largest such pair: ``earlier``, ``later``, their medians (ms),
    ``% slower`` (later over earlier), the fastest call of each (``min_ms``: earlier, later), where
    the file holds them the GPU's times alone (``device_ms``, ``--hold-us``: earlier, later), and
    ``pairs``, how many of the stages' pairs are out of order. None without train_step.csv; empty
    (the same columns) where every stage's step is at most each earlier one's."""
    import pandas as pd

    from ..algebra import STAGES
    df = train_steps(gpu)
    if df is None:
        return None
    if precisions is not None:
        df = df[df.precision.isin(list(precisions))]
    rows, device = [], "device_ms" in df and df.device_ms.notna().any()
    for (problem, precision), g in df.groupby(["problem", "precision"], sort=False):
        t = g.drop_duplicates("impl", keep="last").set_index("impl")
        stages = [s for s in STAGES if s in t.index]
        out = [(e, l) for i, e in enumerate(stages) for l in stages[i + 1:] if t.median_ms[l] > t.median_ms[e]]
        if not out:
            continue
        e, l = max(out, key=lambda pair: t.median_ms[pair[1]] / t.median_ms[pair[0]])
        rows.append({"problem": problem, "precision": precision, "earlier": e, "later": l,
                     "earlier ms": float(t.median_ms[e]), "later ms": float(t.median_ms[l]),
                     "% slower": 100 * (t.median_ms[l] / t.median_ms[e] - 1),
                     "earlier fastest ms": float(t.min_ms[e]), "later fastest ms": float(t.min_ms[l]),
                     **({"earlier device ms": float(t.device_ms[e]), "later device ms": float(t.device_ms[l])}
                        if device else {}),
                     "pairs": f"{len(out)} of {len(stages) * (len(stages) - 1) // 2}"})
    cols = ["earlier", "later", "earlier ms", "later ms", "% slower", "earlier fastest ms", "later fastest ms",
            *(["earlier device ms", "later device ms"] if device else []), "pairs"]
    return pd.DataFrame(rows, columns=["problem", "precision"] + cols).set_index(["problem", "precision"])


def train_step_inversions_md(precisions=None, gpu: str = RESULTS_GPU) -> str:
    """:func:`train_step_inversions` in words (Markdown): in how many of the settings held a
    later stage's step is slower than an earlier one's, the largest case, and in how many of them
    the fastest calls (``min_ms``) are in the ladder's order again for that pair, and where the file
    holds them, the GPU's times alone (``device_ms``). One sentence
    where no setting breaks the order; :data:`NO_RESULTS` without train_step.csv."""
    t = train_step_inversions(precisions, gpu)
    if t is None:
        return f"*{NO_RESULTS} (results/{gpu}/train_step.csv).*"
    df = train_steps(gpu)
    settings = df if precisions is None else df[df.precision.isin(list(precisions))]
    n = len(settings.groupby(["problem", "precision"]))
    if t.empty:
        return f"In all {n} settings every stage's step (median) is at most each earlier stage's."
    (p, q), w = t["% slower"].idxmax(), t.loc[t["% slower"].idxmax()]
    back = int((t["later fastest ms"] <= t["earlier fastest ms"]).sum())
    below = [100 * (1 - r[f"{k} fastest ms"] / r[f"{k} ms"]) for _, r in t.iterrows() for k in ("earlier", "later")]
    return (f"In {len(t)} of {n} settings a later stage's step (median) takes longer than an earlier stage's; the "
            f"table gives the largest such pair of each. Most at {p} in {q}: `{w['later']}` {w['later ms']:.3f} ms "
            f"against `{w['earlier']}`'s {w['earlier ms']:.3f} ({w['% slower']:+.0f} %). The fastest call of each "
            f"of these steps lies {_span(below, '{:.0f}')} % below its median, and by the fastest calls the pair is "
            f"back in the ladder's order in {back} of the {len(t)}." + _device_order_md(t))


def _device_order_md(t) -> str:
    """:func:`train_step_inversions_md`'s sentence on the GPU's times alone (``device_ms``): in how
    many of the pairs they are in the ladder's order, and by how much the later is slower in the
    others; empty where the file holds no such times."""
    if "later device ms" not in t:
        return ""
    slower = 100 * (t["later device ms"] / t["earlier device ms"] - 1)
    back = int((slower <= 0).sum())
    rest = slower[slower > 0]
    return (f" By the GPU's times alone (the stream held while the host enqueues each call, `device_ms`) the pair "
            f"is in the ladder's order in {back} of the {len(t)}"
            + (f"; in the others the later stage is {_span(list(rest), '{:.1f}')} % slower." if len(rest) else "."))


def train_step_md(gpu: str = RESULTS_GPU) -> str:
    """What train_step.csv shows, in sentences (Markdown) rendered from it
    (:func:`train_step_summary`): per precision the fused step's time against eager PyTorch's,
    the backwards alone, and the peak memory in units of one N×M float32 tensor of each problem;
    :data:`NO_RESULTS` without the file."""
    from ..reference import PRESETS
    t = train_step_summary(gpu)
    if t is None:
        return f"*{NO_RESULTS} (results/{gpu}/train_step.csv).*"
    by = {p: t[t.precision == p] for p in ("fp32", "tf32", "3xtf32")}
    ratio = {p: d["fused step ms"] / d["eager step ms"] for p, d in by.items()}
    bwd = {p: d["fused backward ms"] / d["eager backward ms"] for p, d in by.items()}
    fwd = {p: d["fused forward ms"] / d["eager forward ms"] for p, d in by.items()}
    nm = t.problem.map(lambda p: PRESETS[p].batch * PRESETS[p].out_features * 4 / 2 ** 20)
    extra = ((t["fused peak MiB"] - t["eager peak MiB"]) / nm).round(1)
    extra_txt = {p: ", ".join(f"{pr} {e:+.1f}".replace("-0.0", "+0.0")
                              for pr, e in zip(t.problem[t.precision == p], extra[t.precision == p]))
                 for p in by}
    off = (t["fused peak MiB"] - t["predicted peak MiB"]).abs().max()
    return "\n".join([
        f"- **TF32**: the fused step takes {_span(ratio['tf32'])}× eager PyTorch's time at the three "
        f"KernelBench shapes; its backward alone {_span(bwd['tf32'])}× eager's backward.",
        f"- **3xTF32** gives fp32-class gradients in {_span(ratio['3xtf32'])}× eager fp32's time: its three TF32 "
        "products per GEMM run faster than one fp32 GEMM on the FMA units.",
        f"- **fp32** is slower than eager ({_span(ratio['fp32'])}× its time), though its backward alone takes "
        f"{_span(bwd['fp32'])}× eager's: the difference is the forward ({_span(fwd['fp32'])}× eager's), whose SIMT "
        "GEMM is slower than cuBLAS's (notebook 02), while the backward's GEMMs are cuBLAS's in every precision.",
        "- **Peak memory**, fused minus eager, in N×M tensors of each problem (84, 33, 39): "
        + "; ".join(f"{p}: {extra_txt[p]}" for p in by) + ". The fused forward saves only Z′ (and Y for 84), "
        "but while dW's GEMM runs it also holds dZ′ in two layouts and X − x̄ (in 3xTF32 each as two TF32 "
        f"parts); that count (`course.backward_memory`) predicts every fused peak within {off:.2f} MiB.",
    ])
