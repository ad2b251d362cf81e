"""The course's exercises: every check accepts its solution and rejects its known-wrong answer,
and every exercise is used by its notebook."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from fusedlib.lab.exercises import ExerciseError, all_exercises

EXERCISES = all_exercises()
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


CPU = sorted(k for k, ex in EXERCISES.items() if not ex.gpu)
GPU = sorted(k for k, ex in EXERCISES.items() if ex.gpu)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="the check runs kernels: needs a CUDA GPU")


@pytest.mark.parametrize("key", CPU + [pytest.param(k, marks=[pytest.mark.gpu, needs_cuda]) for k in GPU])
def test_check_accepts_the_solution(key, capsys):
    ex = EXERCISES[key]
    ex.check(ex.solution)
    assert capsys.readouterr().out.startswith("✓ ")


@pytest.mark.parametrize("key", CPU + [pytest.param(k, marks=[pytest.mark.gpu, needs_cuda]) for k in GPU])
def test_check_rejects_the_wrong_answer(key):
    ex = EXERCISES[key]
    with pytest.raises(ExerciseError):
        ex.check(ex.wrong)


@pytest.mark.skipif(torch.cuda.is_available() or shutil.which("nvcc") is None,
                    reason="the CPU side of a GPU check: no CUDA device, nvcc present")
@pytest.mark.parametrize("key", GPU)
def test_gpu_check_without_a_gpu_compiles_the_answer(key):
    """Without a CUDA device a GPU exercise's check compiles the answer: the solution compiles and
    is reported as not run; an answer that breaks the source is reported with nvcc's error."""
    ex = EXERCISES[key]
    with pytest.raises(ExerciseError, match="compiles; running it needs a CUDA GPU"):
        ex.check(ex.solution)

    def broken(kernels):
        ex.solution(kernels)
        (kernels / "epilogue.cuh").write_text((kernels / "epilogue.cuh").read_text() + "\nthis is not C++;\n")
    with pytest.raises(ExerciseError, match="does not compile"):
        ex.check(broken)


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
