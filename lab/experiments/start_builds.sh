# Sourced by the run scripts after restore_cache.sh, in the repository root on the device: the four
# stages' extensions and the backward's built side by side in the background (logs
# /tmp/build-<name>.log); the script `wait`s for them where it needs them.
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
