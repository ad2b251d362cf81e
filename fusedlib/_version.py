"""The one definition of fusedlib's version: pyproject.toml reads it (``dynamic``),
``fusedlib.__version__`` and ``python -m fusedlib --version`` show it."""
__version__ = "0.1.0"
