"""The course's exercises: for each, a check that fails on a wrong answer, a solution the
learner opens when stuck (``fusedlib/lab/exercises/solutions/nbXX.py``) and a known-wrong answer
the tests use to show that the check can fail.

In a notebook::

    from fusedlib.lab.exercises import nb07
    nb07.check_fresh_split(FreshSplit)      # raises ExerciseError naming what is wrong,
                                            # or prints one line saying what it verified

The answer cell a notebook gives the learner raises NotImplementedError until it is filled in,
and the check cell carries the tags ``raises-exception`` and ``nbval-ignore-output``: the
notebook runs top to bottom as shipped, and the check reports "not answered yet".

Each ``nbXX`` module defines its checks with :func:`exercise`; :func:`all_exercises` imports
them all (the tests run every check against its solution and its wrong answer).
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable


class ExerciseError(AssertionError):
    """A learner's answer is wrong; the message says how."""


@dataclass(frozen=True)
class Exercise:
    """One exercise: ``check(answer)`` raises :class:`ExerciseError` unless the answer is right;
    ``solution`` and ``wrong`` are answers (functions, classes or values) it must accept and
    reject."""
    notebook: str
    name: str
    check: Callable[[Any], None]
    solution: Any
    wrong: Any
    gpu: bool = False  # the check runs kernels: without a CUDA GPU it can only compile the answer


REGISTRY: dict[str, Exercise] = {}


def expect(condition: bool, message: str) -> None:
    """Raise :class:`ExerciseError` with ``message`` when ``condition`` is false."""
    if not condition:
        raise ExerciseError(message)


def exercise(solution: Any, wrong: Any, verified: str, gpu: bool = False):
    """Register the decorated ``check_<name>(answer)`` of module ``nbXX`` with its ``solution``
    and a known-``wrong`` answer; on success the check prints "✓ <verified>". ``gpu``: the
    check needs a CUDA GPU to tell right from wrong (without one it raises ExerciseError saying
    so, after what it can check)."""
    def register(check: Callable[[Any], None]) -> Callable[[Any], None]:
        notebook = check.__module__.rsplit(".", 1)[-1]
        name = check.__name__.removeprefix("check_")

        @functools.wraps(check)
        def run(answer: Any) -> None:
            try:
                check(answer)
            except NotImplementedError:
                raise ExerciseError("not answered yet: write your answer in the cell above the check") from None
            print(f"✓ {verified}")

        REGISTRY[f"{notebook}.{name}"] = Exercise(notebook, name, run, solution, wrong, gpu)
        return run
    return register


def all_exercises() -> dict[str, Exercise]:
    """Every exercise of every ``nbXX`` module, keyed "nbXX.name"."""
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("nb"):
            importlib.import_module(f"{__name__}.{info.name}")
    return dict(REGISTRY)
