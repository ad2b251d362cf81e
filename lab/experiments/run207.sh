#!/usr/bin/env bash
# run207 (one H200 or H100, first call of a session), on the tree with run201-partials33.patch
# (33's 16-bit partials at 3 blocks an SM: 54.0 → 45.9 µs, run201) and run207-one-fence.patch
# applied (`git apply lab/experiments/<name>.patch`; results/h200/NOTES.md, "The three patches
# measured"). The second makes the persistent GEMM's count of a finished tile fence once, in
# thread 0 after the barrier (the fence is cumulative), where every one of the 256 epilogue
# threads fenced, each waiting for its own stores of the tile's Z′ to complete (run204: the fused
# GEMM's merge costs 8 µs of the part a call pays once over the sums GEMM's; the fences are the
# suspect). Same arithmetic, same bits. Builds every stage and the backward (their cache back in
# parts, flcache.part-*), then:
#   run204-epilogues.py  the lines t = a + b·K of cuBLAS's GEMM and ours (bias store, statistics,
#                        statistics and merge), to compare with logs/run204-epilogues.csv: the fused
#                        GEMM's a from 28.0 µs toward the sums GEMM's 20.0 if the fence was it
#   the bit-identity tests of the persistent grid sizes (the merge units on other grids) and of
#   reruns, then the suite's forward parts of sums and fused (84 and 33: every case of the
#   statistics and the merge against float64; their logs back in one tarball)
# Returns at most 8 files: run207.log, run204.csv, forward-logs.tgz, flcache.part-* (about 4).
LOG=run207.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/build_all.sh  # every stage and the backward; the build cache back in parts
timeout 300 python lab/experiments/run204-epilogues.py > /tmp/run204.out 2>&1
say "run204-epilogues: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 12 /tmp/run204.out | tee -a $OUT/run207.log
timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -k "persistent_grid_sizes or reruns_are_bit_identical" -p no:cacheprovider > /tmp/t1.log 2>&1
say "bit-identity tests: rc=$? $(tail -n 1 /tmp/t1.log) ($(( $(date +%s) - t0 )) s)"; grep -A20 "^E " /tmp/t1.log | head -30 >> $OUT/run207.log
mkdir -p build/gpu-suite
timeout 200 python tests/run_gpu_suite.py --parts forward-84b,forward-33b --out build/gpu-suite > /tmp/forward.log 2>&1
say "forward sums and fused: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 build/gpu-suite/forward-*.log | tee -a $OUT/run207.log
grep -h "^FAILED" build/gpu-suite/forward-*.log | head >> $OUT/run207.log
(cd build && tar czf $OUT/forward-logs.tgz gpu-suite)
