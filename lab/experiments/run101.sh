#!/usr/bin/env bash
# run101/run102 (H100): run101-ab.py (an A/B in one process) after building both variants side by side;
# VARIANT names B's edits, comma-separated (run101: stores_last, whose edit was the tree itself then;
# run102: unroll16; run103: nomerge,nofence).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
L=$PWD/results/h100/logs
t0=$(date +%s)
for s in sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > $OUT/build-$s.log 2>&1 & done
for v in ${VARIANT//,/ }; do python $L/run101-ab.py build-b $v > $OUT/build-$v.log 2>&1 & done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il error $OUT/build-*.log && tail -30 $OUT/build-*.log
timeout 300 python $L/run101-ab.py time 2>&1 | grep -v -i warn | tee $OUT/ab.log
echo "done ($(( $(date +%s) - t0 )) s)"
