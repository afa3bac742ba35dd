#!/usr/bin/env bash
# Nsight Compute on one launch of a fast kernel (tools/ncu_probe.py), with the per-instruction samples
# (--page source, SASS) printed from the report: where the warps of a kernel wait. The report and the
# printed pages come back as one archive.
#
#   bash tools/device/ncu_source.sh PROBLEM KERNEL_REGEX [SOLUTION=fast] [DTYPE]
# e.g. bash tools/device/ncu_source.sh 65 ct2d_wgs fast_bf16 bf16
set -u
P=$1; K=$2; S=${3:-fast}; T=${4:-}; OUT=${OUT:-/tmp/ncu_source}
mkdir -p "$OUT"; export PYTHONPATH=. FAST_SOLUTION="$S" FAST_DTYPE="$T"
timeout 300 python tools/ncu_probe.py "$P" > "$OUT/warm.log" 2>&1   # the build, outside the profile
timeout 240 ncu --kernel-name "regex:$K" --launch-skip 1 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters -o "$OUT/prof" -f python tools/ncu_probe.py "$P" > "$OUT/ncu.log" 2>&1
ncu -i "$OUT/prof.ncu-rep" --page source --csv --print-source sass > "$OUT/source.csv" 2> "$OUT/source.err"
ncu -i "$OUT/prof.ncu-rep" --page details --print-details all > "$OUT/details.txt" 2>&1
(cd "$OUT" && tar czf ncu.tgz source.csv source.err details.txt ncu.log warm.log prof.ncu-rep && rm -f source.csv source.err details.txt ncu.log warm.log prof.ncu-rep)
tar xzOf "$OUT/ncu.tgz" ncu.log | tail -3
