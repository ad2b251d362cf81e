#!/usr/bin/env bash
# run259 (one H200 or H100; about 4 minutes, no .cache): the gate of vec16 after run257, whose reads
# of the vectors are now typed by the GEMM kernel's operand (common.cuh vec_at<OP>) and whose SIMT merge
# was changed to stay within its registers: every stage built, then the GPU suite's parts that read
# the vectors side by side (mixed, operator, KernelBench, gradients, forward-84b, forward-33a),
# stopped by 280 s after the start so that the call ends inside its limit.
LOG=run259.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG; grep -h -m 6 "error" /tmp/build-*.log | tee -a $OUT/$LOG
left=$(( 280 - ($(date +%s) - t0) ))
timeout $left python tests/run_gpu_suite.py --out $OUT/suite \
  --parts mixed,operator,kernelbench,gradients,forward-84b,forward-33a > $OUT/suite.log 2>&1
say "suite: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 8 $OUT/suite.log | tee -a $OUT/$LOG
grep -h "^FAILED" $OUT/suite/*.log 2>/dev/null | head -8 | tee -a $OUT/$LOG
rm -rf $OUT/suite  # (the call returns a few files)
