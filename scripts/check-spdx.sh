#!/bin/sh
# SPDX-License-Identifier: MIT
# Every source file carries an SPDX-License-Identifier in its first three
# lines, from the set allowed where it lives (the longest matching prefix
# below).  The module is GPL-2.0; its shared core, which libkvarena links,
# is GPL-2.0 OR MIT; the library LGPL-2.1-or-later; daemon and tools MIT.
# Usage: scripts/check-spdx.sh   (from the repository root; exit 1 on a miss)
set -eu

# prefix|allowed;allowed;...
RULES='
kmod/core/|GPL-2.0 OR MIT
kmod/|GPL-2.0
Kbuild|GPL-2.0
dkms.conf|GPL-2.0
include/uapi/|GPL-2.0 WITH Linux-syscall-note;(GPL-2.0 WITH Linux-syscall-note) OR MIT
lib/|LGPL-2.1-or-later
bpf/|(LGPL-2.1-or-later OR BSD-2-Clause)
daemon/|MIT
tools/|MIT
scripts/|MIT
tests/abi/old/kvarena/linux/|GPL-2.0 WITH Linux-syscall-note
tests/abi/|LGPL-2.1-or-later
tests/engine/|MIT
tests/install/|MIT
tests/|GPL-2.0;MIT
Makefile|GPL-2.0
Documentation/man/libkvarena|LGPL-2.1-or-later
Documentation/man/kva_|LGPL-2.1-or-later
Documentation/man/kvarena.4|GPL-2.0
Documentation/man/|MIT
'

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	files=$(git ls-files --cached --others --exclude-standard)
else
	files=$(find . -type f ! -path './build/*' ! -path './.git/*' | sed 's|^\./||')
fi

bad=0
n=0
for f in $files; do
	case $f in
	*.c | *.h | *.cpp | *.py | *.sh | *.mk | Makefile | Kbuild | dkms.conf | \
	Documentation/man/*.[1-8]) ;;
	*) continue ;;
	esac
	[ -f "$f" ] || continue
	# A man page that is only a .so link to another has no text of its own.
	case $f in Documentation/man/*) head -1 "$f" | grep -q '^\.so ' && continue ;; esac
	best=''
	allowed=''
	while IFS='|' read -r prefix set; do
		[ -n "$prefix" ] || continue
		case $f in
		"$prefix"*)
			if [ ${#prefix} -gt ${#best} ]; then
				best=$prefix
				allowed=$set
			fi ;;
		esac
	done <<EOR
$RULES
EOR
	n=$((n + 1))
	tag=$(head -3 "$f" | sed -n 's/.*SPDX-License-Identifier: *//p' |
	      sed 's| *\*/ *$||; s/ *$//' | head -1)
	if [ -z "$tag" ]; then
		echo "check-spdx: $f: no SPDX-License-Identifier" >&2
		bad=1
		continue
	fi
	if [ -z "$best" ]; then
		echo "check-spdx: $f: no rule for this path (add one)" >&2
		bad=1
		continue
	fi
	ok=0
	old_ifs=$IFS
	IFS=';'
	for a in $allowed; do
		[ "$tag" = "$a" ] && ok=1
	done
	IFS=$old_ifs
	if [ $ok = 0 ]; then
		echo "check-spdx: $f: '$tag' is not allowed under $best ($allowed)" >&2
		bad=1
	fi
done
[ $bad = 0 ] && echo "check-spdx: $n files, every tag allowed"
exit $bad
