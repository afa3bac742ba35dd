#!/usr/bin/env bash
# Issue 76's measurement on a lent GPU host: a corpus (tools/kb_corpus.py's submissions.jsonl) whole,
# cold build cache, the default config, under a wall limit; the phases, the CPU by process kind, and the
# verdicts against a kept snapshot (results/snapshots/corpus100/). Outputs under $OUT (the device tool's).
#
#   bash tools/device/corpus_run.sh SUBMISSIONS RUN_ID [WALL_S=330] [SNAPSHOT] [COMMIT]
#
# e.g. the corpus from `python tools/kb_corpus.py --out .scratch/corpus100 --count 100 --seed 0`
# (carried to the device), then
#   bash tools/device/corpus_run.sh .scratch/corpus100/submissions.jsonl full6 330 \
#       results/snapshots/corpus100/2026-12-07-h100-full5.json $(git rev-parse --short HEAD)
set -u
SUB=$1; RID=$2; W=${3:-330}; SNAP=${4:-}; C=${5:-unknown}; OUT=${OUT:-/tmp/corpus_run}
mkdir -p "$OUT"; chmod o+x /root 2>/dev/null   # the sandboxed workers read the checkout under /root
{ nvidia-smi --query-gpu=name --format=csv,noheader; nproc; free -g | head -2
  /usr/bin/time -f "import torch %U user-s %e wall" python -c "import torch"; } > "$OUT/host.txt" 2>&1
t0=$(date +%s)
timeout -s INT "$W" python tools/cpu_by_process.py record "$OUT/cpu.json" -- \
    python run_eval.py batch "$SUB" --run-id "$RID" > "$OUT/batch.log" 2>&1
rc=$?; wall=$(( $(date +%s) - t0 )); echo "rc $rc wall $wall" >> "$OUT/host.txt"
python tools/corpus_verdicts.py phases "results/$RID" --walls "$wall" > "$OUT/phases.txt" 2>&1
python tools/cpu_by_process.py report "$OUT/cpu.json" > "$OUT/cpu.txt" 2>&1
if [ -n "$SNAP" ]; then python tools/corpus_verdicts.py compare "$SNAP" "results/$RID" > "$OUT/compare.txt" 2>&1; fi
python tools/corpus_verdicts.py verdicts "results/$RID" --out "$OUT/verdicts.json" --commit "$C" \
    --host "$(head -1 "$OUT/host.txt")" >> "$OUT/compare.txt" 2>&1
tar czf "$OUT/run.tgz" "results/$RID" 2>/dev/null   # one file: a call returns a limited number
tail -3 "$OUT/phases.txt"; cat "$OUT/host.txt"; tail -5 "$OUT/compare.txt" 2>/dev/null
