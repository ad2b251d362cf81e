#!/usr/bin/env bash
# run218 (one H200 or H100; issue 36's item 3): bf16_tolerance.py on CUDA at KernelBench's shapes of
# 33 (8192 → 8192, batch 1024) and 39 (4096 → 4096, batch 16384), five seeds: how many valid bf16
# implementations of the model (eager with its Linear split in K, correctly rounded, eager's rounding
# points, torch.compile, fusedlib's fused stage) pass KernelBench's check against eager bf16.
# Returns run218.log, bf16-tolerance-cuda.log. About 3 minutes.
LOG=run218.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python -c "from fusedlib.build import load_stage; load_stage('fused')" > /tmp/build-fused.log 2>&1
say "built in $(( $(date +%s) - t0 )) s"
timeout 420 python lab/experiments/bf16_tolerance.py --device cuda --seeds 5 --shape 8192x8192x1024 \
  --shape 4096x4096x16384 > $OUT/bf16-tolerance-cuda.log 2>&1
say "bf16_tolerance: rc=$? ($(( $(date +%s) - t0 )) s)"; grep "^cuda" $OUT/bf16-tolerance-cuda.log | tee -a $OUT/$LOG
