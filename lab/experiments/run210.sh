#!/usr/bin/env bash
# run210 (one H200 or H100; issue 36; prepared): run210-store.py's two copies of the kernels (the
# epilogue's stores of Z′ removed; the stores through shared memory and TMA) written, then the
# package's naive and sums stages and the copies' built side by side, then run210-store.py (the
# draft's bits against the package's, and the bf16 GEMM's lines t = a + b·K of the three).
# Returns run210.log and run210-store.csv.
LOG=run210.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run210-store.py copies
for s in naive sums; do
  python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 &
  for d in nostore tmastore; do
    python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('$s', 0, Path('build/run210-$d'))" \
      > /tmp/build-$s-$d.log 2>&1 &
  done
done
wait
say "built in $(( $(date +%s) - t0 )) s"
grep -il "error" /tmp/build-*.log && tail -30 /tmp/build-*.log | tee -a $OUT/run210.log
timeout 300 python lab/experiments/run210-store.py > /tmp/run210.out 2>&1
say "run210-store: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 25 /tmp/run210.out | tee -a $OUT/run210.log
