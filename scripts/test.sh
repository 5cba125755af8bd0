#!/usr/bin/env bash
# The whole test suite: install dependencies, then build and run every test
# twice, in a normal build (build/) and in an ASan+UBSan build (build-asan/),
# warnings as errors in both. Ends with ctest's summary of each.
# Usage: scripts/test.sh [extra ctest arguments, e.g. -L unit]
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh || exit 1
rc=0
for cfg in normal asan; do
	if [ $cfg = normal ]; then
		dir=build opts=(-DESD_WERROR=ON)
	else
		dir=build-asan opts=(-DESD_WERROR=ON -DESD_SANITIZE=ON)
	fi
	echo "=== $cfg build ($dir)"
	scripts/build.sh "$dir" "${opts[@]}" || { echo "build $cfg failed"; exit 1; }
	echo "=== $cfg tests"
	(cd "$dir" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure --timeout 600 -j 2 "$@") || rc=1
done
exit $rc
