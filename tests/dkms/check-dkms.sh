#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Check that kvarena builds through DKMS against every installed guest
# kernel's headers (tests/vm/kernels.sh), then remove everything it added.
#
# Usage: tests/dkms/check-dkms.sh [--src DIR] [--kver VER|SERIES]... [--system] [--boot] [--keep]
#   --src DIR    tree holding dkms.conf, Kbuild, kmod/, include/ [, VERSION]
#                (default: this repository)
#   --kver V     only this kernel (full version, or series 61 / 612); repeatable
#   --system     register in the real /usr/src/kvarena-<ver> and /var/lib/dkms
#                (refused if kvarena <ver> is already there). Default: private
#                temporary --sourcetree/--dkmstree, so nothing on the system changes.
#   --boot       also load each built module in a guest (tests/vm/run-guest.sh):
#                modprobe kvarena, then modprobe -r kvarena
#   --keep       keep the temporary trees (printed) for inspection
#
# Module signing: dkms signs built modules and would create a MOK key pair in
# /var/lib/dkms; this script points mok_signing_key/mok_certificate at its
# temporary directory instead.
#
# Exit status: 0 all kernels built (and loaded, with --boot); 1 a build or
# check failed; 2 usage/setup error.
set -euo pipefail
umask 022

ME=check-dkms
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
say() { echo "$ME: $*" >&2; }
die() {
	echo "$ME: error: $*" >&2
	exit 2
}

SRC=$REPO SYSTEM=0 BOOT=0 KEEP=0
KVERS=()
while [ "$#" -gt 0 ]; do
	case $1 in
	--src) [ "$#" -ge 2 ] || die "--src needs a directory"; SRC=$(cd "$2" && pwd); shift 2 ;;
	--kver) [ "$#" -ge 2 ] || die "--kver needs a version"; KVERS+=("$2"); shift 2 ;;
	--system) SYSTEM=1; shift ;;
	--boot) BOOT=1; shift ;;
	--keep) KEEP=1; shift ;;
	-h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

command -v dkms >/dev/null || die "dkms not installed (apt-get install dkms)"
[ "$(id -u)" = 0 ] || die "dkms needs root"
[ -f "$SRC/dkms.conf" ] || die "no dkms.conf in $SRC"
[ -f "$SRC/Kbuild" ] || die "no Kbuild in $SRC (the module sources are not there yet?)"

