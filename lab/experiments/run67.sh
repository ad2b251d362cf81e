#!/usr/bin/env bash
# run67 (H100): Nsight Compute on the engine's SIMT GEMM and cuBLAS SGEMM, and on the fused
# stage's wgmma GEMM and cuBLAS TF32, at 84's KernelBench shape (run67-ncu.py): speed of light,
# occupancy, warp states, instruction mix; one CSV per kernel, then a table of the key metrics.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
t0=$(date +%s)
python -c "from fusedlib.build import load_stage; load_stage('naive'); load_stage('fused')"
echo "built in $(( $(date +%s) - t0 )) s"
S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats --section InstructionStats"
for w in simt sgemm wgmma tf32; do
  case $w in simt) k="regex:simt_gemm";; wgmma) k="regex:wgmma_gemm";; *) k="regex:gemm|Kernel|cutlass|sm90";; esac
  timeout 150 ncu --clock-control none $S -k "$k" --launch-skip 2 --launch-count 1 --csv --page details \
    python lab/experiments/run67-ncu.py $w > /tmp/ncu-$w.csv 2> /tmp/ncu-$w.err
  echo "$w: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -2 /tmp/ncu-$w.err
done
mkdir -p $OUT/ncu; for w in simt sgemm wgmma tf32; do cp /tmp/ncu-$w.csv $OUT/ncu/; done
python - <<'PY'
import csv, io
keys = ["Duration", "Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput", "Registers Per Thread",
        "Achieved Occupancy", "Theoretical Occupancy", "Block Limit Registers", "Block Limit Shared Mem",
        "Warp Cycles Per Issued Instruction", "Issue Slots Busy", "Executed Ipc Active", "Grid Size", "Block Size",
        "Waves Per SM", "Dynamic Shared Memory Per Block"]
cols = {}
for w in ("simt", "sgemm", "wgmma", "tf32"):
    text = open(f"/tmp/ncu-{w}.csv").read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
    cols[w] = {r["Metric Name"]: f'{r["Metric Value"]} {r["Metric Unit"]}'.strip() for r in rows}
    if rows:
        print(w, "kernel:", rows[0]["Kernel Name"][:110])
print("| metric | " + " | ".join(cols) + " |")
for key in keys:
    print(f"| {key} | " + " | ".join(cols[w].get(key, "-") for w in cols) + " |")
PY
