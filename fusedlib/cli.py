"""Command line: ``python -m fusedlib {info,check,kernelbench,bench,train-step,sync-bench,figures,report}``.

Each sub-command lives in its own module exposing ``add_arguments(parser)`` and
``main(args) -> int`` (the exit status); this file only dispatches, importing the
module of the chosen command lazily so that ``info`` stays fast. ``info``, ``check`` and
``kernelbench`` are the library's and need only its dependencies; ``bench``,
``train-step``, ``sync-bench``, ``figures`` and ``report`` are the lab's (:mod:`fusedlib.lab`): without
its extra they stop with one line naming it. Every error a command reports is one line on
standard error and a non-zero exit status (2: bad arguments or files, 1: a check failed).
"""
from __future__ import annotations

import argparse
import importlib
import sys

from ._version import __version__

#: sub-command -> (module, one-line help)
COMMANDS = {
    "info": ("fusedlib.info", "python, torch, CUDA device and capability, nvcc, build cache"),
    "check": ("fusedlib.check", "compare stages with a float64 reference; exit 1 on any failure"),
    "kernelbench": ("fusedlib.kernelbench", "write a KernelBench ModelNew source for a problem, stage and precision"),
    "bench": ("fusedlib.lab.bench", "(lab) time stages and peers on the GPU into results/<gpu>/bench.csv"),
    "train-step": ("fusedlib.lab.trainstep", "(lab) time forward + backward (a train step) of stages and peers, "
                   "with peak memory and gradient error, into results/<gpu>/train_step.csv"),
    "sync-bench": ("fusedlib.lab.syncbench", "(lab) time the data-parallel DDP train step on several GPUs (NCCL) into "
                   "results/<gpu>/sync.csv"),
    "figures": ("fusedlib.lab.figures", "(lab) draw the roofline, throughput, in_features, breakdown and ladder figures "
                "from committed CSVs"),
    "report": ("fusedlib.lab.report", "(lab) regenerate the README's result sections from committed results"),
}
#: The commands of the lab: they need the ``lab`` extra (pandas, matplotlib, tqdm).
LAB_COMMANDS = ("bench", "train-step", "sync-bench", "figures", "report")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m fusedlib``: ``--version`` and one sub-command each for the
    library's commands (info, check, kernelbench) and the lab's (bench, train-step, sync-bench,
    figures, report), whose options each module adds (``add_arguments``)."""
    parser = argparse.ArgumentParser(prog="python -m fusedlib", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fusedlib {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the sub-command; returns its exit status. A lab command
    without the lab extra, and a file the command cannot read or write, end in one line
    on standard error and exit status 2."""
    args = build_parser().parse_args(argv)
    if args.command in LAB_COMMANDS:
        from .lab import LabDependencyError, require
        try:
            require(f"python -m fusedlib {args.command}")
        except LabDependencyError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        return int(importlib.import_module(args._module).main(args) or 0)
    except OSError as exc:  # a path that does not exist, cannot be written, ...
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
