#!/usr/bin/env bash
# run250 (one H200 or H100; carry .cache; about 4 minutes): run249's row-pass kernels (84's online
# softmax in bf16 against variants of its exponentials, standalone), then the fused GEMM's merge
# units on a timeline (run250-timeline.py: a traced copy, one train forward at 84 and at 39 in bf16).
# Writes $OUT/run250.log and the raw traces $OUT/run250-trace-<problem>.txt. RUN249=0: the timeline alone.
LOG=run250.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
[ "${RUN249:-1}" = 1 ] && bash lab/experiments/run249.sh build > /tmp/build-run249.log 2>&1 &
python lab/experiments/run250-timeline.py build > /tmp/build-run250.log 2>&1 &  # the traced copy
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -i "error" /tmp/build-*.log | head -20 | tee -a $OUT/$LOG
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader | tee -a $OUT/$LOG
[ "${RUN249:-1}" = 1 ] && timeout 60 /tmp/run249 1024 8192 | tee -a $OUT/$LOG
for P in 84 39; do
  timeout 90 python lab/experiments/run250-timeline.py trace $P > $OUT/run250-trace-$P.txt 2> /tmp/trace-$P.err
  say "trace $P: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "Warning\|warn" /tmp/trace-$P.err | tail -n 5 | tee -a $OUT/$LOG
  python lab/experiments/run250-timeline.py parse $OUT/run250-trace-$P.txt $P 2>&1 | tee -a $OUT/$LOG
done
