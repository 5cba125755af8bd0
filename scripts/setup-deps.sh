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
	nodejs # tools/k8s/validate.mjs: the manifests against the API's schemas
)
# From the npm registry: kubernetes-models (the Kubernetes API's OpenAPI
# schemas with a validator), under this prefix.
K8S_MODELS_DIR=/var/lib/esd-deps/k8s
K8S_MODELS=kubernetes-models@5.1.0

# npm modules, once the packages are there (a failure is a warning: only
# the schema test needs them, and it says so when they are missing)
npm_modules() {
	if [ -d "$K8S_MODELS_DIR/node_modules/kubernetes-models" ]; then
		return
	fi
	echo "setup-deps: npm install $K8S_MODELS into $K8S_MODELS_DIR"
	if ! { $SUDO mkdir -p "$K8S_MODELS_DIR" &&
		$SUDO npm install --silent --no-audit --no-fund --prefix "$K8S_MODELS_DIR" \
			"$K8S_MODELS" >/dev/null 2>&1; }; then
		echo "setup-deps: warning: npm could not install $K8S_MODELS (the registry unreachable?)"
	fi
}
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
# npm: Debian's package, unless a nodejs from elsewhere brings its own
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then
	echo "setup-deps: all ${#PKGS[@]} packages present"
	npm_modules
	exit 0
fi
echo "setup-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
npm_modules
echo "setup-deps: done"
