#!/bin/bash
# esd-data end to end: gen -> stat round trips for the three shapes,
# determinism (same seed, same bytes), convert of small files in each real
# format and tsv-multi-hot (bags: dump, stat's bag lengths, separators), bad
# lines (file:line, exit 1; --skip-bad counts), corrupt and truncated
# streams refused, feature names (gen, convert --names/--header, dump, an
# old stream). Usage: test_esd_data.sh path/to/esd-data
set -u
ESD_DATA=${1:?usage: $0 path/to/esd-data [path/to/esd-replay]}
ESD_REPLAY=${2:-$(dirname "$ESD_DATA")/esd-replay}
T=$(mktemp -d "${TMPDIR:-/tmp}/esd-data-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
ok() { echo "ok   $*"; }
no() { echo "FAIL $*"; fails=$((fails + 1)); }
check() { # check "what" cmd...
	local what=$1
	shift
	if "$@"; then ok "$what"; else no "$what"; fi
}
json() { # json FILE.esd PYTHON-EXPR-over-j [stat args]
	local f=$1 expr=$2
	shift 2
	"$ESD_DATA" stat --json "$@" "$f" >"$T/stat.json" || return 1
	python3 -c "import json,sys; j=json.load(open('$T/stat.json')); sys.exit(0 if ($expr) else 1)"
}

# --- gen: determinism -------------------------------------------------------
G="gen --scale 1000 --max-rows 5000 -n 20000"
$ESD_DATA $G --seed 7 -o "$T/a.esd" && $ESD_DATA $G --seed 7 -o "$T/b.esd" &&
	$ESD_DATA $G --seed 8 -o "$T/c.esd" || no "gen runs"
check "same seed, identical bytes" cmp -s "$T/a.esd" "$T/b.esd"
check "other seed, other bytes" bash -c "! cmp -s '$T/a.esd' '$T/c.esd'"

# --- gen -> stat ----------------------------------------------------------------
check "stat: samples, tables, rows" json "$T/a.esd" \
	"j['samples'] == 20000 and j['ntables'] == 26 and j['ndense'] == 13 and
	 j['tables'][2]['rows'] == 5000 and j['tables'][0]['rows'] == 2 and
	 j['seed'] == 7 and j['shape'] == 'criteo-kaggle' and
	 all(t['distinct'] <= t['rows'] for t in j['tables'])"
check "stat: positive rate near Criteo's" json "$T/a.esd" "0.15 < j['positives'] / j['samples'] < 0.40"
$ESD_DATA gen --shape avazu --scale 100 --drift 0 -n 30000 --zipf 1.1 --zipf-table 8=0.9 \
	-o "$T/av.esd" || no "gen avazu"
check "stat avazu: 18 tables, fitted Zipf near the generator's" json "$T/av.esd" \
	"j['ntables'] == 18 and j['ndense'] == 0 and j['tables'][7]['name'] == 'device_id' and
	 abs(j['tables'][7]['zipf_fit'] - 1.1) < 0.15 and abs(j['tables'][8]['zipf_fit'] - 0.9) < 0.15
	 and j['tables'][8]['zipf_gen'] == 0.9"
check "stat: cache cover grows with the ratio" bash -c "
	'$ESD_DATA' stat --json --cache-ratio 0.01 '$T/av.esd' | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"cache_cover\"])' >'$T/c1' &&
	'$ESD_DATA' stat --json --cache-ratio 0.2 '$T/av.esd' | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"cache_cover\"])' >'$T/c2' &&
	python3 -c 'import sys; a=float(open(\"$T/c1\").read()); b=float(open(\"$T/c2\").read()); sys.exit(0 if 0 < a < b <= 1 else 1)'"
$ESD_DATA gen --shape criteo-search --max-rows 1000 -n 5000 --zstd 3 --dense-format bf16 \
	-o "$T/cs.esd" || no "gen criteo-search"
check "stat criteo-search (zstd, bf16): 17 tables" json "$T/cs.esd" \
	"j['ntables'] == 17 and j['ndense'] == 2 and j['samples'] == 5000"
check "human stat output" bash -c "'$ESD_DATA' stat '$T/a.esd' | grep -q 'covers'"

# --- bags (multi-hot tables, stream version 2) ------------------------------------
check "gen --bag: a multi-hot table" $ESD_DATA gen -o "$T/bag.esd" -n 3000 --scale 1000 \
	--max-rows 2000 --seed 7 --bag 3=4
check "stat counts every ID of a bag: table 3's top row seen over twice as often" bash -c "
	'$ESD_DATA' gen -o '$T/nobag.esd' -n 3000 --scale 1000 --max-rows 2000 --seed 7 >/dev/null &&
	'$ESD_DATA' stat --json '$T/bag.esd' >'$T/sb.json' &&
	'$ESD_DATA' stat --json '$T/nobag.esd' >'$T/snb.json' &&
	python3 -c \"import json; b=json.load(open('$T/sb.json')); n=json.load(open('$T/snb.json'));
assert b['tables'][3]['top_count'] > 2 * n['tables'][3]['top_count'], (b['tables'][3], n['tables'][3])\""
check "dump prints a bag as t:id,id,..." bash -c "'$ESD_DATA' dump -n 50 '$T/bag.esd' | grep -q ' 3:[0-9]*,[0-9]'"

# --- weighted bags (flag bit 2) --------------------------------------------------
check "gen --weighted: a weight per ID" $ESD_DATA gen -o "$T/wbag.esd" -n 3000 --scale 1000 \
	--max-rows 2000 --seed 7 --bag 3=4 --weighted
check "gen --weighted: the IDs, labels and dense of the unweighted stream, weights k/16" python3 -c "
import subprocess, re
d = lambda f: subprocess.run(['$ESD_DATA', 'dump', '-n', '3000', f], stdout=subprocess.PIPE,
                             text=True, check=True).stdout.splitlines()
w, p = d('$T/wbag.esd'), d('$T/bag.esd')
strip = lambda l: re.sub(r':(-?[0-9.e+-]+)(?=[, ]|$)', '', l.split('|')[1])
assert len(w) == len(p) == 3000
assert all(a.split('|')[0] == b.split('|')[0] and strip(a) == b.split('|')[1] for a, b in zip(w, p))
ws = [float(x) for l in w for x in re.findall(r':(-?[0-9.]+)(?=[, ]|$)', l.split('|')[1])]
assert ws and all(16 * x == int(16 * x) and 1 / 16 <= x <= 2 for x in ws), ws[:9]"
check "stat --json: weighted, each table's weights" json "$T/wbag.esd" \
	"j['weighted'] and j['tables'][3]['weights']['min'] >= 1 / 16 and
	 j['tables'][3]['weights']['max'] <= 2 and 0.9 < j['tables'][0]['weights']['mean'] < 1.2"
check "human stat: the weights' lines" bash -c "'$ESD_DATA' stat '$T/wbag.esd' | grep -q 'ID weights'"
check "stat --json: no weights without the flag" json "$T/bag.esd" "not j['weighted'] and j['tables'][3]['weights'] is None"
"$ESD_DATA" gen -o "$T/wx.esd" -n 10 --weighted 2>"$T/err" && no "gen --weighted without a bag table: refused"
check "gen --weighted needs a bag table" grep -q "needs a bag table" "$T/err"

# --- convert: Criteo Kaggle -----------------------------------------------------
C1=$'1\t1\t5\t\t-3\t100\t2\t3\t4\t5\t6\t7\t8\t9\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t\t3a171ecb\tc5c50484\te8b83407\t9727dd16'
C0=$'0\t\t0\t\t\t\t\t\t\t\t\t\t\t\t05db9164\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t'
printf '%s\n%s\n%s\n' "$C1" "$C0" "$C1" >"$T/criteo.tsv"
check "convert criteo" $ESD_DATA convert --format criteo-kaggle --no-progress -o "$T/cr.esd" "$T/criteo.tsv"
check "criteo: 3 samples, 1 positive... 2" json "$T/cr.esd" \
	"j['samples'] == 3 and j['positives'] == 2 and j['origin'] == 'criteo-kaggle' and
	 j['source'] == 'criteo.tsv' and j['tables'][2]['rows'] == 10131227"
$ESD_DATA dump "$T/cr.esd" >"$T/dump.txt"
check "dump: equal lines give equal keys, missing IDs are 0" python3 -c "
import sys
l = [x.split('|') for x in open('$T/dump.txt').read().splitlines()]
assert len(l) == 3 and l[0][1] == l[2][1] and l[0][1] != l[1][1]
assert l[0][0].split()[1] == '1' and l[1][0].split()[1] == '0'
ids = l[1][1].split()
assert ids[0] != '0:0' and all(x.endswith(':0') for x in ids[1:])"
check "convert criteo from stdin with --rows" bash -c \
	"cat '$T/criteo.tsv' | '$ESD_DATA' convert --format criteo-kaggle --rows 100 -o '$T/cr2.esd' - >/dev/null"
check "--rows applies to every table" json "$T/cr2.esd" "all(t['rows'] == 100 for t in j['tables'])"

: > "$T/empty.tsv"
check "convert of an empty input: refused, nothing written" bash -c \
	"! '$ESD_DATA' convert --format criteo-kaggle --no-progress -o '$T/e.esd' '$T/empty.tsv' 2>'$T/e.err' && grep -q 'no samples' '$T/e.err' && test ! -e '$T/e.esd'"
check "convert --allow-empty writes a stream of 0 samples" \
	$ESD_DATA convert --format criteo-kaggle --no-progress --allow-empty -o "$T/e.esd" "$T/empty.tsv"
check "--progress: a progress bar on stderr" bash -c \
	"'$ESD_DATA' convert --format criteo-kaggle --progress -o '$T/cr3.esd' '$T/criteo.tsv' 2>&1 >/dev/null | grep -q '100.0% 3 lines'"
check "--limit: stops after N samples" bash -c \
	"'$ESD_DATA' convert --format criteo-kaggle --limit 2 -o '$T/cr3.esd' '$T/criteo.tsv' | grep -q '2 samples from 2 lines'"

# --- convert: Avazu ---------------------------------------------------------------
{
	echo "id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,app_domain,app_category,device_id,device_ip,device_model,device_type,device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21"
	echo "1000009418151094273,0,14102100,1005,0,1fbe01fe,f3845767,28905ebd,ecad2386,7801e8d9,07d7df22,a99f214a,ddd2926e,44956a24,1,2,15706,320,50,1722,0,35,-1,79"
	echo "10000169349117863715,1,14102100,1005,0,1fbe01fe,f3845767,28905ebd,ecad2386,7801e8d9,07d7df22,a99f214a,96809ac8,711ee120,1,0,15704,320,50,1722,0,35,100084,79"
} >"$T/avazu.csv"
check "convert avazu" $ESD_DATA convert --format avazu --scale 10 -o "$T/av2.esd" "$T/avazu.csv"
check "avazu: 2 samples, 18 tables, scaled rows" json "$T/av2.esd" \
	"j['samples'] == 2 and j['positives'] == 1 and j['ntables'] == 18 and
	 j['tables'][8]['rows'] == 672949 and j['scale'] == 10"
echo "id,hour,C1" >"$T/avazu-test.csv"
$ESD_DATA convert --format avazu -o "$T/x.esd" "$T/avazu-test.csv" 2>"$T/err" && no "avazu without click" ||
	check "avazu without click: error names file:1" grep -q "avazu-test.csv:1: header: no 'click'" "$T/err"

# --- convert: Criteo Sponsored Search ------------------------------------------------
S1=$'1\t12.5\t3600\t1598891820\t3\t25.0\t-1\t7E56C27BFF0305E788DA55A029EC4988\t-1\t-1\t9C6A33397C1C17DC5C72D3B80932D4B5\t-1\t-1\t-1\t-1\t-1\t-1\t-1\t57A2E38E5DB3F4E0B9D5E4A8F6E3A7F4\tD7D1FB49049702BF6338894757E0D959\tC4A6D46F7A51A0C12A6D6C7AEE5E9E1E\t1B2D1CB9F1E5ADDD0CD9E3F5F7AF13D8\t2E7A6A2F8F1C59E5A8DF1E16E1A1E9E2'
S0=$'0\t-1\t-1\t1598891900\t-1\t-1\t-1\t7E56C27BFF0305E788DA55A029EC4988\t-1\t-1\t-1\t-1\t-1\t-1\t-1\t-1\t-1\t-1\t-1\t-1\t-1\t-1\t-1'
HDR=$'Sale\tSalesAmountInEuro\ttime_delay_for_conversion\tclick_timestamp\tnb_clicks_1week\tproduct_price\tproduct_age_group\tdevice_type\taudience_id\tproduct_gender\tproduct_brand\tproduct_category1\tproduct_category2\tproduct_category3\tproduct_category4\tproduct_category5\tproduct_category6\tproduct_category7\tproduct_country\tproduct_id\tproduct_title\tpartner_id\tuser_id'
printf '%s\n%s\n%s\n' "$HDR" "$S1" "$S0" >"$T/search.tsv"
printf '%s\n%s\n' "$S1" "$S0" >"$T/search-nohdr.tsv"
check "convert criteo-search (header)" $ESD_DATA convert --format criteo-search -o "$T/s1.esd" "$T/search.tsv"
check "convert criteo-search (no header)" $ESD_DATA convert --format criteo-search -o "$T/s2.esd" "$T/search-nohdr.tsv"
check "criteo-search: 2 samples, 17 tables, 2 dense" json "$T/s1.esd" \
	"j['samples'] == 2 and j['positives'] == 1 and j['ntables'] == 17 and j['ndense'] == 2"
check "criteo-search: header or not, same samples" bash -c \
	"cmp -s <('$ESD_DATA' dump '$T/s1.esd') <('$ESD_DATA' dump '$T/s2.esd')"

# --- convert: tsv-multi-hot (bags) --------------------------------------------------
MH="convert --format tsv-multi-hot --tables 3 --dense 2 --rows 1000,50,1 --no-progress"
printf '1\t0.5\t\t68fd1e64,a,ff\t3,3\t\n0\t2\t1e2\t\t7\t1,2,3,ffff\n1\t\t\t68fd1e64\t\t5\n' >"$T/mh.tsv"
check "convert tsv-multi-hot" $ESD_DATA $MH -o "$T/mh.esd" "$T/mh.tsv"
check "tsv-multi-hot: 3 samples, 2 dense, 3 bag tables of --rows, bounds down to the longest bags" json "$T/mh.esd" \
	"j['samples'] == 3 and j['positives'] == 2 and j['ntables'] == 3 and j['ndense'] == 2 and
	 j['shape'] == 'tsv-multi-hot' and j['source'] == 'mh.tsv' and
	 [t['rows'] for t in j['tables']] == [1000, 50, 1] and
	 [t['bags']['max_bag'] for t in j['tables']] == [3, 2, 4]"
$ESD_DATA dump "$T/mh.esd" >"$T/mhdump.txt"
$ESD_DATA convert --format criteo-kaggle --rows 1000 -o "$T/cr4.esd" "$T/criteo.tsv" >/dev/null
$ESD_DATA dump -n 1 "$T/cr4.esd" >"$T/cr4dump.txt"
check "dump shows the bags: lengths, repeats, empty bags, dense, IDs hashed as criteo-kaggle's" python3 -c "
l = [x.split('|') for x in open('$T/mhdump.txt').read().splitlines()]
b = [[kv.split(':')[1] for kv in x[1].split()] for x in l]
assert len(l) == 3, l
assert [len(v.split(',')) if v else 0 for v in b[0]] == [3, 2, 0], b
assert b[2][0] == b[0][0].split(',')[0]            # the same value, the same ID
r = b[0][1].split(','); assert r[0] == r[1], r      # a repeated ID stays in the bag
assert b[1][0] == '' and b[1][2] == '0,0,0,0', b    # empty bag; one row: every ID is 0
assert l[1][0].split()[1:] == ['0', '1.09861', '4.61512'], l[1]  # log(1 + x)
assert l[2][0].split()[2:] == ['0', '0'], l[2]      # empty dense: 0
c1 = open('$T/cr4dump.txt').read().split('|')[1].split()[0]
assert c1 == '0:' + b[0][0].split(',')[0], (c1, b[0])"
"$ESD_DATA" stat "$T/mh.esd" >"$T/mhstat.txt"
check "stat: a bag-length line per multi-hot table (min mean p50 p90 p99 max, histogram)" \
	grep -Eq '^ +2 +4 +0 +1\.67 +1 +4 +4 +4 +0:1 1:1 2-3:0 4-7:1$' "$T/mhstat.txt"
check "stat: bag lengths of table 0" grep -Eq '^ +0 +3 +0 +1\.33 +1 +3 +3 +3 +0:1 1:1 2-3:1$' "$T/mhstat.txt"
check "stat --json: bags of each table" json "$T/mh.esd" \
	"j['tables'][1]['bags'] == {'max_bag': 2, 'min': 0, 'mean': 1.0, 'p50': 1, 'p90': 2,
	 'p99': 2, 'max': 2, 'hist': [{'lo': 0, 'hi': 0, 'bags': 1}, {'lo': 1, 'hi': 1, 'bags': 1},
	 {'lo': 2, 'hi': 3, 'bags': 1}]}"
