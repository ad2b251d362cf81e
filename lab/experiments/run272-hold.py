"""run272: the bench's and the train step's times with the stream held while the host enqueues.

Each timed call of the harness (fusedlib.lab.timing._timed_call: L2 flush, start event, the call,
end event, synchronize) measures the GPU's time from the start event to the end event; where the
host takes longer to enqueue the call than the GPU to run it, that time includes the GPU's wait for
the host. Here, with HOLD_US > 0, a spinning kernel (torch.cuda._sleep) of HOLD_US µs runs after the
flush and before the start event, so the host has enqueued the whole call before its first kernel
can start (nvbench's blocking kernel, the same idea): the time is the device's alone. The host time
is measured as before (the host clock around the call). Usage:
HOLD_US=2000 python lab/experiments/run272-hold.py bench|train-step <the CLI's options>. (The
harness's ``--hold-us`` now times the held calls beside the method's, in the column device_ms.)
"""
import os
import sys

import torch

from fusedlib.cli import main
from fusedlib.lab import timing

HOLD_US = float(os.environ.get("HOLD_US", "0"))
_plain = timing._timed_call


def _held(fn, x, flush, hold=0):
    return _plain(fn, x, flush, CYCLES)  # the flush, the spin, start event, the call, end event, synchronize


if __name__ == "__main__":
    if HOLD_US > 0:
        CYCLES = timing.hold_cycles(torch.zeros(1, device="cuda"), HOLD_US)
        print(f"hold: {HOLD_US:.0f} us = {CYCLES} cycles", file=sys.stderr)
        timing._timed_call = _held
    sys.exit(main(sys.argv[1:]))
