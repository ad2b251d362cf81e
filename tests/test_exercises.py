"""The course's exercises: every check accepts its solution and rejects its known-wrong answer,
and every exercise is used by its notebook."""
import json
from pathlib import Path

import pytest

from fusedlib.lab.exercises import ExerciseError, all_exercises

EXERCISES = all_exercises()
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_check_accepts_the_solution(key, capsys):
    ex = EXERCISES[key]
    ex.check(ex.solution)
    assert capsys.readouterr().out.startswith("✓ ")


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_check_rejects_the_wrong_answer(key):
    ex = EXERCISES[key]
    with pytest.raises(ExerciseError):
        ex.check(ex.wrong)


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_notebook_runs_the_check(key):
    ex = EXERCISES[key]
    [path] = NOTEBOOKS.glob(f"{ex.notebook[2:]}_*.ipynb")
    code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    assert f"{ex.notebook}.check_{ex.name}(" in code, f"{path.name} never calls {ex.notebook}.check_{ex.name}"


def test_every_stage_notebook_has_two_exercises():
    counts = {f"nb{n:02d}": 0 for n in range(1, 10)}
    for ex in EXERCISES.values():
        counts[ex.notebook] = counts.get(ex.notebook, 0) + 1
    few = {nb: c for nb, c in counts.items() if c < 2}
    assert not few, f"notebooks with fewer than two exercises: {few}"