check "stat --json: no bags for single-ID tables, every bag counted for gen --bag" json "$T/bag.esd" \
	"j['tables'][0]['bags'] is None and j['tables'][3]['bags']['max'] <= 16 and
	 sum(h['bags'] for h in j['tables'][3]['bags']['hist']) == j['samples']"
check "human stat: no bag lines without bags" bash -c "! '$ESD_DATA' stat '$T/a.esd' | grep -q 'bag lengths'"
tr ',' ';' <"$T/mh.tsv" >"$T/mh-semi.tsv"
check "--multi-hot-sep ';': the same samples" bash -c \
	"'$ESD_DATA' $MH --multi-hot-sep ';' -o '$T/mh2.esd' '$T/mh-semi.tsv' >/dev/null &&
	 cmp -s <('$ESD_DATA' dump '$T/mh.esd') <('$ESD_DATA' dump '$T/mh2.esd')"
check "--max-bag M and T=M (either order), recorded per table" bash -c \
	"'$ESD_DATA' $MH --max-bag 2=300 --max-bag 4 -o '$T/mh3.esd' '$T/mh.tsv' >/dev/null"
check "--max-bag: the header's bounds, down to the longest bags where the width allows (u16 stays)" json "$T/mh3.esd" \
	"[t['bags']['max_bag'] for t in j['tables']] == [3, 2, 300] and j['samples'] == 3"
