#!/usr/bin/env bash
# run42: the GPU validation (tests/test_gpu.py) split into parts run side by side, each into
# a record of its own, then joined (tests/test_gpu.py merge_files); and the operator tests.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
mkdir -p $OUT/parts
t0=$(date +%s)
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" & done
python -c "from fusedlib.build import load_backward; load_backward()" &
wait
echo "built in $(( $(date +%s) - t0 )) s"
run() {  # name problems -k
  FUSEDLIB_GPU_PROBLEMS=$2 FUSEDLIB_VALIDATION_OUT=$OUT/parts/$1.json \
    python -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -k "$3" > $OUT/parts/$1.log 2>&1
  echo "$1: rc=$? $(tail -1 $OUT/parts/$1.log) ($(( $(date +%s) - t0 )) s)"
}
run f84 84 case_matches &
run f33 33 case_matches &
run f39 39 case_matches &
run grad 84,33,39 "gradients or bit_identical" &
run san 84 sanitizer &
python -m pytest -m gpu tests/test_gpu_operator.py -q -p no:cacheprovider > $OUT/operator.log 2>&1
echo "operator: rc=$? $(tail -1 $OUT/operator.log)"
wait
python - <<'PY'
import json, os, sys
from pathlib import Path
sys.path.insert(0, "tests")
from test_gpu import merge_files
parts = sorted(Path(os.environ["OUT"], "parts").glob("*.json"))
merge_files(parts, Path("results/h100/validation.json"))
doc = json.loads(Path("results/h100/validation.json").read_text())
bad = [c for part in ("cases", "gradients") for c in doc[part] if not c["passed"]]
print(len(doc["cases"]), "cases,", len(doc["gradients"]), "gradient cases,", len(bad), "failed;",
      "sanitizer", [(s["tool"], s["stage"], s["path"], s["errors"]) for s in doc["sanitizer"]],
      "; determinism", sum(d["bit_identical"] for d in doc["determinism"]), "/", len(doc["determinism"]))
for c in bad:
    print("FAILED", {k: c.get(k) for k in ("problem", "stage", "mode", "precision", "shape", "seed", "input_kind", "path", "rel_err", "budget", "worst_ratio")})
PY
cp results/h100/validation.json $OUT/
cd $OUT/parts && tar czf ../parts.tgz *.log && cd .. && rm -rf parts
echo "total $(( $(date +%s) - t0 )) s"
