#!/bin/sh
# SPDX-License-Identifier: MIT
# coverage.sh - `make coverage-engine`: the engine's test binaries built
# again with gcov's branch counters (build/engine-cov), the engine suite
# run on them, and every branch of daemon/engine/*.c that the suite never
# takes listed with its line (build/engine-cov/untaken.txt). A condition
# never true, or never false, is one no test can tell from its negation
# or from 0: where mutants survive. Lines run only on allocation
# failures or by the kernel-backend guest suite show up too.
set -eu
OUT=build/engine-cov
TESTS="test_gguf test_kernels test_tokenizer test_engine test_fuzz test_threads test_arena
       test_constrain test_oom test_selfcheck kve-logits kvc-gen"
targets=
for t in $TESTS; do
	targets="$targets $OUT/tests/$t"
done
# shellcheck disable=SC2086 # a list of targets
make -s --no-print-directory ENGINE_OUT=$OUT ENGINE_COVFLAGS=--coverage $targets
find $OUT -name '*.gcda' -delete
ENGINE_OUT=$OUT ENGINE_SKIP_DEMO=1 sh tests/engine/run.sh > $OUT/suite.txt 2>&1 ||
	echo "coverage.sh: the suite failed on the coverage build (see $OUT/suite.txt)"
tail -1 $OUT/suite.txt
rm -rf $OUT/gcov
mkdir -p $OUT/gcov
gcov -b -o $OUT/san daemon/engine/*.c > /dev/null 2>&1 || true
mv ./*.gcov $OUT/gcov/ 2>/dev/null || true
"${ENGINE_PY:-/usr/bin/python3}" tests/engine/untaken.py $OUT/gcov daemon/engine/*.c \
	> $OUT/untaken.txt
sed -n '/^file/,/^$/p' $OUT/untaken.txt
echo "branches never taken, line by line: $OUT/untaken.txt"