printf '1\t0.5\t\t68fd1e64:0.25,a:2,ff\t3,3:1.5\t\n' >"$T/mhw.tsv"
check "convert --weighted: id:weight members" $ESD_DATA $MH --weighted -o "$T/mhw.esd" "$T/mhw.tsv"
check "convert --weighted: dump prints id:weight, weight 1 where none is given" bash -c \
	"'$ESD_DATA' dump '$T/mhw.esd' | grep -Eq '\\| 0:[0-9]+:0.25,[0-9]+:2,[0-9]+:1 1:([0-9]+):1,\\1:1.5 2:\$'"
check "--weighted with --multi-hot-sep ':' is refused" bash -c \
	"! '$ESD_DATA' $MH --weighted --multi-hot-sep : -o '$T/mhw2.esd' '$T/mhw.tsv' 2>/dev/null"
check "tsv-multi-hot from stdin, zstd" bash -c \
	"'$ESD_DATA' $MH --zstd 3 -o '$T/mh4.esd' - <'$T/mh.tsv' >/dev/null &&
	 cmp -s <('$ESD_DATA' dump '$T/mh.esd') <('$ESD_DATA' dump '$T/mh4.esd')"

# --- bad lines ----------------------------------------------------------------------
printf '%s\n%s\n%s\n%s\n' "$C1" "$C0" $'1\t2\t3' "$C1" >"$T/bad.tsv"
if $ESD_DATA convert --format criteo-kaggle -o "$T/bad.esd" "$T/bad.tsv" 2>"$T/err" >/dev/null; then
	no "bad line fails the conversion"
