#!/usr/bin/env bash
# run272 (one GPU, the build carried as .cache): v0's forward tables (84 and 33, train mode, fp32,
# tf32 and bf16: fused, eager and F.linear) and the bf16 train steps of 84 and 33 (fused and eager),
# each timed as the bench times them and with the stream held while the host enqueues
# (run272-hold.py, HOLD_US=2000): how much of each time is the GPU's wait for the host.
LOG=run272.log
. lab/experiments/preamble.sh
. lab/experiments/start_builds.sh
wait
say "built ($(( $(date +%s) - t0 )) s)"
for hold in 0 2000; do
  HOLD_US=$hold timeout 200 python lab/experiments/run272-hold.py bench --problem 84,33 --shape v0 --mode train \
    --precision fp32,tf32,bf16 --impl fused,eager,gemm_only --out $OUT/bench-hold$hold.csv --fresh > $OUT/bench-hold$hold.log 2>&1
  say "bench hold=$hold: rc=$? ($(( $(date +%s) - t0 )) s)"
  HOLD_US=$hold timeout 200 python lab/experiments/run272-hold.py train-step --problem 84,33 --precision bf16 \
    --impl fused,eager --out $OUT/train-hold$hold.csv --fresh > $OUT/train-hold$hold.log 2>&1
  say "train-step hold=$hold: rc=$? ($(( $(date +%s) - t0 )) s)"
done
python - <<'PY' | tee -a $OUT/$LOG
import os, pandas as pd
out = os.environ["OUT"]
for kind in ("bench", "train"):
    frames = []
    for hold in (0, 2000):
        p = f"{out}/{kind}-hold{hold}.csv"
        if os.path.exists(p):
            d = pd.read_csv(p); d["hold_us"] = hold; frames.append(d)
    if not frames:
        continue
    d = pd.concat(frames)
    keys = [c for c in ("problem", "precision", "impl") if c in d]
    cols = [c for c in ("median_ms", "host_us") if c in d]
    print(d.pivot_table(index=keys, columns="hold_us", values=cols).round(4).to_string())
PY
