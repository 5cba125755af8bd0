#!/usr/bin/env bash
# Regenerate the streams of the held-out, scaling and paper-gap tables of
# bench/results/quality.md and run every esd-replay command behind them.
#
#   bench/dispatch/quality_tables.sh [A] [B] [C] [D]   (no argument: all four)
#
# A: held-out streams (seeds 2-4, Zipf 1.05 / 1.5, drift 5), three shapes
# B: scaling in workers, n = 8, 16, 32, 64
# C: the paper's gap, one factor at a time from paper.ini
# D: the runtime's default as a job file without dispatch keys (sizes
#    fitted online) on A's streams, against LAIA fitting its own online
#
# Streams and CSV results go under build/quality/ (nothing is committed).
# The runs whose decision times are quoted (A and B) are
# pinned to one core (ESD_TASKSET, default "taskset -c 1") and repeated
# three times (ESD_RUNS); quote the median CPU p50 of the runs. Costs and
# critical paths are deterministic. Build first: scripts/build.sh build.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=build/bin
Q=build/quality
RUNS=${ESD_RUNS:-3}
read -r -a PIN <<<"${ESD_TASKSET-taskset -c 1}"
mkdir -p "$Q/streams" "$Q/out/A" "$Q/out/B" "$Q/out/C" "$Q/out/D"

# paper.ini of bench/results/quality.md (the stream is set per run)
. bench/dispatch/paper_job.sh
paper_job "$Q/paper.ini" none opt

gen() { # gen NAME ARGS...: a stream, once
	local f=$Q/streams/$1.esd
	shift
	[ -s "$f" ] || "$BIN/esd-data" gen -o "$f" "$@" >/dev/null
}

replay() { # replay OUT.csv ARGS...
	local out=$1
	shift
	"$BIN/esd-replay" --config "$Q/paper.ini" --format csv "$@" >"$out"
}

DEFAULT=opt+shared+ls:2048@auto

part_a() {
	local shape tag z s
	for shape in criteo-kaggle avazu criteo-search; do
		case $shape in
		criteo-kaggle) tag=ck z=1.3 ;;
		avazu) tag=av z=1.2 ;;
		criteo-search) tag=cs z=1.2 ;;
		esac
		local base=(--shape "$shape" -n 210k --scale 50)
		for s in 2 3 4; do gen "${tag}_s$s" "${base[@]}" --zipf $z --seed $s; done
		gen "${tag}_z1.05_s5" "${base[@]}" --zipf 1.05 --seed 5
		gen "${tag}_z1.5_s5" "${base[@]}" --zipf 1.5 --seed 5
		gen "${tag}_d5_s6" "${base[@]}" --zipf $z --seed 6 --drift 5
	done
	local mech=laia@equal,$DEFAULT,laia@same,laia@auto st name c r
	for st in "$Q"/streams/{ck,av,cs}_{s2,s3,s4,z1.05_s5,z1.5_s5,d5_s6}.esd; do
		name=$(basename "$st" .esd)
		for c in 50000 0; do
			for r in $(seq 1 "$RUNS"); do
				"${PIN[@]}" "$BIN/esd-replay" --config "$Q/paper.ini" --format csv \
					--set data.stream="$st" --set workers.compute_ns_per_sample=$c \
					--mechanisms "$mech" >"$Q/out/A/$name.c$c.r$r.csv"
			done
		done
	done
}

part_b() {
	# 1.7M samples: 200 iterations at k = 64 x 128 (its first 210k samples
	# are those of the 210k seed-2 stream)
	gen ck_s2_1700k --shape criteo-kaggle -n 1700k --scale 50 --zipf 1.3 --seed 2
	local mech=laia@equal,$DEFAULT,laia@same,opt+shared+ls:1024@auto,laia@same
	mech+=,heu+shared+ls:2048@auto,heu+shared+ls:8192@auto,hybrid:0.25+shared+ls:2048@auto
	mech+=,laia+ls:2048@auto,laia@same,laia+ls:8192@auto,heu+shared@auto,laia@auto
	local n r
	for n in 8 16 32 64; do
		for r in $(seq 1 "$RUNS"); do
			"${PIN[@]}" "$BIN/esd-replay" --config "$Q/paper.ini" --format csv \
				--set data.stream="$Q/streams/ck_s2_1700k.esd" --set workers.n=$n \
				--set workers.rates="5G*$((n * 3 / 4)),0.5G*$((n / 4))" \
				--set workers.compute_ns_per_sample=50000 \
				--mechanisms "$mech" >"$Q/out/B/n$n.r$r.csv"
		done
	done
	# cheaper candidates, at the two ends only
	mech=laia@equal,laia+ls:512@auto,laia@same,laia+ls:1024@auto,laia@same
	mech+=,heu+shared+ls:512@auto,laia@same
	for n in 64 8; do
		for r in $(seq 1 "$RUNS"); do
			"${PIN[@]}" "$BIN/esd-replay" --config "$Q/paper.ini" --format csv \
				--set data.stream="$Q/streams/ck_s2_1700k.esd" --set workers.n=$n \
				--set workers.rates="5G*$((n * 3 / 4)),0.5G*$((n / 4))" \
				--set workers.compute_ns_per_sample=50000 \
				--mechanisms "$mech" >"$Q/out/B/x_n$n.r$r.csv"
		done
	done
}

