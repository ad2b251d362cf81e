#!/usr/bin/env bash
# run220 (two GPUs of one host, nvidia-h200-x2): two parts of run179.sh side by side, one a GPU, so
# that a landing's records (timed, on GPU 0) and its GPU suite (on GPU 1) fit one session:
#   bash lab/experiments/run220.sh "PART=84 SIXTEEN=1" "PART=large"
#   bash lab/experiments/run220.sh "PART=33 SIXTEEN=1 SWEEPS=" "PART=suite"   (then PART=train on GPU 0 after)
# The build first, once (every stage and the backward; without a carried .cache its parts come
# back as flcache.part-*), then each part with its GPU (CUDA_VISIBLE_DEVICES) and half the host's
# cores (taskset: the suite's CPU work off the bench's cores), each part's $OUT packed into
# g0.tgz / g1.tgz (its flcache parts left out). A GPU's clock and power depend on its own load
# alone; the host's cores, memory and PCIe are what the two parts share.
# Optional third and fourth arguments: a part run on GPU 0 (GPU 1) after the first (e.g. "PART=train
# SIXTEEN=1 PEERS="; "" for none). Every part stops by CALL_LIMIT (590 s) after the start, so that the
# packing runs inside the call's 600 s; results/<gpu> (as the timed parts left it) comes back in g0.tgz.
# On a one-GPU machine give no second argument ("" for none): GPU 0's parts then take every core.
LOG=run220.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
pack_build
export FUSEDLIB_CACHE_RESTORED=1  # (restore_cache.sh: the parts' run179.sh leave build/flcache as it is)
N=$(nproc); H=$(( N / 2 ))
if [ -z "${2:-}" ]; then H=$N; fi  # one GPU's parts alone (a one-GPU machine): every core for them
rm -rf /tmp/g0 /tmp/g0b /tmp/g1 /tmp/g1b  # (a warm machine keeps the last call's)
part() {  # name, GPU, cores, assignments...: one run179.sh part, its output packed as $OUT/<name>.tgz
  local name=$1 gpu=$2 cores=$3; shift 3
  mkdir -p /tmp/$name
  local left=$(( ${CALL_LIMIT:-590} - ($(date +%s) - t0) ))
  ( export CUDA_VISIBLE_DEVICES=$gpu OUT=/tmp/$name "$@"; timeout $left taskset -c $cores bash ${R179:-lab/experiments/run179.sh} ) \
    > /tmp/$name/run179.out 2>&1
  say "$name ($*): rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 8 /tmp/$name/run179.out | tee -a $OUT/$LOG
}
gpu0() {
  part g0 0 0-$(( H - 1 )) $1
  if [ -n "${2:-}" ]; then part g0b 0 0-$(( H - 1 )) $2; fi
}
gpu1() {
  part g1 1 $H-$(( N - 1 )) $1
  if [ -n "${2:-}" ]; then part g1b 1 $H-$(( N - 1 )) $2; fi
}
gpu0 "$1" "${3:-}" &
if [ -n "${2:-}" ]; then gpu1 "$2" "${4:-}" & fi
wait
G=$(python -c "import torch; from fusedlib.lab.records import gpu_slug; print(gpu_slug(torch.cuda.get_device_name()))")
mkdir -p /tmp/g0 && cp -r results/$G /tmp/g0/results
for d in /tmp/g0 /tmp/g0b /tmp/g1 /tmp/g1b; do
  [ -d $d ] && tar czf $OUT/$(basename $d).tgz --exclude='flcache.part-*' -C /tmp $(basename $d)
done
say "done ($(( $(date +%s) - t0 )) s)"
