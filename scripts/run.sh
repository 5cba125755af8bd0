#!/usr/bin/env bash
# The main job: install dependencies, build, then run a short local testbed
# (esd-ps, 8 node daemons and 8 trainers on this host, every dispatch
# mechanism in turn on the same stream, links shaped to the ESD paper's
# 4 x 5 Gbit/s + 4 x 0.5 Gbit/s) and print the comparison table.
# Usage: scripts/run.sh [esd-testbed options]   (default: --quick)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h | --help) exec python3 tools/testbed/esd-testbed --help ;; esac
scripts/setup-deps.sh
scripts/build.sh build >/dev/null
build/bin/esd-info | sed -n '/^Machine:/,$p'
if [ $# -eq 0 ]; then
	set -- --quick
fi
exec python3 tools/testbed/esd-testbed "$@"
