#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# sparse (make C=2) over kvarena.ko against each given kernel's headers;
# fails on any sparse report about our sources.  Usage: sparse.sh VERSION...
set -euo pipefail
cd "$(dirname "$0")/../.."
rc=0
for kver in "$@"; do
	src=build/sparse/$kver
	rm -rf "$src" && mkdir -p "$src"
	cp -r --parents Kbuild kmod include/uapi/linux/kvarena.h "$src"/
	log=$src/sparse.log
	make -s -j"$(nproc)" -C "/lib/modules/$kver/build" M="$PWD/$src" C=2 modules >"$log" 2>&1 || {
		echo "sparse: build failed on $kver" >&2; cat "$log" >&2; rc=1; continue; }
	if grep -E "^$PWD/$src/.*(warning|error):" "$log"; then
		echo "sparse: reports on $kver (above)" >&2
		rc=1
	else
		echo "sparse on $kver: clean"
	fi
done
exit "$rc"
