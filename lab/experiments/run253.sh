#!/usr/bin/env bash
# run253 (one H200 or H100; about 7 minutes, no .cache): branch item5b with item5's captured-scratch
# alignment (torch_common.cuh stream_scratch). The landing's suite (run254a) failed
# test_cuda_graph_replay_in_train_mode at the fused stage: a captured call's coefficients were
# misaligned, so it took the row softmax's fallback kernel, whose bits differ from the register
# rows'. Here: every stage and the traced copy built, the operator tests (CUDA graphs, opcheck,
# torch.compile), then run252's check, bits across persistent grid sizes, and the timeline at 84
# and 39 of merge_quarter<4> (item5b).
LOG=run253.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
python lab/experiments/run250-timeline.py build > /tmp/build-run250.log 2>&1 &  # the traced copy
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
timeout 240 python -m pytest -q -m gpu tests/test_gpu_operator.py -p no:cacheprovider > $OUT/operator.log 2>&1
say "operator: rc=$? ($(( $(date +%s) - t0 )) s) $(tail -n 1 $OUT/operator.log)"
grep "^FAILED" $OUT/operator.log | head -5 | tee -a $OUT/$LOG
. lab/experiments/fused_check_timeline.sh  # the check, the grid-size bits, the timeline
