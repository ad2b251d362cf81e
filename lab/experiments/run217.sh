#!/usr/bin/env bash
# run217 (one H200 or H100; issue 32), on branch fence-first with run213's build cache carried as
# .cache: run217-ab.py (fused and sums stages before and after, and eager fp32, timed in rounds),
# nvidia-smi's SM clock and power every 200 ms beside it. Returns run217.log, run217-ab.csv,
# run217-ab.log, clocks.csv. About 3 minutes.
LOG=run217.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run213-gap.py copy  # the "before" copy (its build in the carried cache:
find build/run213-before -type f -exec touch -d 2001-01-01 {} +  # dated back, as restore_cache.sh does)
for s in sums fused; do  # the package's two stages, side by side
  python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 &
done
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv,nounits -lms 200 > $OUT/clocks.csv 2> /dev/null &
SMI=$!; trap 'kill $SMI 2> /dev/null' EXIT
timeout 420 python lab/experiments/run217-ab.py > $OUT/run217-ab.log 2>&1
say "run217-ab: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 10 $OUT/run217-ab.log | tee -a $OUT/$LOG
