#!/bin/sh
# SPDX-License-Identifier: MIT
# Every struct and enum tag the installed headers declare must be usable by
# its bare name from C++ (a function of the same name would hide it): emit
# one translation unit naming each, for `c++ -fsyntax-only`.
# Usage: cxx-tags.sh INCLUDEDIR > tags.cpp
set -eu
inc=$1
echo '#include <kvarena/kvarena.h>'
echo '#include <kvarena/kvarena_toolwait.h>'
echo 'void kva_cxx_tags(void);'
echo 'void kva_cxx_tags(void) {'
for h in "$inc"/kvarena/kvarena.h "$inc"/kvarena/kvarena_toolwait.h \
	 "$inc"/kvarena/linux/kvarena.h; do
	sed -n -e 's/^\(struct\|enum\) \(kva_[a-z0-9_]*\) *{.*/\1 \2/p' -e 's/^struct \(kva_[a-z0-9_]*\);$/struct \1/p' "$h"
done | sort -u | while read -r kind tag; do
	if [ "$kind" = struct ]; then
		echo "	{ $tag *p = nullptr; (void)p; }"
	else
		echo "	{ $tag e = $tag(); (void)e; }"
	fi
done
echo '}'
