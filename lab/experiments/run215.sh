#!/usr/bin/env bash
# run215 (one H200 or H100; issue 36's item 5): the autocast-bf16 train step's kernels at 33 and 84
# (run215-autocast.py). Carry .cache with the tree's build cache. Returns run215.log and
# run215-autocast.csv. About 3 minutes.
LOG=run215.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"
timeout 300 python lab/experiments/run215-autocast.py > /tmp/run215.out 2>&1
say "run215-autocast: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 100 /tmp/run215.out >> $OUT/run215.log; tail -n 40 /tmp/run215.out
