#!/usr/bin/env bash
# run77 (H100): Nsight Compute on the 3xtf32 fused GEMM on 128×168 tiles (5 stages) at 84 (run67-ncu.py),
# against run69 (128×192, 4 stages): duration, waves, SM and memory throughput.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
python -c "from fusedlib.build import load_stage; load_stage('fused')"
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis"
run() {  # name, which, kernel regex
  timeout 120 ncu --clock-control none $S -k "regex:$3" --launch-skip 2 --launch-count 1 --csv --page details \
    python lab/experiments/run67-ncu.py $2 > $OUT/run77-ncu-$1.csv 2> /tmp/ncu-$1.err
  echo "$1: rc=$?"; tail -1 /tmp/ncu-$1.err
}


run wgmma3x fused3x wgmma_gemm
python - <<'PY'
import csv, io, os
keys = ["Duration", "Memory Throughput", "DRAM Throughput", "Compute (SM) Throughput", "Grid Size", "Block Size",
        "Registers Per Thread", "Achieved Occupancy", "Waves Per SM"]
for n in ("wgmma3x",):
    text = open(f"{os.environ['OUT']}/run77-ncu-{n}.csv").read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
    vals = {r["Metric Name"]: f'{r["Metric Value"]} {r["Metric Unit"]}'.strip() for r in rows}
    print(n, (rows[0]["Kernel Name"][:90] if rows else "-"), "|", "; ".join(f"{k} {vals.get(k, '-')}" for k in keys))
PY
