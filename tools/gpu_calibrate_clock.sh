#!/usr/bin/env bash
# The lane's clock on the H200 (issue 75): the family's main command (cold build), A/A runs, the red
# team's clock fixtures, with checks.timing_bound=flag so that every pair's numbers are kept; then
# tools/lane_clock.py's table of every pair's excess against the bounds. Results tarred into $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=/tmp/kb-results; rm -rf "$R"; mkdir -p "$R"
FLAG="--set checks.timing_bound=flag"
step() { local name=$1; shift; local t0=$(date +%s); echo "== $name: $*"; timeout "${LIMIT:-300}" "$@" > "$OUT/$name.log" 2>&1; echo "== $name exit $? in $(( $(date +%s) - t0 )) s"; tail -4 "$OUT/$name.log"; }
LIMIT=330 step fam python run_eval.py --problem conv_transpose2d $FLAG --results-dir $R --run-id fam
LIMIT=120 step aa_fam python run_eval.py --problem conv_transpose2d --solution reference $FLAG --results-dir $R --run-id aa_fam
LIMIT=60 step aa_add python run_eval.py --problem elementwise_add --solution reference $FLAG --results-dir $R --run-id aa_add
LIMIT=60 step aa_lstm python run_eval.py --problem lstm --solution reference $FLAG --results-dir $R --run-id aa_lstm
LIMIT=150 step clocks python tools/clock_redteam.py $FLAG --results-dir $R/clocks
cat "$OUT/clocks.log" | grep -v "^\[" | tail -14
python tools/lane_clock.py $R/fam $R/aa_fam $R/aa_add $R/aa_lstm $R/clocks/clock-redteam > "$OUT/lane_clock.txt" 2>&1
cat "$OUT/lane_clock.txt"
tar czf "$OUT/results.tgz" -C "$R" . 2>/dev/null
