#!/usr/bin/env bash
# Renders the quickstart's schedule, as the profiler draws it, to a PNG
# with headless Chromium (Debian package `chromium`): the check that the
# SVG shows in a real browser, and the picture in README.md.
#
#   examples/render_profile.sh [OUT.png] [N] [TILE]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/quickstart-profile.png}
n=${2:-512}
tile=${3:-128}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cargo run --release --example quickstart -- "$n" "$tile" --profile "$dir" >/dev/null
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome)
# The SVG's own size, for the window.
size=$(sed -n 's/^<svg[^>]* width="\([0-9.]*\)" height="\([0-9.]*\)".*/\1,\2/p' "$dir/quickstart.svg" | head -1)
w=${size%,*}; h=${size#*,}
mkdir -p "$(dirname "$out")"
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size="${w%.*},${h%.*}" --screenshot="$(realpath -m "$out")" "file://$dir/quickstart.svg" 2>/dev/null
echo "wrote $out (${w%.*}×${h%.*})"
