#!/usr/bin/env bash
# Build every libFuzzer target (clang, ASan + UBSan) in its own tree and run
# each for a while from its committed corpus; then merge what the run found
# that adds coverage back into that corpus, and print per target: execs,
# exec/s, coverage (libFuzzer's cov: and ft:), corpus size before -> after,
# crashes. Exits 1 when any target crashed (or leaked, hung, ran out of
# memory); the reproducers stay in DIR/crashes/<target>/.
#
# Targets: those declared with esd_add_fuzz() (listed in DIR/fuzz/targets.tsv
# with their corpus), and any other CMake target named fuzz_* (not *_replay),
# which runs from DIR/corpus/<target> until it is given a committed corpus.
#
# Usage: scripts/fuzz.sh [--seconds N] [--target NAME]... [--jobs J]
#                        [--dir DIR] [--no-merge] [--list]
#   --seconds N   time per target (default 600)
#   --target NAME run only this target (repeatable; default all)
#   --jobs J      parallel fuzzing processes per target (libFuzzer -jobs and
#                 -workers; default 1); the targets run one after another
#   --dir DIR     build tree (default build-fuzz)
#   --no-merge    leave the committed corpora as they are
#   --list        build, print the targets and their corpora, run nothing
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=600 jobs=1 dir=build-fuzz merge=1 list=0
want=()
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) seconds=$2; shift 2 ;;
	--target) want+=("$2"); shift 2 ;;
	--jobs) jobs=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	--no-merge) merge=0; shift ;;
	--list) list=1; shift ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "fuzz.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case "$seconds$jobs" in *[!0-9]*) echo "fuzz.sh: --seconds and --jobs take numbers" >&2; exit 2 ;; esac

# clang, libFuzzer's runtime and the build's libraries (idempotent).
install_deps() {
	scripts/setup-deps.sh || exit 1
}

