. .scratch/gpu/common.sh
# Run on the device from the repository root (PYTHONPATH=.); .scratch/gpu/ was this folder then.
python3 .scratch/gpu/diag.py host 2>&1 | tee $OUT/host.txt
for cfg in "84 84 tf32" "39 39 tf32" "84 84 3xtf32"; do
  set -- $cfg
  timeout 150 ncu --clock-control none --profile-from-start off --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --csv --page details python3 .scratch/gpu/diag.py ncu $1 $2 $3 > $OUT/ncu_$1_$3.csv 2> $OUT/ncu_$1_$3.err
  echo "ncu $cfg rc=$?"; grep -c . $OUT/ncu_$1_$3.csv
done
