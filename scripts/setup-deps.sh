#!/usr/bin/env bash
# Install the Debian 12 packages the project builds, tests and runs with.
# Idempotent: when every package is present it prints one line and exits.
# Usage: scripts/setup-deps.sh        (as root, or with sudo available)
set -euo pipefail

PKGS=(
	build-essential cmake pkg-config git clang libclang-rt-14-dev
	liburing-dev libibverbs-dev libhwloc-dev libnuma-dev
	libdpdk-dev librte-net-memif23 librte-net-af-packet23 librte-net-tap23
	librte-net-null23 librte-net-ring23
	libcmocka-dev libinih-dev libjansson-dev libmicrohttpd-dev libxxhash-dev libzstd-dev
	libseccomp-dev libsodium-dev libssl-dev
	python3 python3-numpy python3-scipy python3-matplotlib python3-torch
	gnuplot-nox iproute2 procps
	prometheus # promtool, which checks esdctl's metrics
	dpkg-dev # dpkg-shlibdeps: the .deb's Depends (scripts/package.sh)
	slurm-wlm munge # the Slurm example's test runs its own slurmctld and slurmd
)

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "setup-deps: all ${#PKGS[@]} packages present"
	exit 0
fi
echo "setup-deps: installing ${#missing[@]} packages: ${missing[*]}"
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup-deps: done"
