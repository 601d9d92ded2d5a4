#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Print the guest kernels the VM harness tests, one per line:
#   <series> <full version>        e.g. "61 6.1.0-57-amd64", "612 6.12.117+deb12-amd64"
# A kernel counts as installed when /boot/vmlinuz-<ver> and /lib/modules/<ver>/
# (with modules.dep) both exist. Exits 1 naming the missing series otherwise.
#
# Usage: tests/vm/kernels.sh [SERIES...]      default series: 61 612
#   SERIES is the major+minor without the dot (61 = 6.1.x, 612 = 6.12.x).
#   KVA_VM_KERNELS="6.1.0-57-amd64 ..." overrides discovery (versions must exist).
set -euo pipefail

series_list=("$@")
[ ${#series_list[@]} -gt 0 ] || series_list=(61 612)

installed() {
	local v=$1
	[ -f "/boot/vmlinuz-$v" ] && [ -f "/lib/modules/$v/modules.dep" ]
}

if [ -n "${KVA_VM_KERNELS:-}" ]; then
	rc=0
	for v in $KVA_VM_KERNELS; do
		if ! installed "$v"; then
			echo "kernels.sh: KVA_VM_KERNELS names $v, but /boot/vmlinuz-$v or /lib/modules/$v/modules.dep is missing" >&2
			rc=1
			continue
		fi
		IFS=. read -r maj min _ <<<"$v"
		echo "$maj${min%%[!0-9]*} $v"
	done
	exit "$rc"
fi

rc=0
for s in "${series_list[@]}"; do
	case $s in
	[0-9][0-9] | [0-9][0-9][0-9]) ;;
	*)
		echo "kernels.sh: bad series '$s' (want e.g. 61 or 612)" >&2
		exit 2
		;;
	esac
	maj=${s:0:1} min=${s:1}
	best=
	# Debian flavours: 6.1.0-57-amd64, 6.12.117+deb12-amd64. Pick the newest
	# installed one of the series (version sort), amd64 flavour only.
	for f in /boot/vmlinuz-"$maj.$min".*-amd64; do
		[ -e "$f" ] || continue
		v=${f#/boot/vmlinuz-}
		installed "$v" || continue
		if [ -z "$best" ] || [ "$(printf '%s\n%s\n' "$best" "$v" | sort -V | tail -n1)" = "$v" ]; then
			best=$v
		fi
	done
	if [ -z "$best" ]; then
		case $s in
		61) hint="apt-get install linux-image-amd64 linux-headers-amd64" ;;
		612) hint="apt-get install linux-image-6.12-amd64 linux-headers-6.12-amd64 (bookworm)" ;;
		*) hint="install a Debian linux-image-$maj.$min.*-amd64 kernel with its modules" ;;
		esac
		echo "kernels.sh: no guest kernel $maj.$min.*-amd64 installed (need /boot/vmlinuz-$maj.$min.*-amd64 and /lib/modules/<ver>/modules.dep); try: $hint" >&2
		rc=1
		continue
	fi
	if [ ! -e "/lib/modules/$best/build/Makefile" ]; then
		echo "kernels.sh: warning: headers for $best missing (/lib/modules/$best/build); modules cannot be built for it" >&2
	fi
	echo "$s $best"
done
exit "$rc"
