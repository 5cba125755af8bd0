#!/usr/bin/env bash
# Configure and build one tree. Usage: scripts/build.sh [DIR] [cmake -D options...]
# DIR defaults to build/. Prints the configure summary and any diagnostics.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1 ||
	{ cat "$dir.configure.log"; exit 1; }
sed -n '/ESD configure summary/,/^-- $/p' "$dir.configure.log"
cmake --build "$dir" -j "$jobs" 2>&1 | grep -vE '^\[ *[0-9]+%\] (Building|Linking|Built)|^Scanning'
exit "${PIPESTATUS[0]}"
