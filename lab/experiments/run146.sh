#!/usr/bin/env bash
# run146 (H100): 3xTF32 with W split in shared memory by the producer warpgroup (no cached split,
# no split pass) against the committed kernels (HEAD's fusedlib/ in .base/, carried).
#   PART=check  build both trees, the GPU tests of the 3xtf32 wgmma path (forward cases of 84 and 33,
#               gradients, non-finite inputs, reruns) and the operator tests, the train steps A/B
#   PART=bench  the forward A/B at the KernelBench shapes and v0 (bench, train mode), base then new
set -u
export PYTHONUNBUFFERED=1 FUSEDLIB_CACHE=$PWD/build/flcache
R=/tmp/r146-${PART:-check}; mkdir -p $R
L=$PWD/results/h100/logs
t0=$(date +%s)
build() {  # $1: tree root
  (cd $1 && for s in naive fold sums fused; do PYTHONPATH=$1 FUSEDLIB_CACHE=$1/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > $R/build-$(basename $1)-$s.log 2>&1 & done
   PYTHONPATH=$1 FUSEDLIB_CACHE=$1/build/flcache python -c "from fusedlib.build import load_backward; load_backward()" > $R/build-$(basename $1)-bwd.log 2>&1 & wait)
}
build $PWD & build $PWD/.base & wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" $R/build-*.log && tail -30 $R/build-*.log
case ${PART:-check} in
  check)
    for pr in 84 33; do
      FUSEDLIB_GPU_PROBLEMS=$pr FUSEDLIB_VALIDATION_OUT=$R/v-$pr.json PYTHONPATH=$PWD timeout 330 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider \
        -k "3xtf32 and (case_matches or gradients or non_finite or bit_identical)" > $R/tests-$pr.log 2>&1 &
    done
    PYTHONPATH=$PWD timeout 330 python -m pytest -q -m gpu tests/test_gpu_operator.py -p no:cacheprovider > $R/operator.log 2>&1 &
    wait
    echo "tests ($(( $(date +%s) - t0 )) s):"; for f in $R/tests-*.log; do tail -n 1 $f; done; grep -h "^FAILED" $R/tests-*.log | head -5; tail -3 $R/operator.log
    for tree in .base .; do
      (cd $tree && PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache timeout 150 python -m fusedlib train-step --problem 84,33,39 --precision 3xtf32 \
        --impl fused,eager --out $R/train-$( [ $tree = . ] && echo new || echo base ).csv > $R/train-$( [ $tree = . ] && echo new || echo base ).log 2>&1)
    done
    echo "train steps ($(( $(date +%s) - t0 )) s)"
    python - <<PY
import csv
for tag in ("base", "new"):
    try:
        rows = list(csv.DictReader(open("$R/train-%s.csv" % tag)))
    except OSError as e:
        print(tag, e); continue
    for r in rows:
        print(tag, r["problem"], r["precision"], r["impl"], r["median_ms"], r["forward_ms"], r["peak_mib"], r["grad_rel_err"])
PY
    ;;
  bench)
    for tree in .base . .base .; do
      tag=$( [ $tree = . ] && echo new || echo base )
      (cd $tree && PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache timeout 200 python -m fusedlib bench --problem 84,33,39 --mode train \
         --precision 3xtf32 --impl fused,sums,eager --min-time-ms 300 --out $R/bench-$tag.csv --append > $R/bench-$tag.log 2>&1)
      echo "bench $tag ($(( $(date +%s) - t0 )) s)"
    done
    [ -n "${TESTS:-}" ] && FUSEDLIB_GPU_PROBLEMS=84 FUSEDLIB_VALIDATION_OUT=$R/v-84.json PYTHONPATH=$PWD timeout 200 python -m pytest -q -m gpu tests/test_gpu.py \
        -p no:cacheprovider -k "$TESTS" > $R/tests-84.log 2>&1; tail -n 2 $R/tests-84.log; grep -h "^FAILED" $R/tests-84.log | head -5
    python - <<PY
import csv, collections
t = collections.defaultdict(list)
for tag in ("base", "new"):
    for r in csv.DictReader(open("$R/bench-%s.csv" % tag)):
        t[(r["problem"], r["batch"], r["precision"], r["impl"])].append((tag, float(r["median_ms"])))
for k, v in sorted(t.items()):
    print(*k, " ".join(f"{tag} {ms:.4f}" for tag, ms in v))
PY
    ;;
esac
tar czf $OUT/run146-${PART:-check}.tgz -C /tmp $(basename $R)
echo "done ($(( $(date +%s) - t0 )) s)"
