"""``python -m fusedlib report``: README sections generated from committed GPU results.

Between ``<!-- validation:begin -->`` and ``<!-- validation:end -->``: the summary of
``results/<gpu>/validation.json`` (:func:`validation_summary`); between
``<!-- results-table:begin -->`` and ``<!-- results-table:end -->``: the timing table of
``results/<gpu>/bench.csv`` (:func:`results_table`); between ``<!-- train-step:begin -->``
and ``<!-- train-step:end -->``: the train steps of ``results/<gpu>/train_step.csv``
(:func:`train_step_section`); between ``<!-- host-time:begin -->`` and
``<!-- host-time:end -->``: the host time per forward of bench.csv (:func:`host_time_section`).
Tests keep the README in step with the records, so every number the README shows comes from a
committed result.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .costmodel import PRECISIONS, PRECISIONS_16
from .records import RESULTS_GPU

BEGIN, END = "<!-- validation:begin -->", "<!-- validation:end -->"
TABLE_BEGIN, TABLE_END = "<!-- results-table:begin -->", "<!-- results-table:end -->"
STEP_BEGIN, STEP_END = "<!-- train-step:begin -->", "<!-- train-step:end -->"
HOST_BEGIN, HOST_END = "<!-- host-time:begin -->", "<!-- host-time:end -->"


def _shown(path: Path) -> str:
    """``path`` as the README shows it: relative to the working directory where it lies below
    it (``results/h100/validation.json``), else as given; with forward slashes."""
    path = Path(path)
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def validation_summary(path: Path) -> str:
    """Markdown summary of one validation record: environment, pass counts and the largest
    normwise relative error per GEMM path (where the record names it), precision and input
    kind, sanitizer (per stage and path) and determinism results.

    Raises:
        FileNotFoundError: no such record. KeyError: the file is not a validation record.
    """
    import pandas as pd

    record = json.loads(Path(path).read_text())
    env = record["environment"]
    cases = pd.DataFrame(record["cases"])
    cases["inputs"] = cases["input_kind"].where(cases["input_kind"] == "offset", "rand/randn")
    if "path" not in cases:
        cases["path"] = "—"
    table = (cases.groupby(["path", "precision", "inputs"], sort=False)
             .agg(cases=("passed", "size"), passed=("passed", "sum"), max_rel_err=("rel_err", "max"),
                  max_budget=("budget", "max")).reset_index())
    lines = [f"GPU validation on {env['gpu']} (driver {env['driver']}, torch {env['torch']}, CUDA {env['cuda']}): "
             f"{int(cases['passed'].sum())} of {len(cases)} cases pass "
             f"(`{_shown(path)}`).", "",
             "| GEMM path | precision | inputs | cases | passed | max normwise rel. error | max budget |",
             "|---|---|---|---|---|---|---|"]
    for row in table.itertuples(index=False):
        lines.append(f"| {row.path} | {row.precision} | {row.inputs} | {row.cases} | {row.passed} | "
                     f"{row.max_rel_err:.1e} | {row.max_budget:.1e} |")
    failed = cases[~cases["passed"]]
    if len(failed):
        lines += ["", "Failing cases:", ""]
        for row in failed.itertuples(index=False):
            lines.append(f"- {row.problem} {row.stage} {row.mode} {row.precision} {row.shape} seed {row.seed} "
                         f"({row.input_kind}): {row.rel_err:.2e} > budget {row.budget:.1e}")
    tools = ", ".join(f"{s['tool']}/{s['stage']}" + (f"/{s['path']}" if "path" in s else "") + f": {s['errors']}"
                      for s in record["sanitizer"])
    same = all(d["bit_identical"] for d in record["determinism"])
    grads = pd.DataFrame(record.get("gradients", []))
    if len(grads):
        worst = grads.groupby("precision", sort=False)["worst_ratio"].max()
        lines += ["", f"Gradients (the fused backward, `check.run_grad_case`): {int(grads['passed'].sum())} of "
                      f"{len(grads)} cases pass; largest error / budget: "
                      + ", ".join(f"{p} {w:.2f}" for p, w in worst.items()) + "."]
    mixed = pd.DataFrame(record.get("mixed_precision", []))
    if len(mixed):  # tests/test_mixed_precision.py: bf16/fp16 modules and autocast against eager in the dtype
        by = mixed.groupby(["test", "dtype"], sort=False).agg(cases=("passed", "size"), passed=("passed", "sum"),
                                                             worst=("worst_ratio", "max"))
        lines += ["", "Mixed precision (bf16/fp16 modules, each 16-bit GEMM path, autocast; every output, buffer "
                      "and gradient within twice eager PyTorch's error in the dtype): "
                  + "; ".join(f"{test} {dtype} {int(r.passed)} of {int(r.cases)} (worst error / budget {r.worst:.2f})"
                              for (test, dtype), r in by.iterrows()) + "."]
    kb = record.get("kernelbench", [])
    if kb:  # tests/test_kernelbench_eval.py: KernelBench's own check, 5 trials a case
        lines += ["", "KernelBench's correctness check (`eval_kernel_against_ref`'s protocol, "
                      "`python -m fusedlib kernelbench --evaluate`), the fused stage at the KernelBench shapes: "
                  + "; ".join(f"{r['problem']} {r['dtype']} {r['passed_trials']}/{r['trials']}"
                              + ("" if r["passed"] else
                                 f" (error against float64: fused {max(r['fused_rel_err']):.1e}, "
                                 f"eager {max(r['eager_rel_err']):.1e})")
                              for r in kb) + "."]
    lines += ["", f"compute-sanitizer errors: {tools}.",
              f"Reruns on the same input bit-identical (forward and backward): {'yes' if same else 'no'} "
              f"({len(record['determinism'])} stage/precision/shape combinations)."]
    return "\n".join(lines)


def train_step_section(gpu: str = RESULTS_GPU) -> str:
    """Markdown table of the committed train steps (:func:`fusedlib.lab.course.train_step_table`)."""
    from .course import train_step_table
    table = train_step_table(gpu)
    header = "| " + " | ".join(table.columns) + " |"
    def cell(v) -> str:  # times with their three decimals (1.020, not 1.02)
        return "" if v is None or v != v else f"{v:.3f}" if isinstance(v, float) else str(v)
    rows = ["| " + " | ".join(cell(v) for v in r) + " |" for r in table.itertuples(index=False)]
    return "\n".join([header, "|" + "---|" * len(table.columns), *rows])


def _latest(bench):
    """The bench.csv rows with ``problem`` as text, the latest of each problem, shape, mode,
    precision and implementation (a shape timed twice, as the size sweeps repeat 84's, counts once)."""
    key = ["problem", "batch", "in_features", "out_features", "mode", "precision", "impl"]
    return bench.assign(problem=bench.problem.astype(str)).drop_duplicates(key, keep="last")


#: The host-time paragraph's groups of precisions (:func:`host_time_section`): the float32
#: modules and the bf16/fp16 ones, whose forward converts tensors around the kernels.
HOST_GROUPS = ((f"float32 modules ({', '.join(PRECISIONS)})", PRECISIONS), ("bf16/fp16 modules", PRECISIONS_16))


def host_time_section(bench) -> str:
    """The README's host-time paragraph from a bench.csv DataFrame: the CPU time to enqueue one
    forward (column ``host_us``, µs), one sentence per group of :data:`HOST_GROUPS` that has
    fused rows: median and range over the latest rows of the fused stage, ``F.linear``
    (``gemm_only``), eager PyTorch and torch.compile at the KernelBench shapes (every problem,
    mode and precision of the group timed) and at v0, then the fused stage's host time over
    ``F.linear``'s row by row (same problem, shape, mode and precision).

    Raises:
        ValueError: no fused row with a host time at the KernelBench shapes.
    """
    import pandas as pd

    from ..reference import presets_of
    rows = _latest(bench).dropna(subset=["host_us"])
    rows = rows.assign(preset=presets_of(rows))
    if rows[rows.preset.notna() & (rows.preset != "v0") & (rows.impl == "fused")].empty:
        raise ValueError("bench.csv: no fused row with host_us at the KernelBench shapes")

    def stat(df, impl: str) -> str:
        v = df[df.impl == impl].host_us
        return f"{v.median():.0f} µs ({v.min():.0f}–{v.max():.0f})" if len(v) else "not timed"
    names = {"fused": "the fused module", "gemm_only": "`F.linear`", "eager": "eager PyTorch",
             "compile": "torch.compile"}
    key = ["problem", "batch", "in_features", "out_features", "mode", "precision"]
    sentences = []
    for label, precisions in HOST_GROUPS:
        group = rows[rows.precision.isin(precisions)]
        kb = group[group.preset.notna() & (group.preset != "v0")]
        v0 = group[group.preset == "v0"]
        if kb[kb.impl == "fused"].empty:
            continue
        at_kb = ", ".join(f"{names[i]} {stat(kb, i)}" for i in names)
        at_v0 = ", ".join(f"{names[i]} {stat(v0, i)}" for i in ("fused", "gemm_only", "eager"))
        both = pd.concat([kb, v0])
        pairs = both[both.impl == "fused"].merge(both[both.impl == "gemm_only"], on=key, suffixes=("", "_gemm"))
        ratio = pairs.host_us / pairs.host_us_gemm
        row_by_row = (f"; row by row the fused module takes {ratio.median():.2f}× `F.linear`'s host time "
                      f"(median over {len(ratio)} rows, {ratio.min():.2f}–{ratio.max():.2f}×)" if len(ratio) else "")
        sentences.append(f"{label}: at the KernelBench shapes {at_kb}; at v0 {at_v0}{row_by_row}.")
    return ("Host time per forward (the bench's `host_us` column, the CPU time to enqueue one call; median\n"
            "over the rows, then the range):\n" + "".join(f"- {line}\n" for line in sentences) + "\n"
            "The benchmark machine's host CPU (results/<gpu>/env.json) is slow and noisy: compare host times "
            "only within one run.")


#: Order of the table's rows.
_PROBLEM_ORDER, _MODE_ORDER = ("84", "33", "39"), ("train", "eval")


def results_table(bench, presets_only: bool = True) -> str:
    """Markdown timing table from a bench.csv DataFrame (:data:`fusedlib.lab.bench.COLUMNS`).

    One row per problem@shape, mode, precision and implementation (the latest measurement
    of each): median ms; speedup against PyTorch eager and against torch.compile (default)
    = peer median / this median; ratio to GEMM-only = this median / F.linear's median; the
    normwise relative error against float64. Peers are taken at the same precision, except
    for 3xtf32 rows, which are compared with the fp32 peers (the same accuracy class; the
    peers have no 3xTF32). ``presets_only`` keeps the KernelBench shapes (each problem's own
    and v0) and leaves the size sweeps to the figures. Rows are ordered by problem (84, 33,
    39), shape (own preset, v0, others), mode, precision, implementation. The table is preceded
    by :func:`ladder_check`'s paragraph.
    """
    from .bench import COLUMNS
    from .costmodel import IMPLS, PRECISIONS
    from ..reference import presets_of
    missing = [c for c in COLUMNS if c not in bench.columns]
    if missing:
        raise ValueError(f"bench.csv: missing columns {missing}")
    df = _latest(bench)

    df = df.assign(_shape=[2 if p is None else 1 if p == "v0" else 0 for p in presets_of(df)])  # own, v0, others
    if presets_only:
        df = df[df._shape < 2]
    orders = {"problem": _PROBLEM_ORDER, "mode": _MODE_ORDER, "precision": PRECISIONS, "impl": IMPLS}

    def rank(col):  # position in the column's order; unknown values last
        order = orders.get(col.name)
        return col if order is None else col.map({v: i for i, v in enumerate(order)}).fillna(len(order))

    df = df.sort_values(["problem", "_shape", "batch", "in_features", "out_features", "mode", "precision", "impl"],
                        key=rank)
    ladder = ladder_check(bench)
    lines = [ladder, ""] if ladder else []
    lines += ["Speedup = peer time / this time at the same precision (3xtf32 rows: against the fp32 peers); "
              "/ GEMM-only = this time / `F.linear` time; rel. error = ‖y − y64‖/‖y64‖ against float64.", "",
              "| problem @shape | mode | precision | impl | median ms | vs eager | vs compile | / GEMM-only | rel. error |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in df.itertuples(index=False):
        peers_prec = "fp32" if row.precision == "3xtf32" else row.precision
        peers = df[(df.problem == row.problem) & (df.batch == row.batch) & (df.in_features == row.in_features)
                   & (df.out_features == row.out_features) & (df["mode"] == row.mode)
                   & (df.precision == peers_prec)].set_index("impl").median_ms
        speedup = lambda peer: f"{peers[peer] / row.median_ms:.2f}×" if peer in peers else "–"  # noqa: E731
        floor = f"{row.median_ms / peers['gemm_only']:.2f}" if "gemm_only" in peers else "–"
        lines.append(f"| {row.problem} @{row.batch}×{row.in_features}→{row.out_features} | {row.mode} | "
                     f"{row.precision} | {row.impl} | {row.median_ms:.3f} | {speedup('eager')} | "
                     f"{speedup('compile')} | {floor} | {row.rel_err:.1e} |")
    return "\n".join(lines)


#: The ladder's rule: a later stage (naive → fold → sums → fused) may take at most this
#: fraction longer than an earlier one at the same shape, mode and precision.
LADDER_TOLERANCE = 0.02


def ladder_check(bench, tolerance: float = LADDER_TOLERANCE) -> str:
    """One Markdown paragraph: at each problem's KernelBench shape, in both modes and every
    precision, how many pairs (earlier stage, later stage) of naive → fold → sums → fused hold
    ``later ≤ earlier · (1 + tolerance)`` on the median times of ``bench`` (a bench.csv
    DataFrame, the latest row of each implementation), which pairs do not (with the excess in
    %), and 84's tf32 fused / naive time per mode. Empty when no table has all four stages.
    """
    from ..reference import presets_of
    stages = ("naive", "fold", "sums", "fused")
    df = _latest(bench)
    df = df.assign(_preset=presets_of(df))
    pairs, over, ratios = 0, [], []
    for problem in _PROBLEM_ORDER:
        own = df[(df._preset == problem) & df.impl.isin(stages)]
        for (mode, precision), g in own.groupby(["mode", "precision"], sort=False):
            t = g.set_index("impl").median_ms
            if not all(st in t for st in stages):
                continue
            for i, early in enumerate(stages):
                for late in stages[i + 1:]:
                    pairs += 1
                    if t[late] > t[early] * (1 + tolerance):
                        over.append(f"{problem} {mode} {precision} {late} against {early} "
                                    f"+{100 * (t[late] / t[early] - 1):.1f} %")
            if problem == "84" and precision == "tf32":
                ratios.append(f"{mode} {t['fused'] / t['naive']:.2f}")
    if not pairs:
        return ""
    text = (f"Ladder (each problem's KernelBench shape, both modes, every precision): a later stage "
            f"at most {100 * tolerance:.0f} % slower than an earlier one in {pairs - len(over)} of {pairs} stage "
            f"pairs")
    text += ("; slower by more: " + ", ".join(over) + "." if over else ".")
    if ratios:
        text += " 84 tf32 fused / naive: " + ", ".join(ratios) + "."
    return text


def update_results_table(readme: Path, bench) -> bool:
    """Replace the text between :data:`TABLE_BEGIN` and :data:`TABLE_END` in ``readme`` with
    :func:`results_table` of ``bench``. Returns whether the file changed.

    Raises:
        FileNotFoundError: no such README. ValueError: the markers are missing.
    """
    readme = Path(readme)
    old = readme.read_text()
    new = render_readme(old, results_table(bench), TABLE_BEGIN, TABLE_END)
    if new != old:
        readme.write_text(new)
    return new != old


def render_readme(readme: str, summary: str, begin: str = BEGIN, end: str = END) -> str:
    """Replace the text between two markers (each kept, on its own line).

    Raises:
        ValueError: a marker is missing, or ``end`` comes before ``begin``.
    """
    if begin not in readme or end not in readme or readme.index(end) < readme.index(begin):
        raise ValueError(f"README.md: markers {begin} and {end} not found (in that order); "
                         "add them where the generated text belongs")
    head, rest = readme.split(begin, 1)
    return f"{head}{begin}\n{summary}\n{end}{rest.split(end, 1)[1]}"


def add_arguments(parser) -> None:
    parser.add_argument("--gpu", default=RESULTS_GPU, help=f"read results/<gpu>/ (default {RESULTS_GPU})")
    parser.add_argument("--results", type=Path, help="results folder to read instead of results/<gpu>/")
    parser.add_argument("--readme", type=Path, default=Path("README.md"),
                        help="README whose generated sections to rewrite (default README.md)")


def main(args) -> int:
    """Rewrite the README's generated sections from the results folder (paths relative to the
    working directory unless absolute); exit status 2, with one line, when a file or a
    marker is missing."""
    import os
    readme = args.readme
    results = args.results or Path("results") / args.gpu
    if not results.is_dir():
        print(f"error: {results}: no such results folder (give --results DIR or --gpu NAME)", file=sys.stderr)
        return 2
    os.environ["FUSEDLIB_RESULTS"] = str(results)  # fusedlib.lab.course reads the train steps from there
    try:
        text = render_readme(readme.read_text(), validation_summary(results / "validation.json"))
        print(f"{readme}: validation summary from {results / 'validation.json'}")
        if (results / "bench.csv").exists():
            import pandas as pd
            bench = pd.read_csv(results / "bench.csv", dtype={"problem": str})
            text = render_readme(text, results_table(bench), TABLE_BEGIN, TABLE_END)
            print(f"{readme}: results table from {results / 'bench.csv'}")
            text = render_readme(text, host_time_section(bench), HOST_BEGIN, HOST_END)
            print(f"{readme}: host times from {results / 'bench.csv'}")
        if (results / "train_step.csv").exists():
            text = render_readme(text, train_step_section(args.gpu), STEP_BEGIN, STEP_END)
            print(f"{readme}: train steps from {results / 'train_step.csv'}")
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    readme.write_text(text)
    return 0
