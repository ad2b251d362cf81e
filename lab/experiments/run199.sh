#!/usr/bin/env bash
# run199 (one H200 or H100, first call of the session), on the tree with run197-merge.patch applied
# (results/h200/NOTES.md, "Next, in device calls"): builds every stage and the backward (their cache
# back in parts, flcache.part-*), runs the GPU tests of the patch's changes (the 16-bit C++
# forward's widened vectors, the backward's passes and calls, bit for bit across dtypes), the
# backward passes' timing (run189-backward-passes.py: "as is" is now the patched kernels), then
# the GPU suite's large part (large.json back, for run179.sh PART=suite).
LOG=run199.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh  # the stages and the backward, in the background
mkdir -p build
timeout 120 python lab/experiments/run189-backward-passes.py $OUT/run189.csv > /tmp/run189.out 2>&1
say "run189 passes: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 25 /tmp/run189.out >> $OUT/run199.log
wait
say "built in $(( $(date +%s) - t0 )) s"
grep -il "error" /tmp/build-*.log && tail -40 /tmp/build-*.log | tee -a $OUT/run199.log
tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
timeout 150 python -m pytest -q -m gpu tests/test_mixed_precision.py -p no:cacheprovider \
  -k "(strided or eager_call or last_pass or backward_passes or backward_call or cpp_node or create_graph or gradient_penalty) and not naive and not fold" > /tmp/t2.log 2>&1
say "16-bit tests: rc=$? $(tail -n 1 /tmp/t2.log) ($(( $(date +%s) - t0 )) s)"; grep -B2 -A20 "^E " /tmp/t2.log | head -60 >> $OUT/run199.log
mkdir -p build/gpu-suite
timeout 240 python tests/run_gpu_suite.py --parts large --out build/gpu-suite > /tmp/large.log 2>&1
say "large: rc=$? $(tail -n 1 build/gpu-suite/large.log) ($(( $(date +%s) - t0 )) s)"
cp build/gpu-suite/large.json $OUT/ 2>/dev/null; grep -h "^FAILED" build/gpu-suite/large.log | head >> $OUT/run199.log
