#!/usr/bin/env bash
# Regenerate the README's board, plot and screenshot from the committed snapshots:
#   tools/regen_docs.sh
# The leaderboard in every format into docs/leaderboard/ (a pure function of results/snapshots/),
# then the HTML page's screenshot in headless Chromium (apt-get install chromium; skipped, with a
# line, where it is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
python run_eval.py leaderboard results/snapshots --out docs/leaderboard
if command -v chromium >/dev/null; then
    tools/screenshot_html.sh docs/leaderboard/leaderboard.html docs/leaderboard/leaderboard-screenshot.png
else
    echo "chromium not found: docs/leaderboard/leaderboard-screenshot.png left as it is" >&2
fi
