# run30: notebook 08 on the H100; the CUDA torch.compile test's failure message; a backtrace of the
# bad-argument crash (case 2: bias of the wrong length) under gdb where available.
export PYTHONPATH=/tmp/site:$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
python3 -m ipykernel install --user --name python3 > /dev/null 2>&1
for s in naive fold sums fused; do (python3 -c "from fusedlib.build import load_stage; load_stage('$s')" > /dev/null 2>&1 || echo "$s build FAILED") & done; wait
timeout 100 python3 -m pytest -q -m gpu tests/test_gpu_operator.py -p no:cacheprovider -k compile 2>&1 | grep -E "^E  |passed|failed" | head -12
if command -v gdb > /dev/null; then
  timeout 60 gdb -batch -ex run -ex bt --args python3 lab/experiments/run23-errors.py 2 2>&1 | grep -E "^#" | head -25
else
  echo "no gdb"
fi
timeout 240 python3 notebooks/run_all.py 08 2>&1 | tail -3
tar czf $OUT/nb08.tgz notebooks/08_backward.ipynb
