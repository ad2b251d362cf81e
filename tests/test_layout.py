"""The library/lab boundary (docs/design.md §13): ``import fusedlib`` imports neither the lab nor
its packages, no library module imports the lab (the command line only dispatches to it),
the library's modules import each other without a circle, and the command line's rough edges:
``--version`` from one definition, a lab command without its extra, errors on one line."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

import fusedlib
from fusedlib import cli, lab
from fusedlib.reference import Shape, parse_shape

PKG = Path(fusedlib.__file__).resolve().parent
#: The library's modules (docs/design.md §13); everything else under fusedlib/ is the lab's.
LIBRARY = ("__init__", "__main__", "_version", "algebra", "build", "check", "cli", "cuda", "engine", "info",
           "kernelbench", "modules", "ops", "reference")


def _imports(module: str) -> set[str]:
    """The fusedlib modules ``fusedlib.<module>`` imports anywhere in its source (lazy imports
    inside functions included), as dotted names below fusedlib (``lab.bench``, ``ops``)."""
    tree = ast.parse((PKG / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module or ""
            elif node.level == 0 and (node.module or "").startswith("fusedlib"):
                base = node.module[len("fusedlib"):].lstrip(".")
            else:
                continue
            if base:
                found.add(base)
            else:
                found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name[len("fusedlib."):] for a in node.names if a.name.startswith("fusedlib.")}
    return found


def test_import_fusedlib_imports_no_lab():
    # torch itself imports tqdm where it is installed: only what fusedlib adds counts
    code = ("import sys, torch; before = set(sys.modules); import fusedlib; "
            "bad = [m for m in ('fusedlib.lab', 'pandas', 'matplotlib', 'tqdm') "
            "if m in sys.modules and m not in before]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, f"import fusedlib imported {proc.stdout.strip()} {proc.stderr[-500:]}"


@pytest.mark.parametrize("module", [m for m in LIBRARY if m != "cli"])
def test_library_modules_do_not_import_the_lab(module):
    lab_imports = {m for m in _imports(module) if m == "lab" or m.startswith("lab.")}
    assert not lab_imports, f"fusedlib.{module} imports {lab_imports}"


def test_library_imports_have_no_circle():
    graph = {m: {i.split(".")[0] for i in _imports(m)} & set(LIBRARY) - {"__init__"} for m in LIBRARY}
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            assert state.get(nxt) != "open", f"import circle: {' -> '.join(path + [nxt])}"
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"
    for module in LIBRARY:
        if module not in state:
            visit(module, [module])


def test_version_has_one_definition(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"fusedlib {fusedlib.__version__}"
    pyproject = (PKG.parent / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "fusedlib._version.__version__" in pyproject


def test_lab_command_without_its_extra_names_it(monkeypatch, capsys):
    monkeypatch.setattr(lab, "missing", lambda requirements=lab.REQUIREMENTS: ["pandas"])
    assert cli.main(["report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'pip install "fusedlib[lab]"' in err[0] and "pandas" in err[0]


def test_kernelbench_unwritable_output_is_one_line(tmp_path, capsys):
    assert cli.main(["kernelbench", "--problem", "84", "-o", str(tmp_path / "no" / "dir" / "x.py")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "x.py" in err[0]


def test_figures_missing_results_folder_is_an_error(tmp_path, capsys):
    out = tmp_path / "figures"
    assert cli.main(["figures", "--results", str(tmp_path / "none"), "--out", str(out), "--no-readme"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none" in err[0] and not out.exists()


def test_report_missing_results_folder_is_an_error(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("x\n")
    assert cli.main(["report", "--results", str(tmp_path / "none"), "--readme", str(readme)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1 and readme.read_text() == "x\n"


def test_shell_safe_shape_syntax():
    assert parse_shape("64x256:128") == parse_shape("64x256->128") == Shape(64, 256, 128)
    with pytest.raises(ValueError, match="NxK:M"):
        parse_shape("64x256")
