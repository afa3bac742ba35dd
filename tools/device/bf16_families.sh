#!/usr/bin/env bash
# Issue 77's harness figures: the conv family's fast_bf16 and the fused family in bf16 through the main
# command (default config), each under its share of a wall limit; the tables and the results archived.
# Run nothing else on the GPU meanwhile: the timings are the run's.
#
#   bash tools/device/bf16_families.sh [WALL_S=560] [RUN_PREFIX=bf16]
set -u
W=${1:-560}; R=${2:-bf16}; OUT=${OUT:-/tmp/bf16_families}
mkdir -p "$OUT"; chmod o+x /root 2>/dev/null
t0=$(date +%s)
timeout -s INT $(( W * 45 / 100 )) python run_eval.py --problem conv_transpose2d --solution fast_bf16 \
    --precision bf16 --run-id "$R-family" --format md > "$OUT/family.md" 2>&1
echo "family rc $? $(( $(date +%s) - t0 )) s" >> "$OUT/walls.txt"
timeout -s INT $(( W - ($(date +%s) - t0) - 15 )) python run_eval.py --problem conv_transpose2d_fused \
    --precision bf16 --run-id "$R-fused" --format md > "$OUT/fused.md" 2>&1
echo "fused rc $? $(( $(date +%s) - t0 )) s" >> "$OUT/walls.txt"
tar czf "$OUT/results.tgz" "results/$R-family" "results/$R-fused" 2>/dev/null
cat "$OUT/walls.txt"; tail -15 "$OUT/family.md"; tail -15 "$OUT/fused.md"
