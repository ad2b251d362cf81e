#!/usr/bin/env bash
# run198 (one H100 or H200), on the tree with run193-cluster.patch applied (results/h200/NOTES.md,
# "Three patches tried on the GPU"): why the clustered GEMM runs at half rate. Nsight Compute's
# sections of the wgmma GEMM (84, bf16, sums, train: 1024 × 8192 → 8192) with the cluster off and
# on: the tensor pipe's and L2's throughput, the warps' stall reasons (a consumer waiting on its
# full barrier: the loads are late; a producer on its empty barrier: the peer's consumers are),
# and the launch's cluster shape. Prints one table; the reports go to $OUT/run198-ncu.csv.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
. lab/experiments/restore_cache.sh
python -c "from fusedlib.build import load_stage; load_stage('sums')" > /tmp/build.log 2>&1 || tail -30 /tmp/build.log
cp lab/experiments/ncu_sums_bf16.py /tmp/one_forward.py  # the profiled forwards
S="--section SpeedOfLight --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
for c in 0 1; do
  FUSEDLIB_WGMMA_CLUSTER=$c timeout 200 ncu --clock-control none $S -k "regex:wgmma_gemm_kernel" --launch-skip 2 \
    --launch-count 1 --csv --page details python /tmp/one_forward.py > /tmp/ncu$c.csv 2> /tmp/ncu$c.err
  echo "ncu cluster=$c: rc=$?"; tail -2 /tmp/ncu$c.err
done
# the stall reasons (raw metrics; a second pass, so that a metric name this ncu lacks costs only it)
for c in 0 1; do
  FUSEDLIB_WGMMA_CLUSTER=$c timeout 150 ncu --clock-control none -k "regex:wgmma_gemm_kernel" --launch-skip 2 --launch-count 1 \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" --csv --page raw \
    python /tmp/one_forward.py > /tmp/stall$c.csv 2> /tmp/stall$c.err
  echo "ncu stalls cluster=$c: rc=$?"; tail -2 /tmp/stall$c.err
done
for c in 0 1; do echo "# cluster=$c"; cat /tmp/ncu$c.csv; echo "# cluster=$c stalls"; cat /tmp/stall$c.csv; done > $OUT/run198-ncu.csv
python - <<'PY'
import csv, io
for c in (0, 1):
    text = open(f"/tmp/ncu{c}.csv").read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
    print(f"cluster={c}", rows[0]["Kernel Name"][:60] if rows else "-")
    for r in rows:
        name = r["Metric Name"]
        if any(k in name for k in ("Duration", "Compute (SM) Throughput", "L2 Cache Throughput", "DRAM Throughput",
                                   "Cluster", "Grid Size", "Warp Cycles Per Issued", "Issue Slots Busy",
                                   "Stall", "Executed Ipc Active")):
            print(f"  {r['Section Name'][:24]:24s} {name[:48]:48s} {r['Metric Value']} {r['Metric Unit']}")
    text = open(f"/tmp/stall{c}.csv").read()
    start = text.find('"ID"')
    rows = list(csv.reader(io.StringIO(text[start:]))) if start >= 0 else []
    if len(rows) > 2:  # raw page: a header row, a units row, a row a kernel
        stalls = sorted(((float(v.replace(",", "")), k) for k, v in zip(rows[0], rows[2])
                         if "issue_stalled" in k and v.replace(",", "").replace(".", "").isdigit()), reverse=True)
        print("  stalls (warps a cycle, per issue):", "; ".join(f"{k.split('stalled_')[1].split('_per')[0]} {v:.2f}"
                                                            for v, k in stalls[:8]))
PY
