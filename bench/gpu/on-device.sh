#!/usr/bin/env bash
# The GPU checks in one run, for a machine with a CUDA device: build the
# GPU solver and its test and benchmark, run `ctest -L needs-gpu` and
# bench_gpu, and write everything (the card's name first) to one report.
#
#   bench/gpu/on-device.sh [--out DIR] [--debs DIR] [--quick]
#   bench/gpu/on-device.sh --fetch-debs DIR     (on a Debian 12 machine)
#
# --out DIR    where the report (gpu-report.txt) and build log go
#              [$OUT if set, else build-gpu/]
# --debs DIR   Debian 12 packages (.deb) of the libraries the build needs
#              (cmocka, inih, jansson, xxhash,
#              pkgconf): unpacked under /tmp and
#              used when the machine lacks them, e.g. a GPU box with no
#              package archive. --fetch-debs DIR downloads that set.
# --quick      fewer benchmark reps (a first look)
#
# bench_gpu runs the kernel beside its older steps (every row rescanned,
# one path a step) on the same matrices and ends with the goals: the
# round trip at k = 8192, n = 8 (<= 0.5 ms), cpu/gpu at k = 65536, n = 64
# (>= 3), and how many GPU answers it compared bit for bit with the CPU's.
#
# Exits non-zero when the build, the test or the benchmark's own GPU == CPU
# check fails; the report says which.
set -uo pipefail
cd "$(dirname "$0")/../.."

DEBS_PKGS=(libinih-dev libinih1 libinireader0 libjansson-dev libjansson4
	libcmocka-dev libcmocka0 libxxhash-dev libxxhash0 pkgconf pkgconf-bin libpkgconf3)
out=${OUT:-build-gpu}
debs=
reps=21
while [ $# -gt 0 ]; do
	case $1 in
	--out) out=$2; shift 2 ;;
	--debs) debs=$2; shift 2 ;;
	--quick) reps=7; shift ;;
	--fetch-debs)
		mkdir -p "$2" && cd "$2" && apt-get download "${DEBS_PKGS[@]}"
		exit $? ;;
	*) echo "on-device.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
	esac
done
mkdir -p "$out"
report=$out/gpu-report.txt
: >"$report"
say() { echo "$*" | tee -a "$report"; }
step() { # step NAME TIMEOUT CMD...: run, log, and record the exit code
	local name=$1 t=$2; shift 2
	say "== $name: $*"
	local t0=$SECONDS
	timeout "$t" "$@" 2>&1 | tee -a "$report"
	local rc=${PIPESTATUS[0]}
	say "== $name: exit $rc after $((SECONDS - t0)) s"
	return "$rc"
}

# The libraries of the build, from --debs when the machine lacks them.
if [ -n "$debs" ] && ! pkg-config --exists cmocka inih jansson libxxhash 2>/dev/null; then
	root=/tmp/esd-debs
	rm -rf "$root" && mkdir -p "$root"
	for f in "$debs"/*.deb; do dpkg-deb -x "$f" "$root" 2>/dev/null || ar p "$f" data.tar.xz | tar -xJ -C "$root"; done
	lib=$root/usr/lib/x86_64-linux-gnu
	# the .pc files name /usr: the sysroot points them at the unpacked tree
	export PATH=$root/usr/bin:$PATH LD_LIBRARY_PATH=$lib:${LD_LIBRARY_PATH:-}
	export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
	ln -sf pkgconf "$root/usr/bin/pkg-config"
	say "libraries from $debs (unpacked in $root)"
fi
export PATH=$PATH:/usr/local/cuda/bin

say "== machine: $(uname -sr), $(nproc) cores, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee -a "$report"
nvcc --version 2>&1 | tail -1 | tee -a "$report"

bdir=build-gpu
step configure 300 cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DESD_WERROR=ON \
	-DESD_WITH_CUDA=ON -DESD_WITH_DPDK=OFF -DESD_WITH_RDMA=OFF || exit 1
step build 600 cmake --build "$bdir" -j "$(nproc)" --target test_gpu_exact test_gpu_fallback \
	bench_gpu || exit 1
cuobjdump --list-elf "$bdir"/tests/test_gpu_exact 2>&1 | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/\1/' |
	sort -u | tr '\n' ' ' | sed 's/^/cubins: /' | tee -a "$report"
echo | tee -a "$report"

fails=0
step needs-gpu 300 ctest --test-dir "$bdir" -L needs-gpu --output-on-failure -V || fails=1
step fallback 120 ctest --test-dir "$bdir" -R test_gpu_fallback --output-on-failure || fails=1
step bench 300 "$bdir"/bin/bench_gpu --reps "$reps" || fails=1
summary=$(grep -A3 '^goals on this device' "$report" | sed 's/^/summary: /')
say "${summary:-summary: bench_gpu printed no goals}"
say "== done: $([ $fails = 0 ] && echo all passed || echo FAILURES above)"
exit $fails
