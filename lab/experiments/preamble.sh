# Sourced first by the run scripts, in the repository root on the device, after LOG=<name>.log:
# strict variables, the package and its build cache on the paths, the start time t0, say (a line
# to the terminal and to $OUT/$LOG), and the carried build cache restored (restore_cache.sh).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
say_log=$OUT/$LOG
say() { echo "$*" | tee -a "$say_log"; }
. lab/experiments/restore_cache.sh
