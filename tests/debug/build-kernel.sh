#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Build the kvarena debug kernel (KASAN, lockdep, kmemleak, DEBUG_OBJECTS,
# fault injection) from Debian's linux-source-SERIES (6.1, the default, or
# 6.12: KVA_DEBUG_SERIES) into a cache directory outside the repository:
#
#   [KVA_DEBUG_SERIES=6.12] tests/debug/build-kernel.sh CACHE_DIR [JOBS]
#
# CACHE_DIR/linux-source-SERIES/  the extracted, configured, built tree (the KDIR
#                               for out-of-tree modules: make -C ... M=...)
# CACHE_DIR/root/lib/modules/VER/  modules_install output (drm, vgem, ...)
# CACHE_DIR/bzImage            the image QEMU boots (with KVA_VM_PVH=0: this
#                              config's ELF vmlinux does not come up through
#                              QEMU's PVH entry, so it is not used)
# CACHE_DIR/release            the kernel release string (6.1.NNN-kvadebug)
# CACHE_DIR/series             the series it was built from (6.1, 6.12)
# CACHE_DIR/stamp              hash of the config fragment + tarball + this script
#
# Nothing is done when the stamp matches. The config is `make tinyconfig`
# plus tests/debug/kernel.config; every =y/=m line of the fragment must
# survive olddefconfig, or the build stops (a dependency is missing).
# Builds run under `nice -n 19` with JOBS (default 2) jobs.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${1:?usage: build-kernel.sh CACHE_DIR [JOBS]}
JOBS=${2:-2}
FRAG=$HERE/kernel.config
SERIES=${KVA_DEBUG_SERIES:-6.1}
TARBALL=${KVA_LINUX_SOURCE:-$(ls /usr/src/linux-source-"$SERIES".tar.xz 2>/dev/null | tail -n1)}
say() { echo "debug-kernel: $*" >&2; }
[ -f "$TARBALL" ] || { say "no /usr/src/linux-source-$SERIES.tar.xz (apt-get install linux-source-$SERIES)"; exit 2; }
for t in gcc make flex bison bc perl; do
	command -v $t >/dev/null || { say "'$t' missing (apt-get install build-essential flex bison bc libelf-dev libssl-dev)"; exit 2; }
done

STAMP=$( { sha256sum <"$FRAG"; sha256sum <"${BASH_SOURCE[0]}"; stat -c '%n %s %Y' "$TARBALL"; } | sha256sum | cut -c1-16)
if [ -f "$CACHE/stamp" ] && [ "$(cat "$CACHE/stamp")" = "$STAMP" ] && [ -f "$CACHE/bzImage" ]; then
	say "up to date ($CACHE, $(cat "$CACHE/release"), stamp $STAMP)"
	exit 0
fi

T0=$(date +%s)
mkdir -p "$CACHE"
rm -f "$CACHE/stamp"
SRC=$CACHE/linux-source-$SERIES
if [ ! -f "$SRC/Makefile" ] || [ "$(cat "$CACHE/tarball" 2>/dev/null)" != "$(stat -c '%s %Y' "$TARBALL")" ]; then
	say "extracting $TARBALL"
	rm -rf "$SRC"
	nice -n 19 tar -C "$CACHE" -xf "$TARBALL"
	stat -c '%s %Y' "$TARBALL" >"$CACHE/tarball"
fi
cd "$SRC"
say "configuring: tinyconfig + $FRAG"
nice -n 19 make -s ARCH=x86_64 tinyconfig >/dev/null
KCONFIG_CONFIG=.config nice -n 19 scripts/kconfig/merge_config.sh -m .config "$FRAG" >/dev/null
nice -n 19 make -s ARCH=x86_64 olddefconfig >/dev/null
missing=0
while IFS= read -r line; do
	case $line in
	CONFIG_*=y | CONFIG_*=m)
		grep -qx "$line" .config || { say "config: '$line' did not survive olddefconfig (got: $(grep "^${line%%=*}=\|^# ${line%%=*} " .config || echo unset))"; missing=1; }
		;;
	esac
done <"$FRAG"
[ "$missing" = 0 ] || exit 1

say "building with -j$JOBS (nice 19)"
T1=$(date +%s)
nice -n 19 make -s ARCH=x86_64 -j"$JOBS" vmlinux modules
nice -n 19 make -s ARCH=x86_64 -j"$JOBS" bzImage
rm -rf "$CACHE/root"
nice -n 19 make -s ARCH=x86_64 INSTALL_MOD_PATH="$CACHE/root" modules_install >/dev/null
REL=$(make -s kernelrelease)
cp arch/x86/boot/bzImage "$CACHE/bzImage"
echo "$REL" >"$CACHE/release"
echo "$SERIES" >"$CACHE/series"
T2=$(date +%s)
echo "$STAMP" >"$CACHE/stamp"
printf 'configure %ss, build %ss, total %ss (jobs %s, %s)\n' $((T1 - T0)) $((T2 - T1)) $((T2 - T0)) "$JOBS" "$(date -u +%FT%TZ)" >>"$CACHE/build-times"
say "built $REL in $((T2 - T0))s (configure $((T1 - T0))s, compile $((T2 - T1))s): $CACHE"