else
	check "bad line: error names file and line" grep -q "bad.tsv:3: 3 tab-separated fields" "$T/err"
	check "bad line: no output left behind" test ! -e "$T/bad.esd"
fi
$ESD_DATA convert --format criteo-kaggle --skip-bad -o "$T/bad.esd" "$T/bad.tsv" >"$T/out" 2>"$T/err" ||
	no "--skip-bad converts"
check "--skip-bad: counted in the summary" grep -q "3 samples from 4 lines.*1 bad lines skipped" "$T/out"
check "--skip-bad: warns with file:line" grep -q "bad.tsv:3: skipped" "$T/err"
check "--skip-bad: count recorded in the stream" json "$T/bad.esd" "j['skipped'] == 1 and j['samples'] == 3"
printf '%s\n' "$C1" | sed 's/68fd1e64/68fd1e6z/' >"$T/hex.tsv"
$ESD_DATA convert --format criteo-kaggle -o "$T/hex.esd" "$T/hex.tsv" 2>"$T/err" && no "bad hex fails"
check "bad hex: names field and line" grep -q "hex.tsv:1: field 15 (C1): '68fd1e6z' is not a hex ID" "$T/err"
$ESD_DATA convert --format criteo-kaggle -o "$T/x.esd" "$T/missing.tsv" 2>"$T/err" && no "missing input fails"
check "missing input: names the file" grep -q "missing.tsv: cannot open" "$T/err"

