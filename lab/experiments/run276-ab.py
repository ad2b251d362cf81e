"""run276–run279's timing (lab/experiments/run276.sh … run279.sh): the fused stage's train-mode forward with its row pass
as the persistent GEMM's row units (the default) against the pass of its own
($FUSEDLIB_ROWS_IN_GEMM=0), with F.linear (cuBLAS) as the floor, in one interleaved table a shape and
precision (timing.time_round_robin: L2 flushed before each call, rounds rotated), the GPU's time alone
beside the median (hold 2000 µs). argv: problems, precisions, and (run277, run278) `debug` for the
kernels' diagnostic switches. Prints µs and the ratios to F.linear; writes run27x-ab.csv to $OUT."""
import contextlib
import os
import sys

import torch

import fusedlib
from fusedlib.lab import timing
from fusedlib.lab.profiling import profile_kernels
from fusedlib.lab.bench import bench_input
from fusedlib.reference import PRESETS, make_reference


@contextlib.contextmanager
def env(name, value):
    os.environ[name] = value
    try:
        yield
    finally:
        del os.environ[name]


def rows_off():
    return env("FUSEDLIB_ROWS_IN_GEMM", "0")


def debug(bits):  # the row units without their bodies (1), without their waits (2), without both (3)
    return lambda: env("FUSEDLIB_ROWS_DEBUG", str(bits))


rows = []
for problem in sys.argv[1].split(","):
    sh = PRESETS[problem]
    for prec in sys.argv[2].split(","):
        ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
        x = bench_input(sh, 0, prec).cuda()
        dtype = x.dtype
        mod = fusedlib.from_reference(ref, stage="fused", precision="tf32").to(dtype)
        w, b = ref.gemm.weight.to(dtype), ref.gemm.bias.to(dtype)
        fns = {"rows": (lambda v: mod(v), None), "pass": (lambda v: mod(v), rows_off)}
        if len(sys.argv) > 3:  # run277, run278: the kernels' diagnostic switches
            fns.update({"nobody": (lambda v: mod(v), debug(1)), "nowait": (lambda v: mod(v), debug(2)),
                        "neither": (lambda v: mod(v), debug(3))})
        fns["gemm_only"] = (lambda v: torch.nn.functional.linear(v, w, b), "tf32" if dtype == torch.float32 else None)
        with torch.no_grad():
            ya = mod(x)
            with rows_off():
                yb = mod(x)
            same = torch.equal(ya, yb)
            t = timing.time_round_robin(fns, x, warmup=20, iters=300, rounds=6, hold_us=2000)
            kernels = {"rows": profile_kernels(mod, x, calls=10)}
            with rows_off():
                kernels["pass"] = profile_kernels(mod, x, calls=10)
        for name, ks in kernels.items():
            print(f"  {name}: " + "; ".join(f"{k.split('(')[0][-60:]} x{n} {us:.1f} us" for k, n, us in ks), flush=True)
        lin = t["gemm_only"]
        for name, (med, lo, hi, host, dev) in t.items():
            rows.append(dict(problem=problem, precision=prec, impl=name, median_us=1e3 * med, device_us=1e3 * dev,
                             host_us=host, over_linear=med / lin[0], device_over_linear=dev / lin[4], same_bits=same))
        print(f"{problem} {prec}: " + "  ".join(f"{n} {1e3 * v[0]:7.1f} ({1e3 * v[4]:7.1f}) {v[0] / lin[0]:5.3f}"
                                               for n, v in t.items()) + f"  bits equal: {same}", flush=True)
import pandas as pd  # noqa: E402

df = pd.DataFrame(rows)
df.to_csv(os.path.join(os.environ.get("OUT", "."), "run27x-ab.csv"), index=False)
print(df.round(3).to_string(index=False))