part_c() {
	local base=(--shape criteo-kaggle --seed 2)
	gen ck_s2 "${base[@]}" -n 210k --scale 50 --zipf 1.3
	gen ck_s2_1700k "${base[@]}" -n 1700k --scale 50 --zipf 1.3
	# share of tiny tables (< 300 rows): 8, 12, 17 (base), 21 of 26, all capped at 300
	gen ck_s2_sc1 "${base[@]}" -n 210k --scale 1 --zipf 1.3
	gen ck_s2_sc5 "${base[@]}" -n 210k --scale 5 --zipf 1.3
	gen ck_s2_sc1000 "${base[@]}" -n 210k --scale 1000 --zipf 1.3
	gen ck_s2_max300 "${base[@]}" -n 210k --scale 50 --max-rows 300 --zipf 1.3
	local z
	for z in 0.8 1.05 1.2 1.5 2.0; do gen "ck_s2_z$z" "${base[@]}" -n 210k --scale 50 --zipf $z; done
	gen ck_s2_drift0 "${base[@]}" -n 210k --scale 50 --zipf 1.3 --drift 0
	local mech=laia@equal,opt,hybrid:0.25,$DEFAULT,laia@same
	local S=$Q/streams c v
	for c in 0 50000; do
		local cc=(--set workers.compute_ns_per_sample=$c --mechanisms "$mech")
		replay "$Q/out/C/base.c$c.csv" --set data.stream=$S/ck_s2.esd "${cc[@]}"
		for v in sc1 sc5 sc1000 max300 z0.8 z1.05 z1.2 z1.5 z2.0 drift0; do
			replay "$Q/out/C/$v.c$c.csv" --set data.stream=$S/ck_s2_$v.esd "${cc[@]}"
		done
		for v in 0.001 0.005 0.02 0.3; do
			replay "$Q/out/C/cache$v.c$c.csv" --set data.stream=$S/ck_s2.esd \
				--set cache.ratio=$v "${cc[@]}"
		done
		for v in 16 64; do
			replay "$Q/out/C/dim$v.c$c.csv" --set data.stream=$S/ck_s2.esd \
				--set model.dim=$v "${cc[@]}"
		done
		for v in 32 512; do
			replay "$Q/out/C/batch$v.c$c.csv" --set data.stream=$S/ck_s2_1700k.esd \
				--set workers.batch=$v "${cc[@]}"
		done
		# beyond the five factors: sync, policy, equal links
		replay "$Q/out/C/fullset.c$c.csv" --set data.stream=$S/ck_s2.esd \
			--set dispatch.sync=full-set "${cc[@]}"
		replay "$Q/out/C/lru.c$c.csv" --set data.stream=$S/ck_s2.esd \
			--set cache.policy=lru "${cc[@]}"
		replay "$Q/out/C/lookahead.c$c.csv" --set data.stream=$S/ck_s2.esd \
			--set cache.policy=lookahead "${cc[@]}"
		replay "$Q/out/C/eqlinks.c$c.csv" --set data.stream=$S/ck_s2.esd \
			--set workers.rates=5G "${cc[@]}"
	done
}

part_d() {
	# paper.ini without its [dispatch] section: what a user's job file runs
	paper_job "$Q/nodisp.ini" none
	local st name
	for st in "$Q"/streams/{ck,av,cs}_{s2,s3,s4,z1.05_s5,z1.5_s5,d5_s6}.esd; do
		[ -s "$st" ] || part_a
		name=$(basename "$st" .esd)
		"$BIN/esd-replay" --config "$Q/nodisp.ini" --format csv --set data.stream="$st" \
			--set workers.compute_ns_per_sample=50000 \
			--mechanisms laia@equal,job,laia@same >"$Q/out/D/$name.csv"
		"$BIN/esd-replay" --config "$Q/nodisp.ini" --format csv --set data.stream="$st" \
			--set workers.compute_ns_per_sample=50000 --set dispatch.method=laia \
			--set workers.split=fit --mechanisms job >"$Q/out/D/$name.laia-fit.csv"
	done
}

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(A B C D)
for p in "${parts[@]}"; do
	case $p in
	A) part_a ;;
	B) part_b ;;
	C) part_c ;;
	D) part_d ;;
	*) echo "usage: $0 [A] [B] [C] [D]" >&2 && exit 2 ;;
	esac
done
