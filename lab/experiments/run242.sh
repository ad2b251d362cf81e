#!/usr/bin/env bash
# run242 (one H200 or H100; issue 36), branch next, carrying .cache (run241's build of the branch):
# the GPU suite's large part (N·M past 2³¹, grids past 65535 row tiles: the backward's partials in
# several launches and over 4096 tiles, BlockedMerge's runs of runs; 84 and 33), then the gradients
# part at 39 (its 128 tiles a column: two runs, 16 of the merge's chunks). Returns run242.log,
# run242-out.tgz. Give it 470 s.
NAME=run242; LOG=$NAME.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
O=/tmp/$NAME; mkdir -p $O
FUSEDLIB_GPU_PROBLEMS=84,33 timeout 300 python -m pytest -m gpu -q tests/test_gpu_large.py -k large > $O/large.out 2>&1
say "large: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|passed\|failed" $O/large.out | tail -n 8 | tee -a $OUT/$LOG
left=$(( 455 - ($(date +%s) - t0) ))
FUSEDLIB_GPU_PROBLEMS=39 timeout $left python -m pytest -m gpu -q tests/test_gpu.py -k "gradients or bit_identical or non_finite" > $O/grad39.out 2>&1
say "gradients 39 (${left} s at most): rc=$? ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|passed\|failed" $O/grad39.out | tail -n 8 | tee -a $OUT/$LOG
say "progress (. passed, F failed): $(grep -E '^[.FsxE]+' $O/grad39.out | tr -cd '.F' | fold -w1 | sort | uniq -c | tr '\n' ' ')"
tar czf $OUT/$NAME-out.tgz -C /tmp $NAME
