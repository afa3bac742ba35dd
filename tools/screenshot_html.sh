#!/usr/bin/env bash
# Open an HTML page (e.g. the leaderboard's) in headless Chromium and save a screenshot of it.
#   tools/screenshot_html.sh docs/leaderboard/leaderboard.html [OUT.png]
# Chromium from Debian's packages: apt-get install chromium
set -euo pipefail
html="$(realpath "$1")"
out="$(realpath -m "${2:-${1%.html}-screenshot.png}")"
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$profile" \
    --window-size=1400,1600 --screenshot="$out" "file://$html" 2>/dev/null
echo "$out"
