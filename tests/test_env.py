"""environment.yml lists exactly the packages of pyproject.toml (dependencies and extras)."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower()


def test_environment_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        wanted |= {_name(r) for r in extra}
    wanted.discard(project["name"])  # an extra that includes another ("fusedlib[lab]")
    text = (ROOT / "environment.yml").read_text()
    pip_section = text.split("- pip:", 1)[1]
    listed = {_name(m) for m in re.findall(r"^\s+- (\S.*)$", pip_section, flags=re.M) if not m.startswith("-e")}
    assert listed == wanted


def test_readme_validation_block_is_generated_from_the_record():
    from fusedlib.lab import report
    from fusedlib.lab.records import RESULTS_GPU
    readme = (ROOT / "README.md").read_text()
    summary = report.validation_summary(ROOT / "results" / RESULTS_GPU / "validation.json")
    assert report.render_readme(readme, summary) == readme, "run `python -m fusedlib report`"
    bench_csv = ROOT / "results" / RESULTS_GPU / "bench.csv"
    if bench_csv.exists():
        import pandas as pd
        bench = pd.read_csv(bench_csv, dtype={"problem": str})
        table = report.results_table(bench)
        assert report.render_readme(readme, table, report.TABLE_BEGIN, report.TABLE_END) == readme
        host = report.host_time_section(bench)
        assert report.render_readme(readme, host, report.HOST_BEGIN, report.HOST_END) == readme
    if (ROOT / "results" / RESULTS_GPU / "train_step.csv").exists():
        steps = report.train_step_section(RESULTS_GPU)
        assert report.render_readme(readme, steps, report.STEP_BEGIN, report.STEP_END) == readme
