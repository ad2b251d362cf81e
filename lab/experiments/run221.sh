#!/usr/bin/env bash
# run221 (one H200 or H100; issues 32 and 36), on the bundle (`git apply lab/experiments/bundle.patch`:
# revised fence-first; autocast's master weight): every stage and the backward built (their cache
# back in parts: carry them as .cache for the suite), then
#   the GPU tests of mixed precision (tests/test_mixed_precision.py: autocast's master weight on
#     both routes, the bits of the module's and the operator's routes, 2 × eager's error) and the
#     bit-identity tests of grid sizes and reruns with the fused stage's train cases (run213's)
#   run215-autocast.py: the autocast step's kernels (the dW cast gone?)
#   run221-ab.py: the autocast step against eager's, in rounds
# Returns run221.log, the logs and CSVs, flcache.part-* (8 files at most). About 9 minutes.
LOG=run221.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/build_all.sh  # every stage and the backward; the cache back in parts
timeout 330 python -m pytest -q -m gpu tests/test_mixed_precision.py -p no:cacheprovider -x > /tmp/t1.log 2>&1
say "mixed GPU tests: rc=$? $(tail -n 1 /tmp/t1.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|^E " /tmp/t1.log | head -20 | tee -a $OUT/$LOG
timeout 150 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -x \
  -k "persistent_grid_sizes or reruns_are_bit_identical or (fused and train and (3xtf32 or bf16))" > /tmp/t2.log 2>&1
say "GPU tests: rc=$? $(tail -n 1 /tmp/t2.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|^E " /tmp/t2.log | head -20 | tee -a $OUT/$LOG
timeout 120 python lab/experiments/run215-autocast.py > $OUT/run215-autocast.log 2>&1
say "run215-autocast: rc=$? ($(( $(date +%s) - t0 )) s)"; grep "µs in" $OUT/run215-autocast.log | tee -a $OUT/$LOG
timeout 120 python lab/experiments/run221-ab.py > $OUT/run221-ab.log 2>&1
say "run221-ab: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $OUT/run221-ab.log | tee -a $OUT/$LOG
