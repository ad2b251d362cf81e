"""run162 (one GPU): is the fp32 fused backward's d scale at offset 1000 within 1e-5 on ONE GPU
at the row counts test_sync_gpu's new case uses (24 + 5700 = 5724), or does only the
data-parallel step exceed it (run163's 84/fused/fp32/24+5700/offset 1000: 3.35e-05)? One process,
the concatenated batch, errors of every quantity against float64 (tests/test_sync_gpu.py's
helpers and its float64 reference)."""
import os
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
import copy  # noqa: E402

import test_sync_gpu as t  # noqa: E402

header = False
for kind in ("84", "33"):
    for n, offset in ((256, 1000.0), (1824, 1000.0), (5724, 1000.0), (5724, 3.0)):
        x, dy = t._batch(n, offset)
        want = t._step(copy.deepcopy(t._reference(kind)).double(), x.double(), dy.double())
        got = t._step(t._fused(kind, "fused", "fp32", False), x.cuda(), dy.cuda())
        errs = [t._rel(got["y"], want["y"]), t._rel(got["dx"], want["dx"])]
        names = [k for k in want["grads"] if k != "gemm.bias"]  # (the model's parameter order: scale first)
        errs += [t._rel(got["grads"][k], want["grads"][k]) for k in names]
        if not header:  # the columns named in the order they are printed
            print("kind rows offset | " + " ".join(f"{q:>10}" for q in ["Y", "dX", *(f"d {k}" for k in names)]))
            header = True
        print(kind, n, offset, "|", " ".join(f"{e:10.2e}" for e in errs))
