#!/usr/bin/env bash
# The kernels' GPU tests (tests/test_gpu.py, test_gpu_fused.py, test_gpu_precision.py: several hundred,
# more than one call's limit) under a deadline, through tools/gpu_smoke.py --skip-pairs; what the
# deadline stopped is listed in $OUT/kernel_tests/gpu_smoke_rest.txt, which the next call takes as
# TESTS_FROM (or a chosen part of it). The pytest log comes back as one archive.
#
#   bash tools/device/kernel_tests.sh [DEADLINE_S=540] [COMMIT] [TESTS_FROM]
set -u
D=${1:-540}; C=${2:-unknown}; F=${3:-}; OUT=${OUT:-/tmp/kernel_tests}; O="$OUT/kernel_tests"
mkdir -p "$O"
if [ -n "$F" ]; then
  python tools/gpu_smoke.py --skip-pairs --tests-from "$F" --deadline "$D" --commit "$C" --out "$O" > "$O/line.txt" 2>&1
else
  python tools/gpu_smoke.py --skip-pairs --pytest-args "tests/test_gpu.py tests/test_gpu_fused.py tests/test_gpu_precision.py" \
      --deadline "$D" --commit "$C" --out "$O" > "$O/line.txt" 2>&1
fi
(cd "$OUT" && tar czf kernel_tests.tgz kernel_tests)
tail -2 "$O/line.txt"
