#!/usr/bin/env bash
# Paired timing of two bench_step builds on a noisy machine: N alternating
# runs of each on core 1, then each one's runs, median and minimum whole
# step (ms), the median of the N paired ratios B/A (each pair runs within
# a few seconds, so slow phases of the host mostly cancel), and the same
# median paired ratio for every phase bench_step prints.
# usage: bench/dispatch/ab_step.sh BENCH_STEP_A BENCH_STEP_B [N] [bench_step options]
# e.g.   bench/dispatch/ab_step.sh /tmp/before/bin/bench_step build/bin/bench_step 9 --m 128
set -euo pipefail
if [ $# -lt 2 ]; then
	sed -n '2,8p' "$0" | sed 's/^# //'
	exit 2
fi
a=$1 b=$2
n=${3:-7}
shift $(($# < 3 ? $# : 3))
phases="keytab fill matrix solve advance plan caches directory outdated total"
# one run: "phase value" lines for every phase of bench_step's two lines
run() {
	taskset -c 1 "$1" "${@:2}" | tr ' ' '\n' | awk -v want="$phases" '
		BEGIN { split(want, w, " "); for (q in w) ok[w[q]] = 1 }
		prev in ok && $1 ~ /^[0-9.]+$/ { print prev, $1 }
		{ prev = $1 }'
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq "$n"); do
	# alternate which one goes first, so neither always follows the other
	if [ $((i % 2)) = 1 ]; then
		run "$a" "$@" >"$tmp/a$i"
		run "$b" "$@" >"$tmp/b$i"
	else
		run "$b" "$@" >"$tmp/b$i"
		run "$a" "$@" >"$tmp/a$i"
	fi
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
minimum() { tr ' ' '\n' | grep . | sort -n | head -1; }
# the values of one phase in runs 1..n of build x (a or b)
values() { for i in $(seq "$n"); do awk -v p="$2" '$1 == p {printf " %s", $2}' "$tmp/$1$i"; done; }
ratios() {
	for i in $(seq "$n"); do
		x=$(awk -v p="$1" '$1 == p {print $2}' "$tmp/a$i")
		y=$(awk -v p="$1" '$1 == p {print $2}' "$tmp/b$i")
		[ -n "$x" ] && [ -n "$y" ] && awk -v x="$x" -v y="$y" 'BEGIN {if (x > 0) printf " %.4f", y / x}'
	done
}
ta=$(values a total) tb=$(values b total) rt=$(ratios total)
echo "A $a:$ta  median $(echo "$ta" | median) min $(echo "$ta" | minimum)"
echo "B $b:$tb  median $(echo "$tb" | median) min $(echo "$tb" | minimum)"
echo "B/A paired:$rt  median $(echo "$rt" | median)"
line="per phase, median paired B/A:"
for p in $phases; do
	[ "$p" = total ] && continue
	r=$(ratios "$p")
	[ -n "$r" ] && line="$line $p $(echo "$r" | median)"
done
echo "$line"
