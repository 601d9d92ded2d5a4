#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Boot a Debian guest kernel under QEMU (TCG) with a busybox initramfs, load
# nothing automatically, run one shell command, and report its exit status.
#
#   tests/vm/run-guest.sh --kver 6.1.0-57-amd64 --ko build/kmod-6.1/kvarena.ko \
#       --bin build/tests/test_arena --cmd 'modprobe kvarena && test_arena'
#
# Exit status: the guest command's status; 124 if the guest hung past
# --timeout; 1 if the guest never printed its result marker (panic, init
# crash), or if the kernel log shows an oops/BUG/WARNING/... (unless
# --allow-warnings); 2 for a usage or host-side setup error (before boot).
# See Documentation/testing.md and `run-guest.sh --help`.
set -euo pipefail
umask 022

ME=run-guest
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=${KVA_BUILD_DIR:-$REPO/build}/vm

# Kernel-log patterns that fail a run (grep -E, matched against dmesg).
BAD_KLOG='Oops|BUG:|WARNING:|general protection|KASAN|kernel BUG|Call Trace'

usage() {
	cat <<'EOF'
Usage: tests/vm/run-guest.sh --kver VER [options]

  --kver VER        guest kernel: full version (6.1.0-57-amd64) or series (61, 612)
  --ko FILE         our module, installed as /lib/modules/VER/extra/NAME.ko
                    (depmod'ed, not loaded: `modprobe NAME` in --cmd); repeatable
  --bin FILE        executable or script copied to /opt/kva/bin/ with the shared
                    libraries `ldd` lists (same paths as on the host); repeatable
  --file SRC:DST    extra file or directory; DST absolute, or relative to
                    /opt/kva; repeatable
  --kimage FILE     boot this kernel image (ELF vmlinux or bzImage) instead of
                    /boot/vmlinuz-VER (a self-built kernel; VER is its release)
  --modroot DIR     the guest kernel's modules are in DIR/lib/modules/VER
                    (modules_install INSTALL_MOD_PATH=DIR) instead of /lib/modules/VER
  --kmod NAME       also pack this guest-kernel module and its dependencies
                    (vgem is always packed); repeatable
  --cmd 'CMD'       shell command run in the guest (busybox sh, cwd /opt/kva,
                    PATH starts with /opt/kva/bin, stdin /dev/null); repeated
                    --cmd become successive lines of one script.
                    Default: uname -a
  --timeout SEC     kill a guest still running after SEC seconds, exit 124 (300)
  --mem MIB         guest memory (1024)
  --smp N           guest CPUs (2)
  --append 'ARGS'   extra kernel command-line arguments
  --log FILE        write a copy of the full serial log to FILE
  --allow-warnings  report, but do not fail on, Oops/BUG/WARNING in dmesg
  --shell           after CMD, open an interactive shell on the console
                    (exit it to power off); use with a larger --timeout
  --keep            keep the per-run work directory (initrd, staging tree)
  -h, --help        this text

Environment: KVA_BUILD_DIR (default REPO/build; cache in $KVA_BUILD_DIR/vm),
KVA_BUSYBOX (a static busybox, default /bin/busybox), KVA_VM_NOLOCK=1 (do not
serialise guests through build/vm/.guest.lock), KVA_VM_COMPRESS=none|gzip
(base initramfs compression, default gzip).
EOF
}

say() { echo "$ME: $*" >&2; }
die() {
	echo "$ME: error: $*" >&2
	exit 2
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------- options
KVER='' TIMEOUT=300 MEM=1024 SMP=2 APPEND='' LOG='' ALLOW_WARN=0 SHELL_AFTER=0 KEEP=0
KOS=() BINS=() FILES=() KMODS=() CMDS=() KIMAGE_OPT='' MODROOT=''

need_arg() { [ "$#" -ge 2 ] || die "option $1 needs an argument (see --help)"; }
while [ "$#" -gt 0 ]; do
	opt=$1
	case $opt in
	--*=*)
		set -- "${opt%%=*}" "${opt#*=}" "${@:2}"
		continue
		;;
	esac
	case $opt in
	--kver) need_arg "$@"; KVER=$2; shift 2 ;;
	--ko) need_arg "$@"; KOS+=("$2"); shift 2 ;;
	--bin) need_arg "$@"; BINS+=("$2"); shift 2 ;;
	--file) need_arg "$@"; FILES+=("$2"); shift 2 ;;
	--kmod) need_arg "$@"; KMODS+=("$2"); shift 2 ;;
	--kimage) need_arg "$@"; KIMAGE_OPT=$2; shift 2 ;;
	--modroot) need_arg "$@"; MODROOT=$(cd "$2" && pwd) || die "--modroot $2: no such directory"; shift 2 ;;
	--cmd) need_arg "$@"; CMDS+=("$2"); shift 2 ;;
	--timeout) need_arg "$@"; TIMEOUT=$2; shift 2 ;;
	--mem) need_arg "$@"; MEM=$2; shift 2 ;;
	--smp) need_arg "$@"; SMP=$2; shift 2 ;;
	--append) need_arg "$@"; APPEND="$APPEND $2"; shift 2 ;;
	--log) need_arg "$@"; LOG=$2; shift 2 ;;
	--allow-warnings) ALLOW_WARN=1; shift ;;
	--shell) SHELL_AFTER=1; shift ;;
	--keep) KEEP=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) die "unknown argument '$opt' (see --help)" ;;
	esac
