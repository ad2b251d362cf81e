"""run280's trace (lab/experiments/run280.sh): one traced train forward of 84's fused module at its
KernelBench shape (bf16 or tf32: argv[1]) with the row units ($FUSEDLIB_ROWS_TRACE: consumer thread 0 of
each CTA prints its times, %globaltimer ns, at the end of its units), after a warm-up; then the summary:
per event, the CTAs' times from the earliest CTA start (µs: min, median, max)."""
import os
import subprocess
import sys

if len(sys.argv) > 2:  # the traced process
    import torch

    import fusedlib
    from fusedlib.lab.bench import bench_input
    from fusedlib.reference import PRESETS, make_reference
    sh = PRESETS["84"]
    ref = make_reference("84", sh.in_features, sh.out_features, seed=0).cuda()
    x = bench_input(sh, 0, sys.argv[1]).cuda()
    mod = fusedlib.from_reference(ref, stage="fused", precision="tf32").to(x.dtype)
    with torch.no_grad():
        for _ in range(20):
            mod(x)
        torch.cuda.synchronize()
        os.environ["FUSEDLIB_ROWS_TRACE"] = "1"
        mod(x)
        torch.cuda.synchronize()
    sys.exit(0)

import numpy as np  # noqa: E402

out = subprocess.run([sys.executable, __file__, sys.argv[1], "child"], capture_output=True, text=True).stdout
rows = [list(map(int, line.split()[1:])) for line in out.splitlines() if line.startswith("TRACE")]
a = np.array(rows, dtype=np.float64)
t0 = a[:, 1].min()
rel = lambda v: (v - t0) / 1e3  # noqa: E731
print(f"{len(a)} CTAs")
def show(name, v):
    v = v[v > 0]
    if len(v):
        r = rel(v)
        print(f"{name:28s} n={len(r):3d}  min {r.min():7.1f}  median {np.median(r):7.1f}  max {r.max():7.1f}")
show("tiles end", a[:, 2]); show("flushed", a[:, 3])
for j in range(4):
    k, s, e = a[:, 4 + 3 * j], a[:, 5 + 3 * j], a[:, 6 + 3 * j]
    for kind, name in ((1, "merge"), (2, "row unit")):
        m = k == kind
        show(f"unit {j} {name} start", s[m]); show(f"unit {j} {name} end", e[m])
show("row unit waits passed", a[:, 16]); show("row unit rows copied", a[:, 17])
durations = [(a[:, 6 + 3 * j] - a[:, 5 + 3 * j])[(a[:, 4 + 3 * j] == 2)] / 1e3 for j in range(4)]
d = np.concatenate(durations)
if len(d):
    print(f"row unit durations µs: min {d.min():.1f} median {np.median(d):.1f} max {d.max():.1f}")
w = (a[:, 17] - a[:, 16])[a[:, 16] > 0] / 1e3
if len(w):
    print(f"copy (first batch) µs: min {w.min():.1f} median {np.median(w):.1f} max {w.max():.1f}")
