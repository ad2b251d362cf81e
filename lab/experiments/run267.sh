#!/usr/bin/env bash
# run267 (one H200; issue 36, item 5; branch `narrow`, about 6 minutes, no build carried): run266's
# racecheck hazards (3, the narrow fused kernel only: the count's shared words, SASS offsets
# 0xbf30–0xc390) gone with the shared words: the counting warp now meets each unit's hand-off
# (named barrier 2, 320 threads) and reads the unit index there, as the consumers do, then counts the
# unit they just finished (with split-K each split; a block's count is its tiles × splits); and where
# the batch is one row tile (v0) the tile's epilogue finalizes its columns, with no count and no merge
# unit. The sanitizer part first, then the two widths' checks, the fused and sums stages' forward
# cases of 84 and 33, the 16-bit wgmma path cases; then the branch at v0 and 39 and main at 39 (train,
# bf16 and tf32, run265-table.py).
LOG=run267.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say
. lab/experiments/ab.sh  # build_ab, bench
build_ab naive fold sums fused bwd
export FUSEDLIB_VALIDATION_OUT=/tmp/v.json FUSEDLIB_GPU_PROBLEMS=84,33
timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py -k sanitizer > $OUT/sanitizer.log 2>&1
say "sanitizer: rc=$? $(tail -n 1 $OUT/sanitizer.log) ($(( $(date +%s) - t0 )) s)"
grep -h "^E  .*racecheck\|^E  .*memcheck\|Race reported\|and Read\|and Write" $OUT/sanitizer.log | head -8 | cut -c1-300 | tee -a $OUT/$LOG
timeout 90 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py \
  -k "wgmma-wide or wgmma-narrow or tile_widths or persistent_grid or (case_matches and (fused or sums))" > $OUT/tests.log 2>&1
say "test_gpu: rc=$? $(tail -n 1 $OUT/tests.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED" $OUT/tests.log | head -8 | tee -a $OUT/$LOG
timeout 60 python -m pytest -m gpu -q -p no:cacheprovider tests/test_mixed_precision.py \
  -k "each_path and wgmma" > $OUT/mixed.log 2>&1
say "mixed: rc=$? $(tail -n 1 $OUT/mixed.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED" $OUT/mixed.log | head -8 | tee -a $OUT/$LOG
bench branch $PWD 84 v0
bench branch $PWD 33 v0
bench main /tmp/main 39 39
bench branch $PWD 39 39
python lab/experiments/run265-table.py $OUT/ab | tee -a $OUT/$LOG
(cd $OUT && tar czf ab.tgz ab && rm -rf ab)
