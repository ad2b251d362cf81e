"""run221 (one H100 or H200; issue 36's item 5), on branch `bundle`: the autocast-bf16 train step with
the float32 weight kept as a master weight (docs/design.md §15: rounded below autograd, dW the
16-bit GEMM's float32 output, no 16-bit dW cast back), against eager autocast, timed in rounds
(time_round_robin, the order rotated each round) at 33 and 84, KernelBench shapes, as
`python -m fusedlib train-step --precision autocast-bf16` builds and runs each step (run212's
records: 0.88 × eager at 33, 0.715 at 84; issue 36 asks ≤ 0.85). Writes $OUT/run221-ab.csv."""
import os
from pathlib import Path

import pandas as pd

from fusedlib.lab.timing import time_round_robin

from ab import autocast_steps  # (lab/experiments, the script's folder)

OUT = Path(os.environ.get("OUT", "/tmp"))


def main() -> None:
    rows = []
    for problem in ("33", "84"):
        x, fns = autocast_steps(problem)
        t = time_round_robin(fns, x, warmup=5, iters=200, rounds=20)
        row = dict(problem=problem, **{impl: v[0] for impl, v in t.items()})
        row.update({f"{impl}/eager": row[impl] / row["eager"] for impl in ("fused", "sums")})
        rows.append(row)
        print(row, flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(OUT / "run221-ab.csv", index=False)
    print(df.round(4).to_string(index=False))


if __name__ == "__main__":
    main()