# tsv-multi-hot: each kind of bad line names the file, the line and the field
MB="$MH --max-bag 2 --max-bag 0=64"
MG=$'1\t0.5\t\t3\t4\t5'
mh_bad() { # mh_bad WHAT LINE MESSAGE
	printf '%s\n%s\n%s\n' "$MG" "$2" "$MG" >"$T/mhbad.tsv"
	rm -f "$T/mhbad.esd"
	if $ESD_DATA $MB -o "$T/mhbad.esd" "$T/mhbad.tsv" >/dev/null 2>"$T/err"; then
		no "tsv-multi-hot $1: refused"
		return
	fi
	check "tsv-multi-hot $1: file, line and field named" grep -qF "mhbad.tsv:2: $3" "$T/err"
	check "tsv-multi-hot $1: nothing written" test ! -e "$T/mhbad.esd"
}
mh_bad "field count" $'1\t0\t0\t1\t1' "5 tab-separated fields, expected 6 (label, 2 dense, 3 tables)"
mh_bad "label" $'x\t0\t0\t1\t1\t1' "field 1 (label): 'x' is not 0 or 1"
mh_bad "number" $'1\t0\tabc\t1\t1\t1' "field 3 (dense 1): 'abc' is not a number"
mh_bad "non-hex ID" $'1\t0\t0\t1\t1,zz\t1' "field 5 (table 1): 'zz' (ID 2 of the bag) is not a hex ID"
mh_bad "empty item" $'1\t0\t0\t3,,4\t1\t1' "field 4 (table 0): '3,,4': ID 2 of the bag is empty"
mh_bad "bag over --max-bag" $'1\t0\t0\t1\t1\t1,2,3' "field 6 (table 2): a bag of 3 IDs, above --max-bag 2"
{
	echo "$MG"
	printf '%s\n' $'1\t0\t0\t1\t1' $'x\t0\t0\t1\t1\t1' $'1\t0\tabc\t1\t1\t1' \
		$'1\t0\t0\t1\t1,zz\t1' $'1\t0\t0\t3,,4\t1\t1' $'1\t0\t0\t1\t1\t1,2,3'
	echo "$MG"
} >"$T/mhbad.tsv"
$ESD_DATA $MB --skip-bad -o "$T/mhbad.esd" "$T/mhbad.tsv" >"$T/out" 2>"$T/err" ||
	no "tsv-multi-hot --skip-bad converts"
