#!/usr/bin/env bash
# run139–run140 (H100): run139-simt-proto.py (run140: with the split variants) (checks, then times against cuBLAS SGEMM and the engine), then Nsight
# Compute's source counters of the lean variant at 84's shape, summarised per instruction (run138-src.py).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
L=results/h100/logs
python $L/run139-simt-proto.py 2>&1 | tee $OUT/run139.log | grep -v "^ptxas\|^    0 bytes\|UserWarning\|_warn_once"
for v in ${NCU:-lean-s3}; do
  timeout 150 ncu --clock-control none -k "regex:sgemm_pipe_kernel" --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats -o /tmp/ncu-$v python $L/run139-simt-proto.py ncu $v > /tmp/ncu-$v.log 2>&1
  echo "ncu $v: rc=$?"; tail -1 /tmp/ncu-$v.log
  ncu -i /tmp/ncu-$v.ncu-rep --page source --csv --print-source sass > $OUT/src-$v.csv
  python $L/run138-src.py $OUT/src-$v.csv
done
