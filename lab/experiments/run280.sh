#!/usr/bin/env bash
# run280 (one GPU; the build made here): run279's row units traced (a printf of each CTA's times at the
# end of its units, on one call after a warm-up): where the row units' 20–40 µs go.
LOG=run280.log
. lab/experiments/preamble.sh
python -c "from fusedlib.build import load_stage; load_stage('fused')" > /tmp/build-fused.log 2>&1
say "built ($(( $(date +%s) - t0 )) s)"
for prec in bf16 tf32; do
  timeout 60 python lab/experiments/run280-trace.py $prec > $OUT/run280-$prec.log 2>&1
  say "trace $prec: rc=$?"; cat $OUT/run280-$prec.log | tee -a $OUT/$LOG
done
