#!/usr/bin/env bash
# run135 (H100): CUTLASS's multistage order in run128's SIMT prototype (run135-simt-proto.py: checks, then times against
# cuBLAS SGEMM and the engine), then Nsight Compute's warp-stall and instruction counts of the pipelined
# variant at 84's shape (cuBLAS's kernel: run134); one CSV, a table last.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
P=lab/experiments/run135-simt-proto.py
python $P 2>&1 | tee $OUT/run135.log | grep -v "^ptxas\|^    0 bytes\|UserWarning\|_warn_once"
M="gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
for v in pipe-bk8s3; do
  timeout 120 ncu --clock-control none -k "regex:sgemm_pipe_kernel" --launch-skip 2 --launch-count 1 --csv --page raw \
    --metrics "$M" python $P ncu $v > $OUT/ncu-$v.csv 2> /tmp/ncu-$v.err
  echo "ncu $v: rc=$?"; tail -2 /tmp/ncu-$v.err
done
python - <<'PY'
import csv, io, os
out = os.environ["OUT"]
cols = {}
for v in ("pipe-bk8s3",):
    text = open(f"{out}/ncu-{v}.csv").read()
    start = text.find('"ID"')
    rows = list(csv.reader(io.StringIO(text[start:]))) if start >= 0 else []
    if len(rows) >= 3:
        cols[v] = dict(zip(rows[0], rows[2]))  # header, units, values
print("| metric | " + " | ".join(cols) + " |")
names = sorted({k for c in cols.values() for k in c if "__" in k})
for k in names:
    vals = [cols[v].get(k, "-") for v in cols]
    try:
        if all(float(x.replace(",", "")) < 0.005 for x in vals): continue
    except ValueError:
        pass
    print(f"| {k.replace('smsp__average_warps_issue_stalled_', 'stall ').replace('_per_issue_active.ratio', '')} | " + " | ".join(vals) + " |")
PY