done

[ -n "$KVER" ] || die "--kver is required (e.g. --kver 61, or a full version from tests/vm/kernels.sh)"
case $KVER in
[0-9][0-9] | [0-9][0-9][0-9])
	line=$("$HERE/kernels.sh" "$KVER") || die "no installed guest kernel for series $KVER"
	KVER=${line#* }
	;;
esac
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout wants a positive number of seconds, got '$TIMEOUT'"
if ! [[ $MEM =~ ^[1-9][0-9]*$ ]] || [ "$MEM" -lt 256 ]; then
	die "--mem wants MiB >= 256, got '$MEM'"
fi
[[ $SMP =~ ^[1-9][0-9]*$ ]] || die "--smp wants a positive number, got '$SMP'"
[ ${#CMDS[@]} -gt 0 ] || CMDS=("uname -a")

VMLINUZ=${KIMAGE_OPT:-/boot/vmlinuz-$KVER}
MODDIR=$MODROOT/lib/modules/$KVER
MODINFO_B=()
[ -n "$MODROOT" ] && MODINFO_B=(-b "$MODROOT")
[ -r "$VMLINUZ" ] || die "no kernel image $VMLINUZ (installed guest kernels: $("$HERE/kernels.sh" 2>/dev/null | awk '{print $2}' | tr '\n' ' '))"
[ -r "$MODDIR/modules.dep" ] || die "no module tree $MODDIR (modules.dep missing)"

for t in qemu-system-x86_64 cpio depmod modinfo xz gzip timeout flock sha256sum ldd; do
	command -v "$t" >/dev/null || die "'$t' not found (apt-get install qemu-system-x86 cpio kmod xz-utils gzip coreutils util-linux libc-bin)"
done
BUSYBOX=${KVA_BUSYBOX:-/bin/busybox}
[ -x "$BUSYBOX" ] || die "no busybox at $BUSYBOX (apt-get install busybox-static)"
if ldd "$BUSYBOX" >/dev/null 2>&1; then
	die "$BUSYBOX is dynamically linked; the guest needs a static one (apt-get install busybox-static)"
fi
COMPRESS=${KVA_VM_COMPRESS:-gzip}
case $COMPRESS in gzip | none) ;; *) die "KVA_VM_COMPRESS must be gzip or none" ;; esac

# ---------------------------------------------------------------- base initramfs
# The base archive holds busybox, the guest kernel modules (vgem + --kmod and
# their dependencies, decompressed, depmod'ed) and /init. It is cached under
# build/vm/<kver>/base-<hash>/ keyed on everything that goes into it.

# Resolve module names to files, dependencies first-class (modinfo -F depends,
# recursively). Prints "relative-path" lines (relative to $MODDIR).
resolve_kmods() {
	local -a queue=("$@")
	local -A seen=()
	local name file deps d
	while [ ${#queue[@]} -gt 0 ]; do
		name=${queue[0]}
		queue=("${queue[@]:1}")
		name=${name//-/_}
		[ -n "${seen[$name]:-}" ] && continue
		seen[$name]=1
		file=$(modinfo "${MODINFO_B[@]}" -k "$KVER" -F filename "$name" 2>/dev/null | head -n1) ||
			die "guest kernel $KVER has no module '$name'"
		[ -n "$file" ] || die "guest kernel $KVER has no module '$name'"
		case $file in
		"(builtin)" | "") continue ;;
		esac
		[ -f "$file" ] || die "module file $file (for '$name') is missing"
		echo "${file#"$MODDIR"/}"
		deps=$(modinfo -F depends "$file")
		IFS=, read -r -a d <<<"$deps"
		[ ${#d[@]} -gt 0 ] && queue+=("${d[@]}")
	done
}

write_init() {
	cat <<'INIT'
#!/bin/sh
# kvarena VM harness: PID 1 of the guest. Generated by tests/vm/run-guest.sh.
export PATH=/opt/kva/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=vt100
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
warn() { echo "KVA-INIT: warning: $*"; }
mkdir -p /dev/pts /dev/shm
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts || warn "devpts"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm || warn "/dev/shm"
mount -t tmpfs -o mode=1777 tmpfs /tmp || warn "/tmp"
mount -t tmpfs -o mode=755 tmpfs /run || warn "/run"
mount -t debugfs debugfs /sys/kernel/debug || warn "debugfs not mounted"
mount -t tracefs tracefs /sys/kernel/tracing || warn "tracefs not mounted"
mount -t bpf bpf /sys/fs/bpf || warn "bpffs not mounted"
if mount -t cgroup2 cgroup2 /sys/fs/cgroup; then
	for c in cpu memory pids; do
		if grep -qw "$c" /sys/fs/cgroup/cgroup.controllers; then
			echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control || warn "cannot enable cgroup controller $c"
		else
			warn "cgroup controller $c not available"
		fi
	done
else
	warn "cgroup2 not mounted"
fi
ln -sf /proc/mounts /etc/mtab
hostname kva-guest
ip link set lo up 2>/dev/null || warn "cannot bring up lo"

read -r up0 _ </proc/uptime
echo
echo "KVA-GUEST-START kernel=$(uname -r) uptime=$up0"
cd /opt/kva || exit 1
if [ -e /opt/kva/.shell ]; then
	sh /opt/kva/run.sh
else
	sh /opt/kva/run.sh </dev/null
fi
rc=$?
cd /
read -r up1 _ </proc/uptime
echo "KVA-GUEST-END rc=$rc uptime=$up1"
if [ -e /opt/kva/.shell ]; then
	echo "KVA: interactive shell (rc of the command: $rc); exit it to power off"
	setsid cttyhack sh -l
fi
bad=$(dmesg | grep -E 'Oops|BUG:|WARNING:|general protection|KASAN|kernel BUG|Call Trace' | head -n 200)
n=0
[ -n "$bad" ] && n=$(printf '%s\n' "$bad" | wc -l)
echo "KVA-DMESG-BEGIN"
[ -n "$bad" ] && printf '%s\n' "$bad" | sed 's/^/KVA-DMESG| /'
echo "KVA-DMESG-END count=$n"
if [ "$n" -gt 0 ]; then
	# quiet keeps warning-level lines (backtraces) off the console: dump it all.
	echo "KVA-KLOG-BEGIN (full dmesg, last 400 lines)"
	dmesg | tail -n 400 | sed 's/^/KVA-KLOG| /'
	echo "KVA-KLOG-END"
fi
echo "KVA-GUEST-RC=$rc"
sync
poweroff -f
INIT
}

INIT_TEXT=$(write_init)
# Guest-kernel modules our --ko modules depend on are packed too.
for ko in "${KOS[@]}"; do
	[ -f "$ko" ] || die "--ko $ko: no such file"
	deps=$(modinfo -F depends "$ko" 2>/dev/null) || die "--ko $ko: not a kernel module (modinfo failed)"
	IFS=, read -r -a d <<<"$deps"
	for m in "${d[@]}"; do
		own=0
		for k in "${KOS[@]}"; do [ "$(basename "$k" .ko)" = "$m" ] && own=1; done
		[ "$own" = 1 ] || KMODS+=("$m")
	done
done
MODLIST=$(resolve_kmods vgem "${KMODS[@]}") || exit 2
mapfile -t MOD_RELS <<<"$MODLIST"
[ -n "$MODLIST" ] || die "module resolution for $KVER produced nothing"

manifest() {
	echo "kver $KVER"
	echo "compress $COMPRESS"
	echo "busybox $(sha256sum <"$BUSYBOX" | cut -d' ' -f1)"
	echo "script $(sha256sum <"${BASH_SOURCE[0]}" | cut -d' ' -f1)"
	echo "init $(printf '%s' "$INIT_TEXT" | sha256sum | cut -d' ' -f1)"
	local r
	for r in $(printf '%s\n' "${MOD_RELS[@]}" | LC_ALL=C sort); do
		echo "mod $r $(stat -c '%s %Y' "$MODDIR/$r")"
	done
	for r in modules.builtin modules.builtin.modinfo modules.order; do
		[ -f "$MODDIR/$r" ] && echo "meta $r $(stat -c '%s %Y' "$MODDIR/$r")"
	done
	return 0
}

MANIFEST=$(manifest)
HASH=$(printf '%s\n' "$MANIFEST" | sha256sum | cut -c1-16)
KDIR=$BUILD/$KVER
BASE=$KDIR/base-$HASH
mkdir -p "$KDIR"

build_base() {
	local tmp=$KDIR/.base-$HASH.tmp.$$ r src dst p
	rm -rf "$tmp"
	mkdir -p "$tmp/root"
	local root=$tmp/root
	mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,root,etc,mnt,var/log,opt/kva/bin,lib/modules/"$KVER"/extra}
	chmod 1777 "$root/tmp"
	cp "$BUSYBOX" "$root/bin/busybox"
	# Applet links, never busybox -> itself (that loops: ELOOP, init panic).
	while read -r p; do
		case $p in bin/busybox | linuxrc | "") continue ;; esac
		[ -e "$root/$p" ] || [ -L "$root/$p" ] || ln -s /bin/busybox "$root/$p"
	done < <("$BUSYBOX" --list-full)
	if [ "$(id -u)" = 0 ]; then
		mknod -m 600 "$root/dev/console" c 5 1
		mknod -m 666 "$root/dev/null" c 1 3
	fi
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
	printf 'root:x:0:\ntty:x:5:\nnogroup:x:65534:\n' >"$root/etc/group"
	echo kva-guest >"$root/etc/hostname"
	printf '%s\n' "$INIT_TEXT" >"$root/init"
	chmod 755 "$root/init"
	for r in "${MOD_RELS[@]}"; do
		src=$MODDIR/$r
		dst=$root/lib/modules/$KVER/${r%.xz}
		dst=${dst%.zst}
		dst=${dst%.gz}
		mkdir -p "$(dirname "$dst")"
		case $r in
		*.ko.xz) xz -dc "$src" >"$dst" ;;
		*.ko.zst) zstd -qdc "$src" >"$dst" ;;
		*.ko.gz) gzip -dc "$src" >"$dst" ;;
		*.ko) cp "$src" "$dst" ;;
		*) die "unexpected module file name $r" ;;
		esac
	done
	for r in modules.builtin modules.builtin.modinfo modules.order; do
		[ -f "$MODDIR/$r" ] && cp "$MODDIR/$r" "$root/lib/modules/$KVER/"
	done
	depmod -b "$root" "$KVER" || die "depmod -b $root $KVER failed"
	(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$tmp/base.cpio"
	if [ "$COMPRESS" = gzip ]; then
		gzip -6 -n "$tmp/base.cpio"
		mv "$tmp/base.cpio.gz" "$tmp/base.img"
	else
		mv "$tmp/base.cpio" "$tmp/base.img"
	fi
	# Pad to 512 bytes so an appended uncompressed cpio starts 4-aligned.
	local size
	size=$(stat -c %s "$tmp/base.img")
	truncate -s $(((size + 511) / 512 * 512)) "$tmp/base.img"
	printf '%s\n' "$MANIFEST" >"$tmp/manifest"
	mv "$tmp" "$BASE"
}

