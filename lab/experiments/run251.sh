#!/usr/bin/env bash
# run251 (one H200 or H100; issue 36): a branch's kernel changes checked and timed before its landing
# (the row softmax with one exponential an element, no merge claimed behind a running one, the merge
# units' loads unrolled).
#   PART=a (default; about 8 minutes, no .cache: the build's parts come back as flcache.part-*):
#      the build; run249's row-pass kernels; run250's timeline at 84 and 39 (its traced copy of the
#      changed kernels); the train forward's kernels (run251-kernels.py); the CUDA check of the fused
#      stage at 84 and 33 (odd shapes and the presets); the GPU tests of the fused stage's bits.
#   PART=b (carry .cache = PART=a's parts; about 9 minutes): the compute-sanitizer test (the traced copy
#      built beside it), run250's timeline at 84 and 39, then the 16-bit tests of the fused and sums
#      stages as time allows. (PART=a's first call lacked the timeline: an edit's text had changed.)
#   PART=trace (carry .cache; about 3 minutes): run250's timeline alone (the merges' phases).
LOG=run251.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
G="-p no:cacheprovider"
python lab/experiments/run250-timeline.py build > /tmp/build-run250.log 2>&1 &  # the traced copy
TRACE_BUILD=$!
if [ "${PART:-a}" = a ]; then
  bash lab/experiments/run249.sh build > /tmp/build-run249.log 2>&1 &
  wait
fi
for j in $(jobs -p); do [ $j = $TRACE_BUILD ] || wait $j; done  # (PART=b: the traced copy builds on)
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
EXCLUDE='run250-trace*' pack_build
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader | tee -a $OUT/$LOG
left() { echo $(( ${CALL_LIMIT:-585} - ($(date +%s) - t0) )); }
timeline() {
  wait $TRACE_BUILD; say "traced copy built ($(( $(date +%s) - t0 )) s)"
  for P in 84 39; do
    timeout 90 python lab/experiments/run250-timeline.py trace $P > $OUT/run250-trace-$P.txt 2> /tmp/trace-$P.err
    python lab/experiments/run250-timeline.py parse $OUT/run250-trace-$P.txt $P 2>&1 | tee -a $OUT/$LOG
  done
}
if [ "${PART:-a}" = a ]; then
  timeout 60 /tmp/run249 1024 8192 | tee -a $OUT/$LOG
  timeline
  OUT=$OUT timeout 150 python lab/experiments/run251-kernels.py > /tmp/kernels.out 2>&1
  say "kernels: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^{\|Warning\|warn" /tmp/kernels.out | tail -n 8 | cut -c1-200 | tee -a $OUT/$LOG
  timeout 150 python -m fusedlib check --device cuda --problem 84,33 --stage fused --mode all --precision all \
    --shape 257x192:320 --shape 1000x132:97 --shape 84 --inputs randn,offset --seeds 2 > $OUT/check.log 2>&1
  say "check: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $OUT/check.log | tee -a $OUT/$LOG
  timeout $(left) python -m pytest -q -m gpu tests/test_gpu.py $G \
    -k "fused and (persistent_grid or reruns_are or non_finite)" > $OUT/tests-a.log 2>&1
  say "tests: rc=$? ($(( $(date +%s) - t0 )) s) $(tail -n 1 $OUT/tests-a.log)"; grep -h "^FAILED\|^E  " $OUT/tests-a.log | head -20 | tee -a $OUT/$LOG
elif [ "${PART}" = trace ]; then
  timeline
else
  timeout 200 python -m pytest -q -m gpu tests/test_gpu.py $G -k "sanitizer" > $OUT/sanitizer.log 2>&1
  say "sanitizer: rc=$? ($(( $(date +%s) - t0 )) s) $(tail -n 1 $OUT/sanitizer.log)"; grep -h "^FAILED\|^E  " $OUT/sanitizer.log | head -20 | tee -a $OUT/$LOG
  timeline
  timeout $(left) python -m pytest -q -m gpu tests/test_mixed_precision.py $G \
    -k "sixteen_bit_kernels_on_each_path or last_pass_writes or eval_epilogue or sums_and_fused_keep or within_twice_eager" \
    > $OUT/tests-b.log 2>&1
  say "16-bit tests: rc=$? ($(( $(date +%s) - t0 )) s) $(tail -n 1 $OUT/tests-b.log)"; grep -h "^FAILED\|^E  " $OUT/tests-b.log | head -20 | tee -a $OUT/$LOG
fi
