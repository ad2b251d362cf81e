# Sourced by the A/B run scripts (run263 on) after preamble.sh: a branch's kernels measured against
# main's, built in the same call from $AB_MAIN (default lab/experiments/run264-main.tgz: `git archive
# main fusedlib pyproject.toml | gzip > lab/experiments/run264-main.tgz`, made before the branch's
# patch is applied; untracked, it travels with the tree).
# build_ab STAGE...: the tree's stages (`bwd`: the backward) and main's sums and fused stages, in
# parallel; then $OUT/ab/ for the bench calls' records.
build_ab() {
  mkdir -p /tmp/main && tar xzf "${AB_MAIN:-lab/experiments/run264-main.tgz}" -C /tmp/main
  local s
  for s in "$@"; do
    if [ "$s" = bwd ]; then
      python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
    else
      python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 &
    fi
  done
  for s in sums fused; do
    (cd /tmp/main && PYTHONPATH=/tmp/main FUSEDLIB_CACHE=/tmp/main/build/flcache \
      python -c "from fusedlib.build import load_stage; load_stage('$s')") > /tmp/build-main-$s.log 2>&1 &
  done
  wait
  say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
  mkdir -p $OUT/ab
}
# bench NAME ROOT PROBLEM SHAPE [VAR=value ...]: one bench call (train, bf16 and tf32; the fused and sums
# stages and cuBLAS's GEMM alone; kernels profiled) of the tree at ROOT into $OUT/ab/NAME/.
bench() {
  local name=$1 root=$2 problem=$3 shape=$4; shift 4
  (export PYTHONPATH=$root FUSEDLIB_CACHE=$root/build/flcache "$@"; cd $root && \
   timeout 100 python -m fusedlib bench --problem $problem --shape $shape --mode train --precision bf16,tf32 \
     --impl fused,sums,gemm_only --profile --append --out $OUT/ab/$name/bench.csv >> $OUT/ab/bench.log 2>&1
   echo "$name $problem $shape: rc=$? ($(( $(date +%s) - t0 )) s)") | tee -a $OUT/$LOG
}
