#!/usr/bin/env bash
# run202 (one H100 or H200), on the committed kernels with their build cache carried (.cache):
#   1. the size sweeps appended to bench.csv (run179.sh PART=sweeps): figures/throughput and
#      notebook 06's panels
#   2. Nsight Compute on the bf16 GEMM of 84's KernelBench shape (1024 × 8192 → 8192, train):
#      ours (the sums stage's wgmma kernel) beside cuBLAS's (torch.mm, the gemm_only peer), the
#      tensor pipe's and memory's throughput and the warps' stall reasons, to say where the 9 %
#      between them goes (issue 36's ≤ 1.10 × cuBLAS; run201 found the 1 × 2 cluster no faster)
# Returns bench.csv, sources.json, sweeps.log, run202-ncu.csv, run202.log.
LOG=run202.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
G=$(python -c "import torch; from fusedlib.lab.records import gpu_slug; print(gpu_slug(torch.cuda.get_device_name()))")
timeout 400 python -m fusedlib bench --append --problem 84,33 --mode train --sweep batch --sweep features \
  --impl stages,eager,compile,gemm_only > $OUT/sweeps.log 2>&1
say "sweeps: rc=$? ($(( $(date +%s) - t0 )) s)"
cp results/$G/bench.csv results/$G/sources.json $OUT/
cp lab/experiments/ncu_sums_bf16.py /tmp/ours.py  # the profiled forwards
cat > /tmp/cublas.py <<'PY'
import torch
x = torch.randn(1024, 8192, device="cuda", dtype=torch.bfloat16)
w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    torch.nn.functional.linear(x, w)
torch.cuda.synchronize()
PY
S="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
for who in ours cublas; do
  k=$([ $who = ours ] && echo "regex:wgmma_gemm_kernel" || echo "regex:nvjet|gemm|sm90")
  timeout 120 ncu --clock-control none $S -k "$k" --launch-skip 2 --launch-count 1 --csv --page details \
    python /tmp/$who.py > /tmp/ncu-$who.csv 2> /tmp/ncu-$who.err
  say "ncu $who: rc=$? $(tail -1 /tmp/ncu-$who.err)"
  timeout 120 ncu --clock-control none -k "$k" --launch-skip 2 --launch-count 1 \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,gpc__cycles_elapsed.max,smsp__cycles_active.avg" \
    --csv --page raw python /tmp/$who.py > /tmp/stall-$who.csv 2> /tmp/stall-$who.err
  say "ncu stalls $who: rc=$? $(tail -1 /tmp/stall-$who.err)"
done
for who in ours cublas; do echo "# $who"; cat /tmp/ncu-$who.csv; echo "# $who raw"; cat /tmp/stall-$who.csv; done > $OUT/run202-ncu.csv
python - <<'PY' | tee -a $OUT/run202.log
import csv, io
for who in ("ours", "cublas"):
    text = open(f"/tmp/ncu-{who}.csv").read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
    print(who, rows[0]["Kernel Name"][:90] if rows else "-")
    for r in rows:
        name = r["Metric Name"]
        if any(k in name for k in ("Duration", "Throughput", "Cluster", "Grid Size", "Block Size", "Registers",
                                   "Shared Memory Config", "Warp Cycles Per Issued", "Issue Slots Busy",
                                   "Executed Ipc Active", "Achieved Occupancy", "SM Frequency")):
            print(f"  {r['Section Name'][:24]:24s} {name[:48]:48s} {r['Metric Value']} {r['Metric Unit']}")
    text = open(f"/tmp/stall-{who}.csv").read()
    start = text.find('"ID"')
    rows = list(csv.reader(io.StringIO(text[start:]))) if start >= 0 else []
    if len(rows) > 2:  # raw page: a header row, a units row, a row a kernel
        vals = {k: v.replace(",", "") for k, v in zip(rows[0], rows[2])}
        for k, v in vals.items():
            if "gmma" in k or "cycles" in k:
                print(f"  {k} {v}")
        stalls = sorted(((float(v), k) for k, v in vals.items()
                         if "issue_stalled" in k and v.replace(".", "").isdigit()), reverse=True)
        print("  stalls (warps a cycle, per issue):", "; ".join(f"{k.split('stalled_')[1].split('_per')[0]} {v:.2f}"
                                                            for v, k in stalls[:10]))
PY