T0=$(now)
exec 8>"$KDIR/.lock"
flock 8
if [ -f "$BASE/base.img" ] && [ -f "$BASE/manifest" ] && [ -d "$BASE/root/lib/modules/$KVER" ]; then
	touch "$BASE"
	BASE_NOTE="cached"
else
	say "building base initramfs for $KVER ($BASE)"
	build_base
	BASE_NOTE="built"
	# Keep the four most recently used bases of this kernel.
	find "$KDIR" -maxdepth 1 -name 'base-*' -type d -printf '%T@ %p\n' | sort -rn | tail -n +5 |
		cut -d' ' -f2- | while read -r old; do rm -rf "$old"; done
fi

# ---------------------------------------------------------------- kernel image
# Debian's bzImage decompresses itself inside the guest, which under TCG costs
# seconds (6.1 is xz: ~5 s of a ~10 s boot). QEMU boots the uncompressed ELF
# vmlinux directly through its PVH entry point, so extract it once per kernel.
# KVA_VM_PVH=0 boots /boot/vmlinuz-VER as is.
extract_vmlinux() {
	local out=$1 tmp=$1.tmp.$$ magic tool off
	for magic in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08' 'lz4:\x02\x21\x4c\x18'; do
		tool=${magic%%:*}
		command -v "$tool" >/dev/null || continue
		for off in $(LC_ALL=C grep -aboP "${magic#*:}" "$VMLINUZ" 2>/dev/null | head -n 4 | cut -d: -f1); do
			case $tool in
			xz) tail -c +$((off + 1)) "$VMLINUZ" | xz -dcq >"$tmp" 2>/dev/null || true ;;
			zstd) tail -c +$((off + 1)) "$VMLINUZ" | zstd -dcq >"$tmp" 2>/dev/null || true ;;
			gzip) tail -c +$((off + 1)) "$VMLINUZ" | gzip -dcq >"$tmp" 2>/dev/null || true ;;
			lz4) tail -c +$((off + 1)) "$VMLINUZ" | lz4 -dcq >"$tmp" 2>/dev/null || true ;;
			esac
			if [ "$(head -c 4 "$tmp" | od -An -c | tr -d ' ')" = '177ELF' ]; then
				# QEMU needs the PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY, 0x12).
				if command -v readelf >/dev/null && ! readelf -n "$tmp" 2>/dev/null | grep -q '(0x00000012)'; then
					rm -f "$tmp"
					return 1
				fi
				mv "$tmp" "$out"
				return 0
			fi
		done
	done
	rm -f "$tmp"
	return 1
}

