#!/usr/bin/env bash
# run257 (one H200 or H100; about 7 minutes, no .cache): the gate of branch vec16, whose kernels read
# a module's vectors where they lie, in their dtype (common.cuh Vec), instead of a widening launch
# before a 16-bit forward and float32 copies in the scratch. Every stage built; then, on the GPU
# alone, the bf16 train forward of the fused stage against cuBLAS at the KernelBench shapes with its
# kernels profiled (no copy kernel expected); then the GPU suite's parts that read the vectors in each
# dtype side by side: the 16-bit modules and autocast (mixed), the operator tests, KernelBench's check,
# the gradients, and 84's and 33's float32 forward cases (forward-84b, forward-33a).
# Without a carried .cache the build comes back as flcache.part-* (take_records.py puts it in .cache).
LOG=run257.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG; grep -h -m 6 "error" /tmp/build-*.log | tee -a $OUT/$LOG
pack_build
timeout 150 python -m fusedlib bench --problem 84,33,39 --mode train --precision bf16 --impl fused,gemm_only \
  --profile --fresh --out $OUT/bench.csv > $OUT/bench.log 2>&1
say "bench: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^E11\|autotun" $OUT/bench.log | tail -n 12 | tee -a $OUT/$LOG
timeout 330 python tests/run_gpu_suite.py --out $OUT/suite \
  --parts mixed,operator,kernelbench,gradients,forward-84b,forward-33a > $OUT/suite.log 2>&1
say "suite: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 8 $OUT/suite.log | tee -a $OUT/$LOG
grep -h "^FAILED" $OUT/suite/*.log 2>/dev/null | head -8 | tee -a $OUT/$LOG
tar czf $OUT/suite.tgz -C $OUT suite && rm -rf $OUT/suite  # (the call returns a few files)
