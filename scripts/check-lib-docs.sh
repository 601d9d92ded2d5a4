#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# libkvarena's exported symbols against what documents them: the version
# script, the public headers, Documentation/library.md's function list and
# the man pages (Documentation/man/SYMBOL.3, a page or a .so link to the
# group page whose NAME lists it), in both directions.
# Usage: scripts/check-lib-docs.sh build/lib/libkvarena.so
set -euo pipefail
so=$1
man=Documentation/man
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

nm -D --defined-only "$so" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' |
	sort -u > "$tmp/exported"
sed -n '/global:/,/local:/p' lib/libkvarena.map | grep -o 'kva_[a-z0-9_]*' |
	sort -u > "$tmp/map"
cat lib/kvarena.h lib/kvarena_toolwait.h | tr '\n' ' ' |
	grep -o '[a-z0-9_ *]\bkva_[a-z0-9_]*(' | grep -o 'kva_[a-z0-9_]*' |
	sort -u > "$tmp/header"
sed -n '/^## Function list/,$p' Documentation/library.md |
	grep -o '`kva_[a-z0-9_]*`' | tr -d '`' | sort -u > "$tmp/guide"
: > "$tmp/manned"
for f in "$man"/kva_*.3; do
	head -1 "$f" | grep -q '^\.so ' && continue
	sed -n '/^\.SH NAME/,/^\.SH/p' "$f" | grep -o 'kva_[a-z0-9_]*' >> "$tmp/manned"
done
sort -u -o "$tmp/manned" "$tmp/manned"

fail=0
check() {	# check WHAT FILE: FILE must equal the exported list
	local d
	d=$(diff "$tmp/exported" "$tmp/$2" | grep '^[<>]' || true)
	if [ -n "$d" ]; then
		echo "check-lib-docs: $1 differs from the exported symbols" \
			"(< exported only, > $1 only):"
		echo "$d"
		fail=1
	fi
}
check "the version script" map
check "the headers' declarations" header
check "library.md's function list" guide
check "the man pages' NAME sections" manned
while read -r sym; do
	f=$man/$sym.3
	if [ ! -f "$f" ]; then
		echo "check-lib-docs: no man page $f"
		fail=1
	elif head -1 "$f" | grep -q '^\.so '; then
		t=$man/$(head -1 "$f" | sed 's|^\.so man3/||')
		if [ ! -f "$t" ] || ! sed -n '/^\.SH NAME/,/^\.SH/p' "$t" | grep -qw "$sym"; then
			echo "check-lib-docs: $f points to $t, which does not name $sym"
			fail=1
		fi
	fi
done < "$tmp/exported"
[ $fail = 0 ] && echo "check-lib-docs: $(wc -l < "$tmp/exported") exported functions," \
	"each in the map, a header, library.md and a man page"
exit $fail
