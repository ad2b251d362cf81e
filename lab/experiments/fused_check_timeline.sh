# Sourced by run252.sh and run253.sh after their builds (the fused stage and run250's traced copy), in
# the repository root on the device: the fused stage's CUDA check at odd shapes and 84's, its bits across
# persistent grid sizes, then run250's timeline at 84 and 39 in bf16 (say, t0, $OUT and $LOG as
# preamble.sh sets them).
timeout 60 python -m fusedlib check --device cuda --problem 84,33 --stage fused --mode train --precision tf32 \
  --shape 257x192:320 --shape 1000x132:97 --shape 84 --inputs randn,offset --seeds 2 > $OUT/check.log 2>&1
say "check: rc=$? ($(( $(date +%s) - t0 )) s) $(tail -n 1 $OUT/check.log)"
timeout 40 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "fused and persistent_grid" > $OUT/tests.log 2>&1
say "grid sizes: rc=$? ($(( $(date +%s) - t0 )) s) $(tail -n 1 $OUT/tests.log)"
for P in 84 39; do
  timeout 40 python lab/experiments/run250-timeline.py trace $P > $OUT/run250-trace-$P.txt 2> /tmp/trace-$P.err
  python lab/experiments/run250-timeline.py parse $OUT/run250-trace-$P.txt $P 2>&1 | head -n 6 | tee -a $OUT/$LOG
done
