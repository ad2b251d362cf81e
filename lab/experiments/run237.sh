#!/usr/bin/env bash
# run237 (one H200 or H100; issue 36): the backward's partials kernel on branch bwdpairs (every row's
# loads issued first, then the sums; a 16-bit dY a column pair a thread, V = 2, its merge 8 tiles'
# loads in flight), against run235's 305.1 µs for 39 in bf16 (DRAM floor 66.5 µs) and 259.6 in tf32
# (floor 133.0). Carry .cache (only the backward rebuilds). The backward's GPU tests (the 16-bit passes
# bit for bit the float32 ones', aligned and one element off the pairs), then the train step's
# kernels of the fused stage at the presets in tf32, bf16 and fp16 against the passes' DRAM floors
# (run233-bwd.py), ncu's sections of the partials kernel at 39 in bf16 and tf32 (run237-step.py), then
# the train steps in bf16 (fused, eager; 84, 33, 39) beside
# results/<gpu>/train_step.csv. Returns run237.log, run237-out.tgz. About 6 minutes: give it 480 s.
NAME=run237; LOG=$NAME.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
mkdir -p /tmp/$NAME; O=/tmp/$NAME
timeout 200 python -m pytest -m gpu -q tests/test_mixed_precision.py -k "backward" > $O/tests.out 2>&1
say "backward tests: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|passed\|failed" $O/tests.out | tail -n 8 | tee -a $OUT/$LOG
OUT=$O NAME=$NAME PROBLEMS=84,33,39 PRECISIONS=tf32,bf16,fp16 timeout 120 python lab/experiments/run233-bwd.py > $O/bwd.out 2>&1
say "the train step's kernels: rc=$? ($(( $(date +%s) - t0 )) s)"
grep -i "backward\|precision" $O/bwd.out | cut -c1-170 | tee -a $OUT/$LOG
for prec in bf16 tf32; do  # the partials kernel's counters in the third step (ncu reads them where the machine lets it)
  PRECISION=$prec timeout 60 ncu --clock-control none -k "regex:backward_partials" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
    python lab/experiments/run237-step.py > $O/ncu-$prec.txt 2>&1
  say "ncu $prec: rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|L2 Hit|Mem Busy" $O/ncu-$prec.txt | tee -a $OUT/$LOG
done
left=$(( 460 - ($(date +%s) - t0) ))
timeout $left python -m fusedlib train-step --problem 84,33,39 --precision bf16 --impl fused,eager \
  --out $O/train.csv --fresh > $O/train.out 2>&1
say "train steps (${left} s at most): rc=$? ($(( $(date +%s) - t0 )) s)"; grep " step " $O/train.out | tee -a $OUT/$LOG
tar czf $OUT/$NAME-out.tgz -C /tmp $NAME
