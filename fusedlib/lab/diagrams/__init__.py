"""Pictures of the kernels drawn by code (matplotlib), for the notebooks and the exported figures.

One module per part of the course; each defines ``FIGURES``, a dict from a figure's file stem
to a function returning a matplotlib Figure, which ``python -m fusedlib figures`` exports.
"""
