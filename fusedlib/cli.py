"""Command line: ``python -m fusedlib {info,check,bench,train-step,figures,report,kernelbench}``.

Each sub-command lives in its own module exposing ``add_arguments(parser)`` and
``main(args) -> int`` (the exit status); this file only dispatches, importing the
module of the chosen command lazily so that ``info`` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys

#: sub-command -> (module, one-line help)
COMMANDS = {
    "info": ("fusedlib.info", "python, torch, CUDA device and capability, nvcc, build cache"),
    "check": ("fusedlib.check", "compare stages with a float64 reference; exit 1 on any failure"),
    "bench": ("fusedlib.bench", "time stages and peers on the GPU into results/<gpu>/bench.csv"),
    "train-step": ("fusedlib.trainstep", "time forward + backward (a train step) of stages and peers, with peak "
                   "memory and gradient error, into results/<gpu>/train_step.csv"),
    "figures": ("fusedlib.figures", "draw the roofline, throughput, breakdown and ladder figures from committed CSVs"),
    "report": ("fusedlib.report", "regenerate the README's result sections from committed results"),
    "kernelbench": ("fusedlib.kernelbench", "write a KernelBench ModelNew source for a problem, stage and precision"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fusedlib", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the sub-command; returns its exit status."""
    args = build_parser().parse_args(argv)
    return int(importlib.import_module(args._module).main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
