#!/usr/bin/env bash
# run219 (one H200 or H100; issue 36): run219-bwd.py under ncu, the backward's row_dot, partials and
# dZ′ kernels of the second train step of 33 and 84. Carry .cache (fence-first's build: run it on that
# branch, whose backward is main's). Returns run219.log, ncu-bwd.txt. About 3 minutes.
LOG=run219.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python -c "from fusedlib.build import load_stage, load_backward; load_stage('fused'); load_backward()" > /tmp/build.log 2>&1
say "built in $(( $(date +%s) - t0 )) s"
timeout 300 ncu --clock-control none -k 'regex:backward_(partials|dz)|row_dot' --launch-skip 2 --launch-count 8 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  --section LaunchStats python lab/experiments/run219-bwd.py > $OUT/ncu-bwd.txt 2>&1
say "ncu: rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "^  [a-z_:<>, ]*(backward|row_dot)|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occ" $OUT/ncu-bwd.txt | head -60 | tee -a $OUT/$LOG
