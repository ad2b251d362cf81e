"""``python -m fusedlib report``: README sections generated from committed GPU results.

The block between ``<!-- validation:begin -->`` and ``<!-- validation:end -->`` in
README.md is the summary of ``results/<gpu>/validation.json`` made by
:func:`validation_summary`; a test keeps the README in step with the record, so every
number the README shows comes from a committed result.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- validation:begin -->", "<!-- validation:end -->"


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


def render_readme(readme: str, summary: str) -> str:
    """Replace the text between the validation markers. Raises ValueError if they are missing."""
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"README.md: markers {BEGIN} and {END} not found")
    head, rest = readme.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{summary}\n{END}{rest.split(END, 1)[1]}"


def add_arguments(parser) -> None:
    parser.add_argument("--gpu", default="h100", help="results/<gpu>/validation.json to summarise")


def main(args) -> int:
    readme = ROOT / "README.md"
    path = ROOT / "results" / args.gpu / "validation.json"
    readme.write_text(render_readme(readme.read_text(), validation_summary(path)))
    print(f"README.md: validation summary from {path.relative_to(ROOT)}")
    return 0
