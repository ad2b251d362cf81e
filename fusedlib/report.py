"""``python -m fusedlib report``: README sections generated from committed GPU results.

Between ``<!-- validation:begin -->`` and ``<!-- validation:end -->``: the summary of
``results/<gpu>/validation.json`` (:func:`validation_summary`); between
``<!-- results-table:begin -->`` and ``<!-- results-table:end -->``: the timing table of
``results/<gpu>/bench.csv`` (:func:`results_table`). Tests keep the README in step with
the records, so every number the README shows comes from a committed result.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- validation:begin -->", "<!-- validation:end -->"
TABLE_BEGIN, TABLE_END = "<!-- results-table:begin -->", "<!-- results-table:end -->"


def validation_summary(path: Path) -> str:
    """Markdown summary of one validation record: environment, pass counts and the largest
    normwise relative error per precision and input kind, sanitizer and determinism results.

    Raises:
        FileNotFoundError: no such record. KeyError: the file is not a validation record.
    """
    import pandas as pd

    record = json.loads(Path(path).read_text())
    env = record["environment"]
    cases = pd.DataFrame(record["cases"])
    cases["inputs"] = cases["input_kind"].where(cases["input_kind"] == "offset", "rand/randn")
    table = (cases.groupby(["precision", "inputs"], sort=False)
             .agg(cases=("passed", "size"), passed=("passed", "sum"), max_rel_err=("rel_err", "max"),
                  max_budget=("budget", "max")).reset_index())
    lines = [f"GPU validation on {env['gpu']} (driver {env['driver']}, torch {env['torch']}, CUDA {env['cuda']}): "
             f"{int(cases['passed'].sum())} of {len(cases)} cases pass "
             f"(`{Path(path).relative_to(ROOT).as_posix()}`).", "",
             "| precision | inputs | cases | passed | max normwise rel. error | max budget |",
             "|---|---|---|---|---|---|"]
    for row in table.itertuples(index=False):
        lines.append(f"| {row.precision} | {row.inputs} | {row.cases} | {row.passed} | "
                     f"{row.max_rel_err:.1e} | {row.max_budget:.1e} |")
    failed = cases[~cases["passed"]]
    if len(failed):
        lines += ["", "Failing cases:", ""]
        for row in failed.itertuples(index=False):
            lines.append(f"- {row.problem} {row.stage} {row.mode} {row.precision} {row.shape} seed {row.seed} "
                         f"({row.input_kind}): {row.rel_err:.2e} > budget {row.budget:.1e}")
    tools = ", ".join(f"{s['tool']}/{s['stage']}: {s['errors']}" for s in record["sanitizer"])
    same = all(d["bit_identical"] for d in record["determinism"])
    lines += ["", f"compute-sanitizer errors: {tools}.",
              f"Ten reruns on the same input bit-identical: {'yes' if same else 'no'} "
              f"({len(record['determinism'])} stage/precision/shape combinations)."]
    return "\n".join(lines)


def results_table(bench) -> str:
    """Markdown table from a bench.csv DataFrame (:data:`fusedlib.bench.COLUMNS`): for each
    problem@shape, mode and precision, every implementation's median ms, speedup against
    eager and against torch.compile (default) at the same precision (fp32 peers for 3xtf32,
    which the peers lack), ratio to GEMM-only, and relative error. Latest row per key wins."""
    key = ["problem", "batch", "in_features", "out_features", "mode", "precision", "impl"]
    df = bench.drop_duplicates(key, keep="last")
    lines = ["| problem @shape | mode | precision | impl | median ms | vs eager | vs compile | / GEMM-only | rel. error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (problem, n, k, m, mode, precision), g in df.groupby(key[:-1], sort=False):
        peers_prec = "fp32" if precision == "3xtf32" else precision
        peers = df[(df.problem == problem) & (df.batch == n) & (df.in_features == k) & (df.out_features == m)
                   & (df["mode"] == mode) & (df.precision == peers_prec)].set_index("impl").median_ms
        for row in g.itertuples(index=False):
            ratio = lambda peer: f"{peers[peer] / row.median_ms:.2f}×" if peer in peers else "–"  # noqa: E731
            floor = f"{row.median_ms / peers['gemm_only']:.2f}" if "gemm_only" in peers else "–"
            lines.append(f"| {problem} @{n}×{k}→{m} | {mode} | {precision} | {row.impl} | {row.median_ms:.3f} | "
                         f"{ratio('eager')} | {ratio('compile')} | {floor} | {row.rel_err:.1e} |")
    return "\n".join(lines)


def render_readme(readme: str, summary: str, begin: str = BEGIN, end: str = END) -> str:
    """Replace the text between two markers. Raises ValueError if they are missing."""
    if begin not in readme or end not in readme:
        raise ValueError(f"README.md: markers {begin} and {end} not found")
    head, rest = readme.split(begin, 1)
    return f"{head}{begin}\n{summary}\n{end}{rest.split(end, 1)[1]}"


def add_arguments(parser) -> None:
    parser.add_argument("--gpu", default="h100", help="results/<gpu>/validation.json to summarise")


def main(args) -> int:
    readme = ROOT / "README.md"
    results = ROOT / "results" / args.gpu
    text = render_readme(readme.read_text(), validation_summary(results / "validation.json"))
    print(f"README.md: validation summary from results/{args.gpu}/validation.json")
    if (results / "bench.csv").exists():
        import pandas as pd
        table = results_table(pd.read_csv(results / "bench.csv", dtype={"problem": str}))
        text = render_readme(text, table, TABLE_BEGIN, TABLE_END)
        print(f"README.md: results table from results/{args.gpu}/bench.csv")
    readme.write_text(text)
    return 0
