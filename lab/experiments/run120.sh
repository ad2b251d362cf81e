#!/usr/bin/env bash
# run120 (H100): 3xTF32 with X split in registers against main's split pass (run120-3x.py):
# build both, every output bit compared, then timings and per-kernel times (VARIANT: run120-3x.py's).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
L=$PWD/results/h100/logs
t0=$(date +%s)
[ -d build/flcache ] || [ ! -f .cache/flcache.tgz ] || tar xzf .cache/flcache.tgz
for s in sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > $OUT/build-$s.log 2>&1 & done
python $L/run120-3x.py build-old > $OUT/build-old.log 2>&1 &
for v in ${VARIANT//,/ }; do python $L/run120-3x.py build-variant $v > $OUT/build-$v.log 2>&1 & done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il " error" $OUT/build-*.log && tail -30 $OUT/build-*.log
timeout 300 python $L/run120-3x.py bits 2>&1 | grep -v -i warn > $OUT/bits.log; echo "bits rc=$?"
grep -c "^ok" $OUT/bits.log; grep "^BAD" $OUT/bits.log | head -20; tail -7 $OUT/bits.log
timeout 240 python $L/run120-3x.py time 2>&1 | grep -v -i warn | tee $OUT/time.log
echo "done ($(( $(date +%s) - t0 )) s)"