check "tsv-multi-hot --skip-bad: counted in the summary" grep -q "2 samples from 8 lines.*6 bad lines skipped" "$T/out"
check "tsv-multi-hot --skip-bad: warns with file:line" grep -q "mhbad.tsv:6: skipped: field 4 (table 0)" "$T/err"
check "tsv-multi-hot --skip-bad: count recorded in the stream" json "$T/mhbad.esd" "j['skipped'] == 6 and j['samples'] == 2"

# --- corrupt and truncated streams ------------------------------------------------------
cp "$T/a.esd" "$T/corrupt.esd"
python3 -c "
f = open('$T/corrupt.esd', 'r+b'); f.seek(100000); b = f.read(1); f.seek(100000)
f.write(bytes([b[0] ^ 0xff])); f.close()"
$ESD_DATA stat "$T/corrupt.esd" >/dev/null 2>"$T/err" && no "corrupt stream refused"
check "corrupt stream: file, block and byte named" grep -Eq "corrupt.esd: block [0-9]+ at byte [0-9]+: checksum mismatch" "$T/err"
cp "$T/a.esd" "$T/trunc.esd"
truncate -s 200000 "$T/trunc.esd"
$ESD_DATA stat "$T/trunc.esd" >/dev/null 2>"$T/err" && no "truncated stream refused"
check "truncated stream: says so" grep -q "trunc.esd: truncated" "$T/err"
$ESD_DATA stat "$T/criteo.tsv" >/dev/null 2>"$T/err" && no "text file refused"
check "not a stream: bad magic" grep -q "not a dataset stream" "$T/err"

# --- hot: FAE's static hot set ---------------------------------------------------
$ESD_DATA hot "$T/a.esd" -n 300 --limit 5000 -o "$T/hot.txt" >/dev/null || no "hot runs"
$ESD_DATA dump "$T/a.esd" -n 5000 >"$T/dump.txt" || no "dump for hot"
check "hot: the 300 most frequent keys of the first 5000 samples, ascending" python3 -c "
import collections
c = collections.Counter()
for line in open('$T/dump.txt'):
    for kv in line.split('|')[1].split():
        t, i = kv.split(':'); c[(int(t) << 48) | int(i)] += 1
