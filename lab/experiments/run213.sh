#!/usr/bin/env bash
# run213 (one H200 or H100; issue 32), on branch fence-first (every statistics epilogue computes its
# partials, and the merging ones fence and count the tile, before storing its Z′; results/h200/NOTES.md,
# "The swap's records"). Builds every stage and the backward, and the sums and fused stages of a copy
# with main's epilogue.cuh (run213-before.patch; with main's build cache carried as .cache, the copy's
# sources are main's: the cache holds them), their cache back in parts (flcache.part-*), then:
#   run213-gap.py  before against after at 84, 33 and 39 in train mode, fp32, tf32, 3xtf32 and bf16:
#                  Y and the running buffers bit for bit, then the fused GEMM's excess over the sums
#                  GEMM plus finalize
#   the bit-identity tests of the persistent grid sizes and of reruns (72), and the forward cases of
#                  the fused stage in train mode at 3xtf32 (153, the forced swap's included); every
#                  other path in the whole suite after
# Returns at most 8 files: run213.log, run213-gap.csv, run213-gap.log, flcache.part-* (about 4).
# About 7 minutes.
LOG=run213.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run213-gap.py copy
for s in sums fused; do
  python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('$s', 0, Path('build/run213-before'))" \
    > /tmp/build-$s-before.log 2>&1 &
done
. lab/experiments/build_all.sh  # every stage and the backward (and the two above: its wait); the cache back in parts
timeout 300 python lab/experiments/run213-gap.py > /tmp/run213.out 2>&1
say "run213-gap: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 14 /tmp/run213.out | tee -a $OUT/run213.log
cp /tmp/run213.out $OUT/run213-gap.log 2> /dev/null
timeout 180 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider \
  -k "persistent_grid_sizes or reruns_are_bit_identical or (fused and train and 3xtf32)" > /tmp/t1.log 2>&1
say "GPU tests: rc=$? $(tail -n 1 /tmp/t1.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|^E " /tmp/t1.log | head -20 | tee -a $OUT/run213.log