configure_and_build() {
	echo "=== configure $dir (clang, ESD_FUZZ, ASan + UBSan)"
	CC=clang cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DESD_FUZZ=ON \
		-DESD_SANITIZE=ON -DESD_WITH_CUDA=OFF >"$dir.configure.log" 2>&1 ||
		{ cat "$dir.configure.log"; exit 1; }
	echo "=== build"
	local t
	mapfile -t targets < <(list_targets)
	[ ${#targets[@]} -gt 0 ] || { echo "fuzz.sh: no fuzz targets in $dir"; exit 1; }
	for t in "${targets[@]}"; do
		cmake --build "$dir" -j "$(nproc 2>/dev/null || echo 2)" --target "$t" 2>&1 |
			grep -vE '^\[ *[0-9]+%\] (Building|Linking|Built)|^Scanning|^gmake'
		[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzz.sh: building $t failed"; exit 1; }
	done
}

# Every fuzz target: the manifest's, then CMake's other targets named fuzz_*.
list_targets() {
	{
		cut -f1 "$dir/fuzz/targets.tsv" 2>/dev/null
		cmake --build "$dir" --target help 2>/dev/null |
			sed -n 's/^\.\.\. \(fuzz_[A-Za-z0-9_]*\).*/\1/p' | grep -v '_replay$'
	} | awk '!seen[$0]++'
}

# The committed corpus of target $1, or DIR/corpus/$1 for one without.
corpus_of() {
	local c
	c=$(awk -F'\t' -v t="$1" '$1 == t { print $2 }' "$dir/fuzz/targets.tsv" 2>/dev/null)
	if [ -z "$c" ]; then
		c=$root/$dir/corpus/$1
		echo "fuzz.sh: $1 has no committed corpus (esd_add_fuzz CORPUS); using $c" >&2
	fi
	mkdir -p "$c"
	echo "$c"
}

binary_of() {
	find "$dir" -path '*/CMakeFiles' -prune -o -type f -executable -name "$1" -print | head -1
}

count_files() {
	find "$1" -maxdepth 1 -type f | wc -l
}

# Run target $1 for $seconds from its corpus; its work files in DIR/run/$1.
run_target() {
	local t=$1 bin corpus work crashes
	bin=$(binary_of "$t")
	[ -n "$bin" ] || { echo "fuzz.sh: $t was not built" >&2; return 1; }
	bin=$root/$bin
	corpus=$(corpus_of "$t")
	work=$root/$dir/run/$t crashes=$root/$dir/crashes/$t
	rm -rf "$work"
	mkdir -p "$work/new" "$crashes"
	local before par=()
	before=$(count_files "$corpus")
	[ "$jobs" -gt 1 ] && par=(-jobs="$jobs" -workers="$jobs")
	echo "=== $t: ${seconds}s from $corpus ($before inputs)"
	# new inputs go to the first folder (scratch), the committed one is read
	(cd "$work" && UBSAN_OPTIONS=print_stacktrace=1 "$bin" -max_total_time="$seconds" \
		-print_final_stats=1 -timeout=30 -artifact_prefix="$crashes/" "${par[@]}" \
		"$work/new" "$corpus" >"$work/fuzz.log" 2>&1)
	local rc=$?
	[ "$merge" -eq 1 ] && merge_into "$bin" "$corpus" "$work"
	report "$t" "$work" "$crashes" "$before" "$(count_files "$corpus")" "$rc"
}

# Add to the committed corpus only the new inputs that add coverage.
merge_into() {
	local bin=$1 corpus=$2 work=$3
	(cd "$work" && "$bin" -merge=1 "$corpus" "$work/new" >"$work/merge.log" 2>&1) ||
		echo "fuzz.sh: merge failed, see $work/merge.log" >&2
}

# One summary line from the run's logs (with --jobs, one log per job).
report() {
	local t=$1 work=$2 crashes=$3 before=$4 after=$5 rc=$6 logs ncrash
	logs=$(ls "$work"/fuzz-*.log 2>/dev/null || echo "$work/fuzz.log")
	ncrash=$(find "$crashes" -maxdepth 1 -type f \
		\( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
	# shellcheck disable=SC2086
	awk -v t="$t" -v s="$seconds" -v b="$before" -v a="$after" -v c="$ncrash" -v rc="$rc" '
		/^stat::number_of_executed_units:/ { execs += $2 }
		/^stat::average_exec_per_sec:/ { eps += $2 }
		/ cov: / { for (i = 1; i < NF; i++) {
			if ($i == "cov:" && $(i + 1) > cov) cov = $(i + 1)
			if ($i == "ft:" && $(i + 1) > ft) ft = $(i + 1) } }
		END { printf "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", t, s, execs, eps, cov, ft,
			b, a, c, rc }' $logs >>"$summary"
	tail -1 "$summary" | awk -F'\t' '{ printf "%s: %d execs, %d exec/s, cov %d, ft %d, corpus %d -> %d, crashes %d\n",
		$1, $3, $4, $5, $6, $7, $8, $9 }'
	[ "$ncrash" -eq 0 ] || ls "$crashes"
}

print_table() {
	echo "=== summary (also in $summary)"
	{
		printf "target\tseconds\texecs\texec/s\tcov\tft\tcorpus before\tcorpus after\tcrashes\trc\n"
		cat "$summary"
	} | column -t -s "$(printf '\t')"
}

install_deps
configure_and_build
mapfile -t all < <(list_targets)
if [ "$list" -eq 1 ]; then
	for t in "${all[@]}"; do printf "%s\t%s\n" "$t" "$(corpus_of "$t")"; done
	exit 0
fi
[ ${#want[@]} -gt 0 ] || want=("${all[@]}")
summary=$root/$dir/fuzz-summary.tsv
: >"$summary"
for t in "${want[@]}"; do
	printf '%s\n' "${all[@]}" | grep -qx "$t" || { echo "fuzz.sh: no target $t" >&2; exit 2; }
done
for t in "${want[@]}"; do
	run_target "$t"
done
print_table
awk -F'\t' '$9 > 0 { bad = 1 } END { exit bad }' "$summary"
