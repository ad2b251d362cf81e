"""tools/relocate_imports.py: the tree is consistent (nothing to relocate, so every import of a
moved module points at its place), and its rewrites on hand-made text are the intended ones and
idempotent."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("relocate_imports", ROOT / "tools" / "relocate_imports.py")
relocate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(relocate)


def test_the_tree_needs_no_relocation(capsys):
    assert relocate.main(["--check"]) == 0, capsys.readouterr().out


def test_lab_modules_are_read_from_the_tree():
    lab = relocate.lab_only()
    assert {"bench", "costmodel", "report", "trainstep", "timing", "records", "profiling"} <= lab
    assert not lab & {"algebra", "build", "check", "modules", "ops", "reference"}


@pytest.mark.parametrize("before,after", [
    ("from fusedlib.bench import time_cuda\n", "from fusedlib.lab.bench import time_cuda\n"),
    ("see fusedlib/costmodel.py and fusedlib.report.results_table\n",
     "see fusedlib/lab/costmodel.py and fusedlib.lab.report.results_table\n"),
    ("from fusedlib import algebra, costmodel, check  # helpers\n",
     "from fusedlib import algebra, check\nfrom fusedlib.lab import costmodel  # helpers\n"),
    ("python -m fusedlib bench\n", "python -m fusedlib bench\n"),
])
def test_absolute_rewrites(before, after):
    lab = {"bench", "costmodel", "report"}
    assert relocate.fix_absolute(before, lab, notebook=False) == after
    assert relocate.fix_absolute(after, lab, notebook=False) == after


def test_notebook_source_line_is_split_into_two_lines():
    before = '    "from fusedlib import algebra, costmodel\\n",\n'
    after = '    "from fusedlib import algebra\\n",\n    "from fusedlib.lab import costmodel\\n",\n'
    assert relocate.fix_absolute(before, {"costmodel"}, notebook=True) == after
    assert relocate.fix_absolute(after, {"costmodel"}, notebook=True) == after


def test_relative_imports_follow_the_module():
    text = "from .reference import PRESETS\nfrom .bench import COLUMNS\nfrom . import engine\n"
    fixed = relocate.fix_relative(text, ["lab"])       # a module of fusedlib/lab/
    assert fixed == "from ..reference import PRESETS\nfrom .bench import COLUMNS\nfrom .. import engine\n"
    assert relocate.fix_relative(fixed, ["lab"]) == fixed
    assert relocate.fix_relative("from .costmodel import cost\n", []) == "from .lab.costmodel import cost\n"
    assert relocate.fix_root("ROOT = Path(__file__).resolve().parent.parent\n", 3) == \
        "ROOT = Path(__file__).resolve().parent.parent.parent\n"