KIMAGE=$VMLINUZ
if [ "$(head -c 4 "$VMLINUZ" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
	: # already an ELF vmlinux (--kimage): QEMU boots it through its PVH note
elif [ "${KVA_VM_PVH:-1}" != 0 ]; then
	vstamp="$(stat -c '%s %Y' "$VMLINUZ")"
	if [ -f "$KDIR/vmlinux" ] && [ "$(cat "$KDIR/vmlinux.stamp" 2>/dev/null)" = "$vstamp" ]; then
		KIMAGE=$KDIR/vmlinux
	elif extract_vmlinux "$KDIR/vmlinux"; then
		echo "$vstamp" >"$KDIR/vmlinux.stamp"
		KIMAGE=$KDIR/vmlinux
	else
		say "note: cannot extract a PVH-bootable vmlinux from $VMLINUZ; booting it compressed (slower)"
		rm -f "$KDIR/vmlinux" "$KDIR/vmlinux.stamp"
	fi
fi

# ---------------------------------------------------------------- per-run archive
RUN=$(mktemp -d "$KDIR/run.XXXXXX")
chmod 755 "$RUN"
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
	if [ "$KEEP" = 1 ]; then
		say "kept work directory $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
STAGE=$RUN/stage
mkdir -p "$STAGE/opt/kva/bin"
declare -A LIBDIRS=()

# Copy FILE's shared-library closure (as ldd resolves it on the host) to the
# same paths in the guest.
add_closure() {
	local f=$1 out line p
	out=$(ldd "$f" 2>&1) || return 0 # static binary or script: nothing to add
	while IFS= read -r line; do
		case $line in
		*"=> not found"*) die "$f needs ${line%% =>*}, which ldd cannot find on the host" ;;
		*"=> /"*) p=${line#*=> } ;;
		[[:space:]]/*) p=${line#"${line%%[![:space:]]*}"} ;;
		*) continue ;;
		esac
		p=${p%% (0x*}
		[ -f "$p" ] || continue
		[ -e "$STAGE$p" ] && continue
		mkdir -p "$STAGE$(dirname "$p")"
		cp -L "$p" "$STAGE$p"
		LIBDIRS[$(dirname "$p")]=1
	done <<<"$out"
}

# A script's interpreter must exist in the guest: /bin/sh and busybox applets
# do; other ELF interpreters (bash, ...) are copied with their libraries.
add_interpreter() {
	local f=$1 first interp arg
	[ "$(head -c 2 "$f")" = "#!" ] || return 0
	first=$(head -n1 "$f" | head -c 256)
	read -r interp arg _ <<<"${first:2}"
	if [ "$interp" = /usr/bin/env ] && [ -n "$arg" ]; then
		"$BUSYBOX" --list | grep -qx "$arg" && return 0
		interp=$(command -v "$arg") || die "$f runs '$arg' through env, which is not on this host"
		[ -e "$STAGE/opt/kva/bin/$arg" ] && return 0
		cp -L "$interp" "$STAGE/opt/kva/bin/$arg"
		add_closure "$interp"
		say "note: copied interpreter $interp for $f to /opt/kva/bin/$arg (its data files are not copied)"
		return 0
	fi
	case $interp in
	/bin/sh | /bin/ash) return 0 ;;
	esac
	"$BUSYBOX" --list-full | grep -qx "${interp#/}" && return 0
	[ -e "$STAGE$interp" ] && return 0
	[ -f "$interp" ] || die "$f wants interpreter $interp, which is not on this host"
	mkdir -p "$STAGE$(dirname "$interp")"
	cp -L "$interp" "$STAGE$interp"
	add_closure "$interp"
	say "note: copied interpreter $interp for $f (its data files are not copied)"
}

KONAMES=()
if [ ${#KOS[@]} -gt 0 ]; then
	MODROOT=$RUN/modroot
	mkdir -p "$MODROOT/lib/modules"
	# Rebuild the module index with our modules in extra/, starting from the
	# base's module tree (kept unpacked in $BASE/root).
	cp -a "$BASE/root/lib/modules/$KVER" "$MODROOT/lib/modules/"
	[ -f "$MODROOT/lib/modules/$KVER/modules.dep" ] || die "base module tree $BASE/root/lib/modules/$KVER is incomplete; delete $BASE"
	mkdir -p "$MODROOT/lib/modules/$KVER/extra" "$STAGE/lib/modules/$KVER/extra"
	for ko in "${KOS[@]}"; do
		[ -f "$ko" ] || die "--ko $ko: no such file"
		case $ko in *.ko) ;; *) die "--ko $ko: want an uncompressed .ko file" ;; esac
		vm=$(modinfo -F vermagic "$ko" 2>/dev/null) || die "--ko $ko: not a kernel module (modinfo failed)"
		vm=${vm%% *}
		[ "$vm" = "$KVER" ] || die "--ko $ko was built for kernel '$vm', but the guest runs $KVER (rebuild with make -C /lib/modules/$KVER/build M=...)"
		n=$(basename "$ko")
		[ -e "$MODROOT/lib/modules/$KVER/extra/$n" ] && die "--ko: two modules named $n"
		cp "$ko" "$MODROOT/lib/modules/$KVER/extra/$n"
		cp "$ko" "$STAGE/lib/modules/$KVER/extra/$n"
		KONAMES+=("${n%.ko}")
	done
	depmod -b "$MODROOT" "$KVER" || die "depmod with the --ko modules failed"
	for f in "$MODROOT/lib/modules/$KVER"/modules.*; do
		cp "$f" "$STAGE/lib/modules/$KVER/"
	done
fi

for b in "${BINS[@]}"; do
	[ -f "$b" ] || die "--bin $b: no such file"
	[ -x "$b" ] || die "--bin $b: not executable"
	n=$(basename "$b")
	[ -e "$STAGE/opt/kva/bin/$n" ] && die "--bin: two files named $n"
	cp -L "$b" "$STAGE/opt/kva/bin/$n"
	add_closure "$b"
	add_interpreter "$b"
done

for spec in "${FILES[@]}"; do
	case $spec in *:*) ;; *) die "--file wants SRC:DST, got '$spec'" ;; esac
	src=${spec%:*}
	dst=${spec##*:}
	if [ -z "$src" ] || [ -z "$dst" ]; then die "--file wants SRC:DST, got '$spec'"; fi
	[ -e "$src" ] || die "--file $spec: no such file or directory $src"
	case $dst in /*) ;; *) dst=/opt/kva/$dst ;; esac
	case $dst in */) dst=$dst$(basename "$src") ;; esac
	mkdir -p "$STAGE$(dirname "$dst")"
	cp -RL "$src" "$STAGE$dst"
