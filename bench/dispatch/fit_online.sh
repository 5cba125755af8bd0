#!/usr/bin/env bash
# The default's sizes fitted online against sizes fitted offline, in one
# run: esd-replay on the flat stream (Criteo Kaggle's 26 tables / 50, Zipf
# 1.05, seed 5) in paper.ini's setup without dispatch keys (n = 8, 4 x 5G
# + 4 x 0.5G, m = 128, 512-float rows, cache 8 %, 200 iterations), at each
# compute time per sample given (default: 50 us and 0).
#
#   bench/dispatch/fit_online.sh [COMPUTE_NS...]
#   bench/dispatch/fit_online.sh held-out     # the 18 held-out streams, 50 us
#
# Rows per compute time:
#   online        the runtime's default as a job runs it (`job`): sizes from
#                 the cold prior, then fitted online
#   online-equal  the same from equal sizes (workers.size_model = 0,0: the
#                 start before the prior), the baseline
#   offline       the same method with link-aware sizes from iteration 1
#                 (opt+shared+ls:2048@auto: probed on the first 24 iterations)
#   laia-own      LAIA with sizes fitted for itself (laia@auto)
# and the ratios online / offline and online-equal / offline (cost and
# critical path; goal: within 1.03), and how much shorter each online
# critical path is than laia-own's. Costs and critical paths are
# deterministic. Stream and outputs under build/quality/ (nothing is
# committed). Build first: scripts/build.sh build.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=build/bin
Q=build/quality
mkdir -p "$Q/streams" "$Q/out/F"
ST=$Q/streams/ck_z1.05_s5.esd
[ -s "$ST" ] || "$BIN/esd-data" gen -o "$ST" --shape criteo-kaggle -n 210k --scale 50 \
	--zipf 1.05 --seed 5 >/dev/null

. bench/dispatch/paper_job.sh
paper_job "$Q/fit_online.ini" "$ST"

# held-out: Setup's 18 streams of bench/results/quality.md (made here as
# quality_tables.sh A makes them), online / offline at 50 us
if [ "${1-}" = held-out ]; then
	mkdir -p "$Q/out/H"
	printf '%-12s %-9s %-9s %8s %8s\n' stream online offline cost crit
	for shape in criteo-kaggle avazu criteo-search; do
		case $shape in
		criteo-kaggle) tag=ck z=1.3 ;;
		avazu) tag=av z=1.2 ;;
		criteo-search) tag=cs z=1.2 ;;
		esac
		for v in "s2 --zipf $z --seed 2" "s3 --zipf $z --seed 3" "s4 --zipf $z --seed 4" \
			"z1.05_s5 --zipf 1.05 --seed 5" "z1.5_s5 --zipf 1.5 --seed 5" \
			"d5_s6 --zipf $z --seed 6 --drift 5"; do
			read -r name args <<<"$v"
			st=$Q/streams/${tag}_$name.esd
			# shellcheck disable=SC2086
			[ -s "$st" ] || "$BIN/esd-data" gen -o "$st" --shape $shape -n 210k --scale 50 \
				$args >/dev/null
			o=$Q/out/H/${tag}_$name.csv
			"$BIN/esd-replay" --config "$Q/fit_online.ini" --set data.stream="$st" \
				--set workers.compute_ns_per_sample=50000 --format csv \
				--mechanisms job,opt+shared+ls:2048@auto >"$o"
			sed -n 2,3p "$o" | awk -F, -v nm="${tag}_$name" '
			{ split($2, s, "/"); sz[NR] = s[1] "/" s[length(s)]; cost[NR] = $4; crit[NR] = $5 }
			END { printf "%-12s %-9s %-9s %8.3f %8.3f\n", nm, sz[1], sz[2],
				cost[1] / cost[2], crit[1] / crit[2] }'
		done
	done
	exit 0
fi
[ $# -gt 0 ] || set -- 50000 0
printf '%-8s %-13s %-12s %12s %10s %10s %10s %12s\n' compute mechanism "sizes fast/slow" \
	"cost ms" "crit ms" "cost/off" "crit/off" "vs laia-own"
for c in "$@"; do
	a=$Q/out/F/c$c.csv
	b=$Q/out/F/c$c.equal.csv
	"$BIN/esd-replay" --config "$Q/fit_online.ini" --set workers.compute_ns_per_sample="$c" \
		--format csv --mechanisms job,opt+shared+ls:2048@auto,laia@auto >"$a"
	"$BIN/esd-replay" --config "$Q/fit_online.ini" --set workers.compute_ns_per_sample="$c" \
		--set workers.size_model=0,0 --format csv --mechanisms job >"$b"
	# rows: online, offline, laia-own (a), online-equal (b)
	{ sed -n 2,4p "$a"; sed -n 2p "$b"; } | awk -F, -v c="$c" '
	{ name[NR] = $1; split($2, s, "/"); sz[NR] = s[1] "/" s[length(s)]
	  cost[NR] = $4 / 1e6; crit[NR] = $5 / 1e6 }
	END {
		label[1] = "online"; label[2] = "offline"; label[3] = "laia-own"; label[4] = "online-equal"
		split("1 4 2 3", order, " ")
		for (i = 1; i <= 4; i++) {
			r = order[i]
			printf "%-8s %-13s %-12s %12.1f %10.1f %10.3f %10.3f %11.1f%%\n", c, label[r], sz[r],
				cost[r], crit[r], cost[r] / cost[2], crit[r] / crit[2],
				100 * (1 - crit[r] / crit[3])
		}
	}'
done
