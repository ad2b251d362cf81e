"""fusedlib's lab: what measures, explains and reports the library, beside it.

The benchmark (:mod:`~fusedlib.lab.bench`, with its :mod:`~fusedlib.lab.timing` protocol,
:mod:`~fusedlib.lab.records` and :mod:`~fusedlib.lab.profiling`), the train step
(:mod:`~fusedlib.lab.trainstep`), the cost model (:mod:`~fusedlib.lab.costmodel`), the
course's helpers, figures and the README's generated sections (:mod:`~fusedlib.lab.report`).
``import fusedlib`` never imports this package. Its third-party dependencies (pandas,
matplotlib, tqdm: :data:`REQUIREMENTS`) come with the extra ``pip install "fusedlib[lab]"``
(docs/design.md, "Library and lab").
"""
from __future__ import annotations

import importlib.util

#: The lab's dependencies beyond the library's (torch, ninja, numpy): the ``lab`` extra.
REQUIREMENTS = ("pandas", "matplotlib", "tqdm")
#: The command that installs them.
INSTALL_HINT = 'pip install "fusedlib[lab]"'


class LabDependencyError(ImportError):
    """A lab command or helper needs a package of the ``lab`` extra that is not installed."""


def missing(requirements=REQUIREMENTS) -> list[str]:
    """The packages of ``requirements`` that cannot be imported here."""
    return [name for name in requirements if importlib.util.find_spec(name) is None]


def require(what: str = "the fusedlib lab", requirements=REQUIREMENTS) -> None:
    """Raise :class:`LabDependencyError` (one line naming the extra) unless every package of
    ``requirements`` is installed."""
    absent = missing(requirements)
    if absent:
        raise LabDependencyError(f"{what} needs {', '.join(absent)}, from the lab extra: {INSTALL_HINT}")
