#!/usr/bin/env bash
# The main job: install dependencies, build, then run the default local
# demonstration. Usage: scripts/run.sh [options passed to the demo]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
scripts/build.sh build -DESD_WERROR=OFF >/dev/null
exec build/bin/esd-info "$@"
