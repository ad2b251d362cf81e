"""run83: where a fused forward's host time goes (issue: host overhead per forward). For the
fused stage at 84's KernelBench shape and v0, tf32 and 3xtf32, train and eval, no grad:
the median host time of one call (perf_counter around the call, the GPU idle before it),
F.linear's beside it, then cProfile's top functions over 200 calls of the 3xtf32 train forward."""
import cProfile
import pstats
import statistics
import time

import torch

import fusedlib
from fusedlib.reference import PRESETS, make_reference


def host_us(fn, x, n=200):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn(x)
        ts.append((time.perf_counter() - t) * 1e6)
    return statistics.median(ts)


for shape in ("84", "v0"):
    sh = PRESETS[shape]
    ref = make_reference("84", sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.rand(sh.batch, sh.in_features, device="cuda")
    with torch.no_grad():
        lin = lambda x: torch.nn.functional.linear(x, ref.gemm.weight, ref.gemm.bias)
        lin(x)
        print(f"{shape:3s} F.linear            host {host_us(lin, x):7.1f} us", flush=True)
        for precision in ("tf32", "3xtf32"):
            for mode in ("train", "eval"):
                m = fusedlib.from_reference(ref, stage="fused", precision=precision)
                m.train(mode == "train")
                m(x)
                print(f"{shape:3s} fused {precision:6s} {mode:5s} host {host_us(m, x):7.1f} us", flush=True)
        m = fusedlib.from_reference(ref, stage="fused", precision="3xtf32").train()
        m(x)
        torch.cuda.synchronize()
        pr = cProfile.Profile()
        pr.enable()
        for i in range(200):
            m(x)
            if i % 10 == 9:
                torch.cuda.synchronize()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(14)
