#!/usr/bin/env bash
# Paired timing of two bench_step builds on a noisy machine: N alternating
# runs of each on core 1, then each one's runs, median and minimum whole
# step (ms), and the median of the N paired ratios B/A (each pair runs
# within a few seconds, so slow phases of the host mostly cancel).
# usage: bench/dispatch/ab_step.sh BENCH_STEP_A BENCH_STEP_B [N] [bench_step options]
# e.g.   bench/dispatch/ab_step.sh /tmp/before/bin/bench_step build/bin/bench_step 9 --m 128
set -euo pipefail
if [ $# -lt 2 ]; then
	sed -n '2,7p' "$0" | sed 's/^# //'
	exit 2
fi
a=$1 b=$2
n=${3:-7}
shift $(($# < 3 ? $# : 3))
total() { taskset -c 1 "$1" "${@:2}" | sed -n 's/.* total \([0-9.]*\).*/\1/p'; }
ta= tb= ratios=
for i in $(seq "$n"); do
	# alternate which one goes first, so neither always follows the other
	if [ $((i % 2)) = 1 ]; then
		x=$(total "$a" "$@"); y=$(total "$b" "$@")
	else
		y=$(total "$b" "$@"); x=$(total "$a" "$@")
	fi
	ta="$ta $x" tb="$tb $y"
	ratios="$ratios $(awk -v x="$x" -v y="$y" 'BEGIN {printf "%.4f", y / x}')"
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
minimum() { tr ' ' '\n' | grep . | sort -n | head -1; }
echo "A $a:$ta  median $(echo "$ta" | median) min $(echo "$ta" | minimum)"
echo "B $b:$tb  median $(echo "$tb" | median) min $(echo "$tb" | minimum)"
echo "B/A paired:$ratios  median $(echo "$ratios" | median)"
