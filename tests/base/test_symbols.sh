#!/usr/bin/env bash
# A static library's global names all carry the project's prefix: a
# cross-file internal is named esd_<module>_..., a name one file uses is
# static. A global without the prefix can collide with a name of whatever
# links the library (a trainer, a PyTorch extension) and fails here.
#
# usage: test_symbols.sh PREFIX LIBRARY.a...
set -uo pipefail
if [ $# -lt 2 ]; then
	echo "usage: $0 PREFIX LIBRARY.a..." >&2
	exit 2
fi
prefix=$1
shift
if ! command -v nm >/dev/null; then
	echo "SKIP: no nm (binutils) on this machine"
	exit 77
fi
bad=0
for lib in "$@"; do
	if [ ! -r "$lib" ]; then
		echo "FAIL: $lib: no such library" >&2
		exit 1
	fi
	if ! out=$(nm -g --defined-only "$lib"); then
		echo "FAIL: nm could not read $lib" >&2
		exit 1
	fi
	# the compiler's own (C++ and CUDA objects' DW.ref.*, reserved _*) aside
	names=$(awk -v p="$prefix" 'NF == 3 && $2 ~ /^[TDBRVWC]$/ && index($3, p) != 1 &&
		$3 !~ /^(DW\.ref\.|_)/ {print $3}' <<<"$out" | sort -u)
	total=$(awk 'NF == 3 && $2 ~ /^[TDBRVWC]$/' <<<"$out" | wc -l)
	if [ -n "$names" ]; then
		echo "FAIL: $lib defines global names without the prefix $prefix (make them static," \
			"or name them ${prefix}<module>_...):"
		sed 's/^/  /' <<<"$names"
		bad=1
	else
		echo "ok: $lib: $total global names, all $prefix*"
	fi
done
exit $bad
