#!/usr/bin/env bash
# run213 (one H200 or H100; issue 32), on branch fence-first (the merging epilogues fence and count
# a tile before they store its Z′; results/h200/NOTES.md, "The swap's records"). Builds every stage
# and the backward (their cache back in parts, flcache.part-*), then:
#   run213-gap.py  the fused GEMM's excess over the sums GEMM plus finalize at 84, 33 and 39 in train
#                  mode, fp32, tf32, 3xtf32 and bf16, beside the committed profile's (before)
#   the bit-identity tests of the persistent grid sizes and of reruns (72), and the forward cases of
#                  the fused stage in train mode at 3xtf32 (160, the forced swap's included); every
#                  other path whose order changed (fp32, mma.sync) in the whole suite after
# Returns at most 8 files: run213.log, run213-gap.csv, flcache.part-* (about 4). About 6 minutes.
LOG=run213.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/build_all.sh  # every stage and the backward; the build cache back in parts
timeout 240 python lab/experiments/run213-gap.py > /tmp/run213.out 2>&1
say "run213-gap: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 14 /tmp/run213.out | tee -a $OUT/run213.log
cp /tmp/run213.out $OUT/run213-gap.log 2> /dev/null
timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider \
  -k "persistent_grid_sizes or reruns_are_bit_identical or (fused and train and 3xtf32)" > /tmp/t1.log 2>&1
say "GPU tests: rc=$? $(tail -n 1 /tmp/t1.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|^E " /tmp/t1.log | head -20 | tee -a $OUT/run213.log
