#!/usr/bin/env bash
# run252 (one H200 or H100; about 3 minutes, no .cache): the merge units' loads issued together
# (common.cuh merge_quarter) checked and put on run250's timeline: the fused stage and the traced
# copy built side by side, the fused stage's CUDA check at odd shapes and 84's, its bits across
# persistent grid sizes, then the timeline at 84 and 39 in bf16.
LOG=run252.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python -c "from fusedlib.build import load_stage; load_stage('fused')" > /tmp/build-fused.log 2>&1 &
python lab/experiments/run250-timeline.py build > /tmp/build-run250.log 2>&1 &  # the traced copy
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
. lab/experiments/fused_check_timeline.sh  # the check, the grid-size bits, the timeline
