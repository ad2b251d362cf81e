#!/usr/bin/env bash
# run268 (one H200; issue 36, item 5; branch `narrow`, about 3 minutes): run267 put v0's fused GEMM
# at 21 µs (15.8 with merge units, run265) with the one row tile's columns finalized by merge_block,
# whose four quarters' loads of the partials run one after another (merge_column_partials); now the
# tile's epilogue finalizes each column from the moments it has just computed (column_done). The sums
# and fused stages built; the fused stage's v0 forward cases and the widths' bits; v0's bench (84, 33).
LOG=run268.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say
for s in sums fused; do
  python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 &
done
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
mkdir -p $OUT/ab
for problem in 84 33; do
  timeout 40 python -m fusedlib bench --problem $problem --shape v0 --mode train --precision bf16,tf32 \
    --impl fused,sums,gemm_only --profile --append --out $OUT/ab/branch/bench.csv >> $OUT/ab/bench.log 2>&1
  say "bench $problem v0: rc=$? ($(( $(date +%s) - t0 )) s)"
done
python lab/experiments/run265-table.py $OUT/ab | tee -a $OUT/$LOG
export FUSEDLIB_VALIDATION_OUT=/tmp/v.json FUSEDLIB_GPU_PROBLEMS=84,33
timeout $(( 175 - ($(date +%s) - t0) )) python -m pytest -m gpu -q -x -p no:cacheprovider tests/test_gpu.py \
  -k "(tile_widths and fused) or (case_matches and v0 and fused and (tf32 or fp32))" > $OUT/tests.log 2>&1
say "test_gpu: rc=$? $(tail -n 1 $OUT/tests.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED" $OUT/tests.log | head -5 | tee -a $OUT/$LOG
(cd $OUT && tar czf ab.tgz ab && rm -rf ab)