want = sorted(sorted(c, key=lambda k: (-c[k], k))[:300])
lines = open('$T/hot.txt').read().splitlines()
assert lines[0] == '# esd hot rows v1', lines[0]
got = [(int(l.split(':')[0]) << 48) | int(l.split(':')[1]) for l in lines if not l.startswith('#')]
assert got == want, (len(got), len(want))
"
$ESD_DATA hot "$T/a.esd" -n 100000000 -o "$T/hot-all.txt" >"$T/out" || no "hot: more than seen"
check "hot: never more keys than the stream has" grep -q "fewer distinct keys than asked" "$T/out"
printf '# esd hot rows v1\n0:5\n0:x\n' >"$T/bad1.txt"
printf '# esd hot rows v1\n0:5\n0:3\n' >"$T/bad2.txt"
printf '# esd hot rows v1\n1:5\n1:5\n' >"$T/bad3.txt"
printf '0:5\n' >"$T/bad4.txt"
cat >"$T/hot.ini" <<EOI
[workers]
n = 2
batch = 8
[dispatch]
method = vanilla
sync = full-set
replicate = $T/BAD
[data]
stream = $T/a.esd
EOI
for b in bad1 bad2 bad3 bad4; do
	sed "s|$T/BAD|$T/$b.txt|" "$T/hot.ini" >"$T/$b.ini"
	"$ESD_REPLAY" --config "$T/$b.ini" --iters 2 >/dev/null 2>"$T/err$b" &&
		no "$b: bad hot-row file refused"
done
check "hot file: bad ID named with file:line" grep -q "bad1.txt:3: expected TABLE:ID" "$T/errbad1"
check "hot file: out of order named" grep -q "bad2.txt:3: key 0:3 out of order" "$T/errbad2"
check "hot file: repeated key named" grep -q "bad3.txt:3: key 1:5 repeated" "$T/errbad3"
check "hot file: not a hot-row file" grep -q "bad4.txt:1: not a hot-row file" "$T/errbad4"
sed "s|$T/BAD|$T/hot.txt|" "$T/hot.ini" >"$T/good.ini"
check "hot file: esd-replay runs FAE with it" "$ESD_REPLAY" --config "$T/good.ini" --iters 3 \
	--mechanisms job

# --- usage ----------------------------------------------------------------------------
$ESD_DATA frobnicate >/dev/null 2>&1
check "unknown command: exit 2" test $? -eq 2
$ESD_DATA gen -n 10 >/dev/null 2>&1
check "gen without -o: exit 2" test $? -eq 2
check "convert's usage lists tsv-multi-hot and its options" bash -c \
	"'$ESD_DATA' convert --help 2>&1 | grep -q 'tsv-multi-hot' &&
	 '$ESD_DATA' --help | grep -q -- '--multi-hot-sep C' && '$ESD_DATA' --help | grep -q -- '--max-bag M|T=M'"
mh_usage() { # mh_usage WHAT ARGS...: exit 2, nothing written
	local what=$1
	shift
	rm -f "$T/u.esd"
	$ESD_DATA convert --no-progress -o "$T/u.esd" "$@" "$T/mh.tsv" >/dev/null 2>&1
	check "$what: exit 2" test $? -eq 2 -a ! -e "$T/u.esd"
}
mh_usage "--tables without tsv-multi-hot" --format criteo-kaggle --tables 3
mh_usage "tsv-multi-hot without --rows" --format tsv-multi-hot --tables 3 --dense 2
mh_usage "tsv-multi-hot without --tables" --format tsv-multi-hot --rows 10
mh_usage "--max-bag 1" --format tsv-multi-hot --tables 3 --dense 2 --rows 10 --max-bag 1
mh_usage "--max-bag past the tables" --format tsv-multi-hot --tables 3 --dense 2 --rows 10 --max-bag 3=8
mh_usage "--multi-hot-sep tab" --format tsv-multi-hot --tables 3 --dense 2 --rows 10 --multi-hot-sep $'\t'
mh_usage "--multi-hot-sep hex digit" --format tsv-multi-hot --tables 3 --dense 2 --rows 10 --multi-hot-sep a
$ESD_DATA $MH --rows 10,20 -o "$T/u.esd" "$T/mh.tsv" >/dev/null 2>"$T/err"
check "--rows: 2 values for 3 tables refused" grep -q -- "--rows: 2 values for 3 tables" "$T/err"

