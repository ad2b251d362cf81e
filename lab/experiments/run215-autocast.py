"""run215 (prepared; one H100 or H200; issue 36's item 5): where the autocast-bf16 train step of 33
spends its time. run212's train_step.csv puts the fused stage's step under
torch.autocast("cuda", dtype=torch.bfloat16) at 0.88 × eager's at 33 (0.845 against 0.958 ms; issue
36 asks ≤ 0.85), where 84's is 0.715 and 39's 0.78, and the bf16 module's step at 33 is 0.78.

For 33 and 84 at their KernelBench shapes, the train step exactly as `python -m fusedlib train-step
--precision autocast-bf16` builds and runs it (fusedlib.lab.trainstep: train_step, step_context,
build_precision; bench.build_impl) for the fused and sums stages and eager PyTorch: every device
kernel of one step (fusedlib.lab.profiling: 10 calls after an L2 flush each), by name, with the
casts of the float32 parameters and of X that autocast inserts. Prints each one's kernels by time
and the totals; writes $OUT/run215-autocast.csv. About 2 minutes with a carried build cache."""
import os
from pathlib import Path

import pandas as pd

from fusedlib.lab.profiling import profile_kernels

from ab import autocast_steps  # (lab/experiments, the script's folder)

OUT = Path(os.environ.get("OUT", "/tmp"))


def main() -> None:
    rows = []
    for problem in ("33", "84"):
        x, steps = autocast_steps(problem)
        for impl, (step, context) in steps.items():
            def call(x, step=step, context=context):
                with context():
                    step(x)
            call(x)
            for name, calls, us in profile_kernels(call, x, calls=10):
                rows.append(dict(problem=problem, impl=impl, kernel=name[:90], calls=calls, us=us))
    df = pd.DataFrame(rows)
    df.to_csv(OUT / "run215-autocast.csv", index=False)
    pd.set_option("display.width", 200)
    for (problem, impl), g in df.groupby(["problem", "impl"], sort=False):
        print(f"\n{problem} {impl}: {g.us.sum():.1f} µs in {g.calls.sum()} kernels")
        print(g.sort_values("us", ascending=False).head(14)[["kernel", "calls", "us"]].round(1).to_string(index=False))


if __name__ == "__main__":
    main()