done

if [ ${#LIBDIRS[@]} -gt 0 ]; then
	mkdir -p "$STAGE/etc"
	printf '%s\n' "${!LIBDIRS[@]}" | LC_ALL=C sort >"$STAGE/etc/ld.so.conf"
	ldconfig -r "$STAGE" 2>/dev/null || say "warning: ldconfig -r failed; relying on the loader's default paths"
fi

{
	echo "#!/bin/sh"
	echo "# generated by run-guest.sh"
	echo "cd /opt/kva || exit 1"
	printf '%s\n' "${CMDS[@]}"
} >"$STAGE/opt/kva/run.sh"
chmod 755 "$STAGE/opt/kva/run.sh"
[ "$SHELL_AFTER" = 1 ] && touch "$STAGE/opt/kva/.shell"

(cd "$STAGE" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$RUN/run.cpio"
cat "$BASE/base.img" "$RUN/run.cpio" >"$RUN/initrd.img"
exec 8>&- # done with the base: let other runs of this kernel prune or build
T1=$(now)
say "$KVER: initramfs ready in $(elapsed "$T0" "$T1")s (base $BASE_NOTE, $(($(stat -c %s "$RUN/initrd.img") / 1024)) KiB)${KONAMES[0]:+; modules in extra/: ${KONAMES[*]}}"

# ---------------------------------------------------------------- boot
QEMU=(qemu-system-x86_64 -m "$MEM" -smp "$SMP" -cpu max -nographic -no-reboot -net none
	-kernel "$KIMAGE" -initrd "$RUN/initrd.img"
	-append "console=ttyS0 quiet panic=-1${APPEND}")
SERIAL=$RUN/serial.log

if [ "${KVA_VM_NOLOCK:-0}" != 1 ]; then
	exec 9>"$BUILD/.guest.lock"
	if ! flock -n 9; then
		say "another guest is running; waiting for $BUILD/.guest.lock"
		flock 9
	fi
fi
say "booting: $(printf '%q ' "${QEMU[@]}")"
T2=$(now)
# A guest that dies before its init runs (no KVA-GUEST-START marker) died
# in the kernel's own boot, before anything of ours was loaded (modules
# are loaded by --cmd): under TCG, 6.12 has been seen to take an int3
# oops in early boot while patching kernel text. That is booted again,
# KVA_VM_BOOT_RETRIES times (default 1), saying so. The same int3 oops
# also comes later, in kernel text a static key is being patched in (the
# sandbox lane setting cpu.max flips the CFS bandwidth key, and another
# vCPU under multi-threaded TCG can still run the old translation with the
# int3 in it after the patch is done): an "Oops: int3" with no verdict
# marker is booted again too, KVA_VM_INT3_RETRIES times (default 2).
# Nothing of ours puts an int3 in kernel text. Any other failure is the
# verdict.
boot=0
while :; do
set +e
if [ "$SHELL_AFTER" = 1 ]; then
	timeout --foreground -k 10 "$TIMEOUT" "${QEMU[@]}" 2>&1 | tee "$SERIAL"
	QRC=${PIPESTATUS[0]}
else
	# timeout(1) runs qemu in a process group of its own, out of reach of a
	# Ctrl-C or of a signal to our group: forward INT/TERM/HUP to it by pid.
	# The pipeline runs in the background because bash runs traps only once
	# a foreground command has finished, but interrupts `wait` at once.
	# shellcheck disable=SC2317 # invoked by the trap
	stop_guest() {
		local p
		p=$(cat "$RUN/qemu.pid" 2>/dev/null || true)
		[ -n "$p" ] && kill -TERM "$p" 2>/dev/null
		wait "$PIPE_PID" 2>/dev/null
		say "interrupted: guest stopped"
		exit 130
	}
	trap stop_guest INT TERM HUP
	# Stream the console, minus the firmware's terminal escapes (screen clears).
	(
		timeout -k 10 "$TIMEOUT" "${QEMU[@]}" </dev/null 2>&1 &
		echo $! >"$RUN/qemu.pid"
		wait $!
		echo $? >"$RUN/qemu.rc"
	) | tee "$SERIAL" | sed -u -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1bc//g' &
	PIPE_PID=$!
	wait "$PIPE_PID"
	trap - INT TERM HUP
	QRC=$(cat "$RUN/qemu.rc" 2>/dev/null || echo 255)
fi
set -e
boot=$((boot + 1))
if [ "$SHELL_AFTER" != 1 ] && [ "$QRC" != 124 ] && [ "$QRC" != 137 ] &&
	[ "$boot" -le "${KVA_VM_BOOT_RETRIES:-1}" ] &&
	! grep -aq 'KVA-GUEST-START' "$SERIAL"; then
	say "$KVER: the guest kernel died before init (no KVA-GUEST-START; nothing of ours was loaded): booting again ($boot of ${KVA_VM_BOOT_RETRIES:-1} retries)"
	grep -aE 'Kernel panic|Oops|RIP:' "$SERIAL" | head -n 3 | tr -d '\r' |
		sed "s/^/$ME:   boot $boot: /" >&2 || true
	cp "$SERIAL" "$RUN/serial.boot$boot.log"
	continue
fi
if [ "$SHELL_AFTER" != 1 ] && [ "$QRC" != 124 ] && [ "$QRC" != 137 ] &&
	[ "$boot" -le "${KVA_VM_INT3_RETRIES:-2}" ] &&
	! grep -aq 'KVA-GUEST-RC=' "$SERIAL" &&
	grep -aq 'Oops: int3' "$SERIAL"; then
	say "$KVER: the guest kernel took an int3 oops in text it was patching (a TCG artifact, see above): booting again ($boot of ${KVA_VM_INT3_RETRIES:-2} retries)"
	grep -aE 'Oops: int3|RIP:' "$SERIAL" | head -n 2 | tr -d '\r' |
		sed "s/^/$ME:   boot $boot: /" >&2 || true
	cp "$SERIAL" "$RUN/serial.boot$boot.log"
	continue
fi
break
done
echo # the guest's last console line has no newline
T3=$(now)
[ "${KVA_VM_NOLOCK:-0}" != 1 ] && exec 9>&-

cp "$SERIAL" "$KDIR/last.log"
if [ -n "$LOG" ]; then
	mkdir -p "$(dirname "$LOG")"
	cp "$SERIAL" "$LOG"
fi
LOGHINT=${LOG:-$KDIR/last.log}

# ---------------------------------------------------------------- verdict
CLEAN=$(tr -d '\r' <"$SERIAL")
rcline=$(grep -aoE 'KVA-GUEST-RC=[0-9]+' <<<"$CLEAN" | tail -n1 || true)
startline=$(grep -aoE 'KVA-GUEST-START kernel=[^ ]+ uptime=[0-9.]+' <<<"$CLEAN" | tail -n1 || true)
endline=$(grep -aoE 'KVA-GUEST-END rc=[0-9]+ uptime=[0-9.]+' <<<"$CLEAN" | tail -n1 || true)
boot_s=${startline##*uptime=}
cmd_s=
if [ -n "$startline" ] && [ -n "$endline" ]; then
	cmd_s=$(elapsed "${startline##*uptime=}" "${endline##*uptime=}")
fi
TIMING="qemu wall $(elapsed "$T2" "$T3")s${boot_s:+, kernel boot to init ${boot_s}s}${cmd_s:+, command ${cmd_s}s} (guest clock)"

kernel_trouble() {
	grep -aE 'Kernel panic|Oops|BUG:|general protection|Call Trace|WARNING:' <<<"$CLEAN" | grep -av 'KVA-DMESG' | head -n 20 || true
}

if [ -z "$rcline" ]; then
	if [ "$QRC" = 124 ] || [ "$QRC" = 137 ]; then
		say "FAIL: $KVER: guest did not finish within --timeout ${TIMEOUT}s; killed (serial log: $LOGHINT)"
		t=$(kernel_trouble)
		[ -n "$t" ] && printf '%s\n' "$t" | sed "s/^/$ME:   console: /" >&2
		exit 124
	fi
	say "FAIL: $KVER: guest ended without its KVA-GUEST-RC marker (qemu exit $QRC): kernel panic, init died or qemu failed (serial log: $LOGHINT)"
	t=$(kernel_trouble)
	[ -n "$t" ] && printf '%s\n' "$t" | sed "s/^/$ME:   console: /" >&2
	exit 1
fi
RC=${rcline#KVA-GUEST-RC=}

dmesg_end=$(grep -aoE 'KVA-DMESG-END count=[0-9]+' <<<"$CLEAN" | tail -n1 || true)
if [ -z "$dmesg_end" ]; then
	say "FAIL: $KVER: the kernel-log check did not run (no KVA-DMESG-END marker) (serial log: $LOGHINT)"
	exit 1
fi
nbad=${dmesg_end##*count=}
if [ "$nbad" -gt 0 ]; then
	bad=$(grep -a '^KVA-DMESG| ' <<<"$CLEAN" | cut -c12-)
	if [ "$ALLOW_WARN" = 1 ]; then
		say "warning: $KVER: kernel log has $nbad line(s) matching /$BAD_KLOG/ (allowed by --allow-warnings):"
		printf '%s\n' "$bad" | sed "s/^/$ME:   dmesg: /" >&2
	else
		say "FAIL: $KVER: kernel log has $nbad line(s) matching /$BAD_KLOG/ (command exit $RC; full dmesg in the serial log between KVA-KLOG-BEGIN/END: $LOGHINT):"
		printf '%s\n' "$bad" | sed "s/^/$ME:   dmesg: /" >&2
		[ "$RC" = 0 ] && exit 1
		exit "$RC"
	fi
fi

if [ "$RC" = 0 ]; then
	say "PASS: $KVER: command exited 0; $TIMING"
else
	say "FAIL: $KVER: command exited $RC; $TIMING (serial log: $LOGHINT)"
fi
exit "$RC"