# --- feature names ------------------------------------------------------------------
NG="gen --scale 1000 --max-rows 5000 -n 3000 --seed 3"
$ESD_DATA $NG -o "$T/n1.esd" && $ESD_DATA $NG --no-names -o "$T/n0.esd" || no "gen with and without names"
check "gen names the tables by the shape's columns (C1..C26), in the stream" json "$T/n1.esd" \
	"j['named'] and [t['name'] for t in j['tables']] == ['C%d' % i for i in range(1, 27)]"
check "gen --no-names: no names section (26 x 32 bytes fewer), flag clear" bash -c \
	"test \$(( \$(stat -c %s '$T/n1.esd') - \$(stat -c %s '$T/n0.esd') )) -eq 832 &&
	 '$ESD_DATA' stat --json '$T/n0.esd' | python3 -c 'import json,sys; assert not json.load(sys.stdin)[\"named\"]'"
check "names change no sample: dump of both the same" bash -c \
	"cmp -s <('$ESD_DATA' dump -n 3000 '$T/n1.esd') <('$ESD_DATA' dump -n 3000 '$T/n0.esd')"
check "dump --names shows the names" bash -c \
	"'$ESD_DATA' dump -n 1 --names '$T/n1.esd' | grep -q '| C1:[0-9]* C2:[0-9]* .* C26:[0-9]*\$'"
NN=$(python3 -c "print(','.join('feat_%d' % i for i in range(18)))")
check "gen --names" bash -c "'$ESD_DATA' gen --shape avazu --scale 1000 -n 100 --names '$NN' -o '$T/n2.esd' &&
	'$ESD_DATA' dump -n 1 --names '$T/n2.esd' | grep -q ' feat_0:[0-9]* .* feat_17:[0-9]*\$'"
OLD="$(dirname "$0")/corpus/stream/tiny-avazu.esd"
check "a stream written before names reads: unnamed, the shape's columns shown" json "$OLD" \
	"not j['named'] and j['tables'][1]['name'] == 'site_id'"
$ESD_DATA gen --scale 1000 -n 10 --names C1,C2 -o "$T/nx.esd" 2>"$T/err" && no "2 names for 26 tables refused"
check "--names: a count other than the tables' refused" grep -q -- "--names: 2 names for 26 tables" "$T/err"
$ESD_DATA gen --shape avazu --scale 1000 -n 10 --names "${NN/feat_3/feat_2}" -o "$T/nx.esd" 2>"$T/err" &&
	no "a repeated name refused"
check "--names: a repeat refused, naming the table" grep -q "table 3: name 'feat_2' already names table 2" "$T/err"
$ESD_DATA gen --shape avazu --scale 1000 -n 10 --names "${NN/feat_3/a b}" -o "$T/nx.esd" 2>"$T/err" &&
	no "a space in a name refused"
check "--names: a bad character refused" grep -q "name 4 'a b': a character outside" "$T/err"
check "convert tsv-multi-hot --names" bash -c \
	"'$ESD_DATA' $MH --names item,hist,cat -o '$T/mhn.esd' '$T/mh.tsv' >/dev/null &&
	 '$ESD_DATA' dump --names '$T/mhn.esd' | head -1 | grep -q ' item:[0-9,]* hist:[0-9,]* cat:\$'"
{ printf 'click\tprice\tage\titem\thist\tcat\n'; cat "$T/mh.tsv"; } >"$T/mhh.tsv"
check "convert --header: the header line names the tables, the same stream as --names" bash -c \
	"'$ESD_DATA' $MH --header -o '$T/mhh.esd' '$T/mhh.tsv' | grep -q '3 samples from 4 lines' &&
	 cmp -s <('$ESD_DATA' dump '$T/mhn.esd') <('$ESD_DATA' dump '$T/mhh.esd') &&
	 '$ESD_DATA' stat --json '$T/mhh.esd' | grep -q '\"name\": \"hist\"'"
{ printf 'click\tprice\tage\titem\thist\n'; cat "$T/mh.tsv"; } >"$T/mhb.tsv"
$ESD_DATA $MH --header -o "$T/nx.esd" "$T/mhb.tsv" 2>"$T/err" && no "a short header refused"
check "--header: a header of another field count refused, naming file:1" \
	grep -q "mhb.tsv:1: header of 5 fields, expected 6" "$T/err"
check "convert criteo-kaggle: tables named C1..C26" json "$T/cr.esd" \
	"j['named'] and j['tables'][25]['name'] == 'C26'"

echo "$fails failures"
[ "$fails" -eq 0 ]
