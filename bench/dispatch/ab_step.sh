#!/usr/bin/env bash
# Paired timing of two bench_step builds on a noisy machine: N alternating
# runs of each on core 1, then each one's runs and median whole step (ms).
# usage: bench/dispatch/ab_step.sh BENCH_STEP_A BENCH_STEP_B [N] [bench_step options]
# e.g.   bench/dispatch/ab_step.sh /tmp/before/bin/bench_step build/bin/bench_step 9 --m 128
set -euo pipefail
if [ $# -lt 2 ]; then
	sed -n '2,5p' "$0" | sed 's/^# //'
	exit 2
fi
a=$1 b=$2
n=${3:-7}
shift $(($# < 3 ? $# : 3))
total() { taskset -c 1 "$1" "${@:2}" | tail -1 | sed -n 's/.*total \([0-9.]*\).*/\1/p'; }
ta= tb=
for _ in $(seq "$n"); do
	ta="$ta $(total "$a" "$@")"
	tb="$tb $(total "$b" "$@")"
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "A $a:$ta  median $(echo "$ta" | median)"
echo "B $b:$tb  median $(echo "$tb" | median)"