if [ ${#KVERS[@]} -eq 0 ]; then
	list=$("$REPO/tests/vm/kernels.sh") || die "guest kernels missing (see above)"
	mapfile -t KVERS < <(awk '{print $2}' <<<"$list")
else
	for i in "${!KVERS[@]}"; do
		case ${KVERS[$i]} in
		[0-9][0-9] | [0-9][0-9][0-9]) KVERS[i]=$("$REPO/tests/vm/kernels.sh" "${KVERS[$i]}" | awk '{print $2}') ;;
		esac
	done
fi
for kv in "${KVERS[@]}"; do
	[ -e "/lib/modules/$kv/build/Makefile" ] || die "no headers for $kv at /lib/modules/$kv/build (apt-get install linux-headers-$kv)"
done

# Name and version exactly as dkms will read them.
# shellcheck disable=SC2016 # expanded by the inner bash
read -r NAME VER < <(bash -c '. "$1" >/dev/null; echo "$PACKAGE_NAME $PACKAGE_VERSION"' _ "$SRC/dkms.conf")
if [ -z "${NAME:-}" ] || [ -z "${VER:-}" ]; then die "$SRC/dkms.conf sets no PACKAGE_NAME/PACKAGE_VERSION"; fi
say "module $NAME version $VER from $SRC; kernels: ${KVERS[*]}"

TMP=$(mktemp -d /tmp/kva-dkms.XXXXXX)
export mok_signing_key=$TMP/mok.key mok_certificate=$TMP/mok.pub
if [ "$SYSTEM" = 1 ]; then
	STREE=/usr/src
	DTREE=/var/lib/dkms
	DKMS=(dkms)
	[ -e "$STREE/$NAME-$VER" ] && die "$STREE/$NAME-$VER already exists; not touching it"
	[ -e "$DTREE/$NAME/$VER" ] && die "$DTREE/$NAME/$VER already exists (dkms status: $(dkms status "$NAME" 2>/dev/null))"
else
	STREE=$TMP/src
	DTREE=$TMP/dkms
	mkdir -p "$STREE" "$DTREE" "$TMP/install"
	DKMS=(dkms --sourcetree "$STREE" --dkmstree "$DTREE" --installtree "$TMP/install")
fi
MODSRC=$STREE/$NAME-$VER
ADDED=0

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
	local rc=$?
	if [ "$ADDED" = 1 ]; then
		"${DKMS[@]}" remove -m "$NAME" -v "$VER" --all >"$TMP/remove.log" 2>&1 ||
			{ say "warning: dkms remove failed:"; cat "$TMP/remove.log" >&2; }
	fi
	if [ "$SYSTEM" = 1 ]; then
		rm -rf "$MODSRC" "${DTREE:?}/$NAME/$VER"
		rmdir "$DTREE/$NAME" 2>/dev/null || true
	fi
	if [ "$KEEP" = 1 ]; then
		say "kept $TMP"
	else
		rm -rf "$TMP"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Copy the module sources only (no objects from an in-tree build).
mkdir -p "$MODSRC"
cp "$SRC/dkms.conf" "$SRC/Kbuild" "$MODSRC/"
[ -f "$SRC/VERSION" ] && cp "$SRC/VERSION" "$MODSRC/"
for d in kmod include; do
	[ -d "$SRC/$d" ] || continue
	(cd "$SRC" && find "$d" -type f \( -name '*.c' -o -name '*.h' -o -name '*.S' -o -name Kbuild -o -name Makefile \) -print0 |
		cpio -0pdm --quiet "$MODSRC")
done
say "sources: $(cd "$MODSRC" && find . -type f | wc -l) files in $MODSRC"

ADDED=1
"${DKMS[@]}" add -m "$NAME" -v "$VER" >"$TMP/add.log" 2>&1 || { cat "$TMP/add.log" >&2; say "FAIL: dkms add"; exit 1; }

FAILED=0
declare -A BUILT=()
for kv in "${KVERS[@]}"; do
	t0=$(date +%s.%N)
	if ! "${DKMS[@]}" build -m "$NAME" -v "$VER" -k "$kv" >"$TMP/build-$kv.log" 2>&1; then
		cat "$TMP/build-$kv.log" >&2
		[ -f "$DTREE/$NAME/$VER/build/make.log" ] && tail -n 60 "$DTREE/$NAME/$VER/build/make.log" >&2
		say "FAIL: dkms build for $kv"
		FAILED=1
		continue
	fi
	secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	mdir=$DTREE/$NAME/$VER/$kv/$(uname -m)/module
	ko=$(find "$mdir" -maxdepth 1 -name "$NAME.ko*" -type f 2>/dev/null | head -n1)
	if [ -z "$ko" ]; then
		say "FAIL: dkms build for $kv produced no $NAME.ko* in $mdir"
		FAILED=1
		continue
	fi
	vm=$(modinfo -F vermagic "$ko" | awk '{print $1}')
	if [ "$vm" != "$kv" ]; then
		say "FAIL: $ko has vermagic '$vm', expected $kv"
		FAILED=1
		continue
	fi
	signed=$(modinfo -F signer "$ko" 2>/dev/null || true)
	say "ok: $kv: built $(basename "$ko") in ${secs}s ($(stat -c %s "$ko") bytes${signed:+, signed by \"$signed\"})"
	BUILT[$kv]=$ko
done
"${DKMS[@]}" status -m "$NAME" -v "$VER" >&2 || true

if [ "$BOOT" = 1 ]; then
	for kv in "${!BUILT[@]}"; do
		ko=${BUILT[$kv]}
		mkdir -p "$TMP/boot-$kv"
		case $ko in
		*.ko.xz) xz -dc "$ko" >"$TMP/boot-$kv/$NAME.ko" ;;
		*.ko.zst) zstd -qdc "$ko" >"$TMP/boot-$kv/$NAME.ko" ;;
		*.ko.gz) gzip -dc "$ko" >"$TMP/boot-$kv/$NAME.ko" ;;
		*) cp "$ko" "$TMP/boot-$kv/$NAME.ko" ;;
		esac
		if "$REPO/tests/vm/run-guest.sh" --kver "$kv" --ko "$TMP/boot-$kv/$NAME.ko" --timeout 120 \
			--cmd "modprobe $NAME && grep '^$NAME ' /proc/modules && modprobe -r $NAME"; then
			say "ok: $kv: dkms-built $NAME loads and unloads in the guest"
		else
			say "FAIL: $kv: dkms-built $NAME did not load/unload cleanly in the guest"
			FAILED=1
		fi
	done
fi

if [ "$FAILED" != 0 ]; then
	say "FAIL"
	exit 1
fi
say "PASS: $NAME $VER built with dkms for: ${KVERS[*]}"
