#!/usr/bin/env bash
# Build the Debian package from one build tree.
# Usage: scripts/package.sh [DIR]   (DIR defaults to build/)
# Builds DIR (configuring it first when needed, as scripts/build.sh does)
# and writes DIR/esd_<version>_<arch>.deb: programs, libesd, headers, the
# Python binding and the systemd units (docs/deploy.md, Install as a
# package). Needs dpkg-dev (dpkg-shlibdeps computes Depends:).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
command -v dpkg-shlibdeps >/dev/null ||
	{ echo "package.sh: dpkg-shlibdeps not found: apt-get install dpkg-dev" >&2; exit 1; }
if [ ! -f "$dir/CMakeCache.txt" ]; then
	scripts/build.sh "$dir"
else
	cmake --build "$dir" -j "$(nproc 2>/dev/null || echo 2)"
fi
(cd "$dir" && cpack -G DEB)
ls -1 "$dir"/esd_*.deb
