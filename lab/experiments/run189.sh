#!/usr/bin/env bash
# run189 (one H200 or H100; results/h200/NOTES.md, "Next, in device calls"), on the tree with
# run188-merge.patch applied: run189-backward-passes.py (the fused train backward's three passes
# against variants, bits compared, µs and GB/s; run189.csv), then Nsight Compute's sections of the
# partials kernel as it is (84, bf16), while the extensions build for the benches that follow
# (their cache back in parts, flcache.part-*: copy them into .cache/ and carry .cache); then
# run190-host3x.py (appended to run189.log; $OUT returns at most 8 files).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
. lab/experiments/restore_cache.sh
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
mkdir -p build
python lab/experiments/run189-backward-passes.py $OUT/run189.csv 2>&1 | tee -a $OUT/run189.log
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats"
# the partials kernel as it is, bf16: at 84 its first launch, at 33 its first after 84's 34
for c in "84 0" "33 34"; do set -- $c
  timeout 100 ncu --clock-control none $S -k "regex:backward_partials_kernel" --launch-skip $2 --launch-count 1 --csv \
    --page details build/run189/run189 /tmp/run189-ncu-run.csv > /tmp/run189-ncu$1.csv 2> /tmp/ncu.err
  echo "ncu $1: rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a $OUT/run189.log; tail -2 /tmp/ncu.err | tee -a $OUT/run189.log
done
python - <<'PY' | tee -a $OUT/run189.log
import csv, io, os
keys = ["Duration", "DRAM Throughput", "Memory Throughput", "Registers Per Thread", "Achieved Occupancy",
        "Theoretical Occupancy", "Waves Per SM", "Warp Cycles Per Issued Instruction", "L2 Hit Rate"]
for kind in ("84", "33"):
    text = open(f"/tmp/run189-ncu{kind}.csv").read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
    vals = {r["Metric Name"]: f'{r["Metric Value"]} {r["Metric Unit"]}'.strip() for r in rows}
    print(kind, (rows[0]["Kernel Name"][:50] if rows else "-"), "|", "; ".join(f"{k} {vals.get(k, '-')}" for k in keys))
PY
for k in 84 33; do echo "# ncu $k"; cat /tmp/run189-ncu$k.csv; done > $OUT/run189-ncu.csv
wait
echo "built in $(( $(date +%s) - t0 )) s" | tee -a $OUT/run189.log
grep -il "error" /tmp/build-*.log && tail -30 /tmp/build-*.log
# the merge's GPU tests added after its validation (Python only): create_graph through the 16-bit
# C++ node refused, a gradient penalty on CUDA against the reference
timeout 150 python -m pytest -q -m gpu tests/test_mixed_precision.py -k "create_graph or gradient_penalty" \
  -p no:cacheprovider > /tmp/penalty.log 2>&1; tail -n 15 /tmp/penalty.log >> $OUT/run189.log
echo "create_graph tests: $(tail -n 1 /tmp/penalty.log) ($(( $(date +%s) - t0 )) s)" | tee -a $OUT/run189.log
# issue 32: where a 3xtf32 forward's bench median goes beyond its kernels (host, idle GPU)
OUT=/tmp timeout 120 python lab/experiments/run190-host3x.py 2>&1 | grep -v Warning | tail -n 3
cat /tmp/run190-host3x.log >> $OUT/run189.log
tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
