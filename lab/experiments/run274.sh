#!/usr/bin/env bash
# run274 (one GPU, the build carried as .cache): the harness's --hold-us option on the GPU: v0's
# bf16 forward table of 84 and the bf16 train step of 33 (fused, eager), each with device_ms
# (the stream held 2000 µs before each of as many calls again) beside the method's median.
LOG=run274.log
. lab/experiments/preamble.sh
. lab/experiments/start_builds.sh
wait
say "built ($(( $(date +%s) - t0 )) s)"
timeout 200 python -m fusedlib bench --problem 84 --shape v0 --mode train --precision bf16 --impl fused,eager,gemm_only \
  --hold-us 2000 --out $OUT/run274-bench.csv --fresh > $OUT/run274-bench.log 2>&1
say "bench: rc=$? ($(( $(date +%s) - t0 )) s)"
timeout 200 python -m fusedlib train-step --problem 33 --precision bf16 --impl fused,eager --hold-us 2000 \
  --out $OUT/run274-train.csv --fresh > $OUT/run274-train.log 2>&1
say "train-step: rc=$? ($(( $(date +%s) - t0 )) s)"
python - <<'PY' | tee -a $OUT/$LOG
import os, pandas as pd
out = os.environ["OUT"]
for name, cols in (("bench", ["impl", "median_ms", "device_ms", "host_us"]), ("train", ["impl", "median_ms", "device_ms", "forward_ms"])):
    p = f"{out}/run274-{name}.csv"
    if os.path.exists(p):
        print(pd.read_csv(p)[cols].to_string(index=False))
PY
