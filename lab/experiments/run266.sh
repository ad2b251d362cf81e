#!/usr/bin/env bash
# run266 (one H200; issue 36, item 5; branch `narrow`, about 7 minutes, no build carried): run265's
# racecheck hazards (12, in the narrow fused kernel, the first the sanitizer ran with the count handed
# to the counting warp) after the hand-off's change: one bar.sync a hand-off that the consumers and the
# counting warp all meet, the column block in one of two shared words by the hand-off's parity (no
# bar.arrive ordering a shared word). The sanitizer part (tests/test_gpu.py), again with the wide tile
# forced if it still fails; the two widths' GPU checks of run265; then main against the branch at 84's
# KernelBench shape (run265 read 8.8 µs of fused GEMM over sums there, run264 2.2) and the branch at
# v0 and 39, train, bf16 and tf32 (run265-table.py).
LOG=run266.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say
. lab/experiments/ab.sh  # build_ab, bench
build_ab naive fold sums fused bwd
export FUSEDLIB_VALIDATION_OUT=/tmp/v.json FUSEDLIB_GPU_PROBLEMS=84,33
timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py -k sanitizer > $OUT/sanitizer.log 2>&1
rc=$?; say "sanitizer: rc=$rc $(tail -n 1 $OUT/sanitizer.log) ($(( $(date +%s) - t0 )) s)"
grep -h "^E  .*racecheck\|^E  .*memcheck" $OUT/sanitizer.log | head -5 | tee -a $OUT/$LOG
if [ $rc != 0 ]; then
  FUSEDLIB_WGMMA_WIDTH=256 timeout 150 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py -k sanitizer > $OUT/sanitizer-wide.log 2>&1
  say "sanitizer, wide tile: rc=$? $(tail -n 1 $OUT/sanitizer-wide.log) ($(( $(date +%s) - t0 )) s)"
  grep -h "^E  .*racecheck\|^E  .*memcheck" $OUT/sanitizer-wide.log | head -5 | tee -a $OUT/$LOG
fi
timeout 60 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py \
  -k "wgmma-wide or wgmma-narrow or tile_widths or persistent_grid or (case_matches and v0 and tf32)" > $OUT/tests.log 2>&1
say "test_gpu: rc=$? $(tail -n 1 $OUT/tests.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED" $OUT/tests.log | head -8 | tee -a $OUT/$LOG
timeout 60 python -m pytest -m gpu -q -p no:cacheprovider tests/test_mixed_precision.py \
  -k "each_path and wgmma and bfloat16" > $OUT/mixed.log 2>&1
say "mixed: rc=$? $(tail -n 1 $OUT/mixed.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED" $OUT/mixed.log | head -8 | tee -a $OUT/$LOG
bench main /tmp/main 84 84
bench branch $PWD 84 84
bench branch $PWD 84 v0
bench branch $PWD 39 39
python lab/experiments/run265-table.py $OUT/ab | tee -a $OUT/$LOG
(cd $OUT && tar czf ab.tgz ab && rm -rf ab)
