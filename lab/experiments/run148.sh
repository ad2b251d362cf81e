#!/usr/bin/env bash
# run148 (H100): 3xTF32's W split in shared memory, v0 (run146: Ws beside W in each of 3 stages) against
# v1 (this tree: 4 stages of X and W, Ws in a ring of 3 slots at BN = 168) and HEAD's kernels
# (.base: cached split); the 3xtf32 GPU tests of 84 on this tree; bench of the fused forward, train mode.
set -u
export PYTHONUNBUFFERED=1
R=/tmp/r148; mkdir -p $R
t0=$(date +%s)
for tree in $PWD/.base $PWD/.v0 $PWD; do
  for s in naive fold sums fused; do
    [ $tree != $PWD ] && [ $s != fused ] && continue
    (cd $tree && PYTHONPATH=$tree FUSEDLIB_CACHE=$tree/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > $R/build-$(basename $tree)-$s.log 2>&1) &
  done
done
(PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python -c "from fusedlib.build import load_backward; load_backward()" > $R/build-bwd.log 2>&1) &
wait; echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" $R/build-*.log && tail -30 $R/build-*.log
FUSEDLIB_CACHE=$PWD/build/flcache FUSEDLIB_GPU_PROBLEMS=84 FUSEDLIB_VALIDATION_OUT=$R/v-84.json PYTHONPATH=$PWD timeout 200 python -m pytest -q -m gpu tests/test_gpu.py \
  -p no:cacheprovider -k "3xtf32 and (case_matches or non_finite or gradients)" > $R/tests-84.log 2>&1; tail -n 1 $R/tests-84.log; grep -h "^FAILED" $R/tests-84.log | head -5
echo "tests ($(( $(date +%s) - t0 )) s)"
for tree in .base .v0 . . .v0 .base; do
  tag=$( [ $tree = . ] && echo v1 || echo ${tree#.} )
  (cd $tree && PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache timeout 100 python -m fusedlib bench --problem 84,39 --mode train \
     --precision 3xtf32 --impl fused --min-time-ms 300 --out $R/$tag/bench.csv --append > $R/bench-$tag.log 2>&1)
done
echo "bench ($(( $(date +%s) - t0 )) s)"
python - <<PY | tee $OUT/run148.log
import csv, collections
t = collections.defaultdict(list)
for tag in ("base", "v0", "v1"):
    for r in csv.DictReader(open("$R/%s/bench.csv" % tag)):
        t[(r["problem"], r["batch"], r["impl"])].append(f'{tag} {float(r["median_ms"]):.4f} ({r["rel_err"]})')
for k, v in sorted(t.items()):
    print(*k, " | ".join(v))
PY
tar czf $OUT/run148.tgz -C /tmp r148
echo "done ($(( $(date +%s) - t0 )) s)"
