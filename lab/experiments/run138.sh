#!/usr/bin/env bash
# run138 (H100): (1) the unit hand-off A/B (run101.sh, VARIANT=mbarslots: mbarrier slots against the
# named barrier) on main's kernels, all seven shapes × precisions of run101-ab.py, 39 included; (2) Nsight
# Compute's source counters (warp-stall samples per SASS instruction) of run135's pipelined SIMT
# prototype and of cuBLAS's SGEMM kernel at 84's shape, exported per instruction (run138-src-*.csv).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
P=lab/experiments/run135-simt-proto.py
python $P ncu cublas > $OUT/proto-build.log 2>&1 &  # builds the prototype's extension beside run101's builds
VARIANT=mbarslots timeout 420 bash lab/experiments/run101.sh
wait
for v in pipe-bk8s3 cublas; do
  timeout 150 ncu --clock-control none -k "regex:sgemm_pipe_kernel|sm80_xmma" --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats -o $OUT/ncu-$v python $P ncu $v > /tmp/ncu-$v.log 2>&1
  echo "ncu $v: rc=$?"; tail -2 /tmp/ncu-$v.log
  ncu -i $OUT/ncu-$v.ncu-rep --page source --csv --print-source sass > $OUT/src-$v.csv 2> /tmp/src-$v.err
  echo "source $v: rc=$? $(wc -l < $OUT/src-$v.csv) lines"; head -c 600 $OUT/src-$v.csv; echo; tail -2 /tmp/src-$v.err
done
