#!/bin/sh
# SPDX-License-Identifier: MIT
#
# avx512-emu.sh - run the engine's kernel test on an emulated AVX-512 CPU.
#
#   tests/engine/avx512-emu.sh STATIC_TEST_BINARY
#
# A host whose CPU has AVX-512 F/BW/VL and VNNI runs the binary natively
# under the same verdict (below). Elsewhere, QEMU's TCG not emulating
# AVX-512, the AVX-512 kernels (daemon/engine/kernels_avx512.c,
# kernels_avx512vnni.c) are run under Bochs with its Ice Lake CPU model
# (AVX-512 F/CD/DQ/BW/VL and VNNI, among others): a Debian kernel boots
# from a GRUB ISO into an initramfs of busybox and the (statically linked)
# test binary; /init prints /proc/cpuinfo's flags and the kernel's XSAVE
# lines, runs the test, prints a marker with its exit status and powers
# off. The serial console goes to a file, which this script checks.
#
# Fails unless: the guest CPU reports avx512f, avx512bw and avx512vl; the
# kernel enabled the AVX-512 XSAVE state (opmask, ZMM_Hi256, Hi16_ZMM);
# the test ran AVX-512 checks (no "# skip avx512"); where the CPU reports
# avx512_vnni (required of the Ice Lake model), the AVX-512 VNNI checks ran,
# including the bit-for-bit ones against the AVX-512 and AVX2 products; no
# check failed; the exit-status marker appeared before the timeout.
#
# This is emulation: it proves the kernels compute the right results, and
# says nothing about their speed. A run takes two to fifteen minutes
# (the latter on a 2-core host at load average 13-15).
#
# Environment: AVX512_EMU_OUT (work directory, default
# build/engine/avx512emu), AVX512_EMU_KERNEL (a bzImage; default the
# newest /boot/vmlinuz-6.12*, which is zstd-compressed and boots faster
# under Bochs than 6.1's xz), AVX512_EMU_TIMEOUT (seconds, default 1800),
# AVX512_EMU_CPU (the Bochs CPU model, default corei7_icelake_u;
# corei7_skylake_x runs the AVX-512 checks without the VNNI ones; one
# without AVX-512, e.g. corei7_haswell_4770, shows the lane failing; no
# Bochs 2.7 model has AVX-VNNI, so kernels_avxvnni.c runs nowhere here).
# Only one Bochs runs at a time: the work directory is locked.
#
# Bochs quirks handled here: Debian's bochs has its debugger built in and
# stops at a prompt before the first instruction (-rc feeds it
# "continue"); it ships no "nogui" display, so the "term" display runs on
# a pseudo-terminal made by script(1); its CPUID leaf 0xD sub-leaf 1
# reports the standard-format XSAVE size where the compacted one belongs,
# so Linux rejects XSAVES/XSAVEC ("XSAVE consistency problem") and turns
# off XSAVE, AVX and AVX-512 altogether - hence clearcpuid=xsaves,xsavec,
# which makes the kernel use the standard format; and on the Ice Lake and
# Tiger Lake models its PKRU state component (sub-leaf 9) has offset and
# size 0 ("misordered xstate at 1664", the same consistency failure) -
# hence pku in that list too (the test does not use protection keys).
set -eu

die() { echo "avx512-emu: $*" >&2; exit 1; }

[ $# -eq 1 ] || { echo "usage: $0 STATIC_TEST_BINARY" >&2; exit 2; }
bin=$1
out=${AVX512_EMU_OUT:-build/engine/avx512emu}
tmo=${AVX512_EMU_TIMEOUT:-1800}
kernel=${AVX512_EMU_KERNEL:-}
cpu=${AVX512_EMU_CPU:-corei7_icelake_u}
if [ -z "$kernel" ]; then
	# shellcheck disable=SC2012 # /boot's names are plain
	kernel=$(ls /boot/vmlinuz-6.12* 2>/dev/null | sort -V | tail -n 1)
	# shellcheck disable=SC2012
	[ -n "$kernel" ] || kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
fi
bios=/usr/share/bochs/BIOS-bochs-latest
vgabios=/usr/share/vgabios/vgabios.bin
busybox=/bin/busybox

# The verdict on $log (the test's output with the flags and exit-status
# markers), the same whether it ran emulated or natively ($how)
verdict() {
	fail=0
	vnni=
	bad() { echo "avx512-emu: FAIL: $*"; fail=1; }

	flags=$(sed -n 's/^avx512-emu: flags //p' "$log")
	for f in avx512f avx512bw avx512vl; do
		echo " $flags " | grep -q " $f " || bad "the $how CPU does not report $f"
	done
	[ "$how" = native ] ||
		for x in "0x020: 'AVX-512 opmask'" "0x040: 'AVX-512 Hi256'" "0x080: 'AVX-512 ZMM_Hi256'"; do
			grep -q "x86/fpu: Supporting XSAVE feature $x" "$log" ||
				bad "the kernel did not enable XSAVE feature $x"
		done
	grep -q '^# skip avx512:' "$log" && bad "the test skipped AVX-512"
	grep -q '^ok   avx512 ' "$log" || bad "no AVX-512 check passed"
	# a model with AVX-512 VNNI (corei7_icelake_u, the default) must run the
	# VNNI checks: the 512-bit set, and the 256-bit tile with EVEX vpdpbusd
	if echo " $flags " | grep -q " avx512_vnni "; then
		grep -q '^# skip avx512vnni' "$log" && bad "the test skipped AVX-512 VNNI"
		grep -q '^ok   avx512vnni ' "$log" || bad "no AVX-512 VNNI check passed"
		grep -q '^ok   avx512vnni mm_q8 == avx512 mm_q8 bit for bit' "$log" ||
			bad "avx512vnni was not checked against avx512 bit for bit"
		grep -q '^ok   avxvnni code with EVEX vpdpbusd mm_q8 == avx2 mm_q8 bit for bit' "$log" ||
			bad "the 256-bit VNNI tile (EVEX) was not checked against avx2"
		vnni=yes
	elif [ "$how" != native ] && [ "$cpu" = corei7_icelake_u ]; then
		bad "the emulated CPU does not report avx512_vnni"
	fi
	grep '^FAIL' "$log" | sed 's/^/avx512-emu: /'
	grep -q '^FAIL' "$log" && bad "$(grep -c '^FAIL' "$log") check(s) failed"
	status=$(sed -n 's/^avx512-emu: test exit status //p' "$log")
	if [ -z "$status" ]; then
		bad "no exit-status marker: the test never finished (see $log)"
		tail -n 20 "$log" | sed 's/^/avx512-emu: serial: /'
	elif [ "$status" != 0 ]; then
		bad "the test exited with status $status"
	fi

	grep '^# ' "$log" | sed 's/^/avx512-emu: test: /'
	echo "avx512-emu: cpu flags: $(echo " $flags " | tr ' ' '\n' | grep -E '^(avx|fma|f16c|xsave)' | tr '\n' ' ')"
	sed -n 's/^avx512-emu: dmesg \[[ 0-9.]*\] \(x86\/fpu: Enabled.*\)/avx512-emu: \1/p' "$log"
	echo "avx512-emu: $(grep -c '^ok   avx512 ' "$log") avx512 checks ok, $(grep -c '^ok   avx512vnni ' "$log") avx512vnni${vnni:+ (VNNI run)}; $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" || echo 'no summary line')"
	echo "avx512-emu: ${secs}s end to end ($how); logs in $out"
	[ "$fail" -eq 0 ] || exit 1
	echo "avx512-emu: PASS"
}

# A host whose own CPU has AVX-512 F/BW/VL and VNNI (a Zen 4 or 5) runs
# the same static binary natively under the same verdict, in seconds;
# AVX512_EMU=1 boots Bochs all the same.
how=emulated
if [ "${AVX512_EMU:-0}" != 1 ]; then
	how=native
	host=" $(grep -m1 '^flags' /proc/cpuinfo | sed 's/^flags[^:]*: //') "
	for f in avx512f avx512bw avx512vl avx512_vnni; do
		case $host in *" $f "*) ;; *) how=emulated ;; esac
	done
fi
if [ "$how" = native ]; then
	mkdir -p "$out"
	log=$out/native.txt
	start=$(date +%s)
	{
		echo "avx512-emu: flags$host"
		KVE_SELFCHECK=1 "$bin"
		echo "avx512-emu: test exit status $?"
	} >"$log" 2>&1
	secs=$(( $(date +%s) - start ))
	echo "avx512-emu: this CPU has AVX-512 F/BW/VL and VNNI: the test runs natively (AVX512_EMU=1 emulates)"
	verdict
	exit 0
fi

for t in bochs-bin grub-mkrescue xorriso cpio script timeout flock readelf; do
	command -v $t >/dev/null 2>&1 || die "$t not found (scripts/deps.sh avx512-emu installs it)"
done
for f in "$bin" "$kernel" "$bios" "$vgabios" "$busybox"; do
	if [ -z "$f" ] || [ ! -r "$f" ]; then
		die "missing: ${f:-a kernel in /boot}"
	fi
done
for f in "$bin" "$busybox"; do
	readelf -l "$f" | grep -q INTERP && die "$f is not statically linked"
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
exec 9>"$out/lock"
flock -w "$tmo" 9 || die "another run holds $out/lock"

start=$(date +%s)
rm -rf "$out/root" "$out/iso" "$out/serial.log" "$out/bochs.log" "$out/boot.iso"
mkdir -p "$out/root/bin" "$out/root/proc" "$out/root/sys" "$out/root/dev" \
	"$out/iso/boot/grub"
cp "$busybox" "$out/root/bin/busybox"
cp "$bin" "$out/root/test"
cat >"$out/root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
echo "avx512-emu: kernel $(uname -r)"
echo "avx512-emu: flags $(grep -m1 '^flags' /proc/cpuinfo | sed 's/^flags[^:]*: //')"
dmesg | grep -E 'x86/fpu|XSAVE|Clearing CPUID' | sed 's/^/avx512-emu: dmesg /'
KVE_SELFCHECK=1 /test	# as tests/engine/run.sh runs it
rc=$?
echo "avx512-emu: test exit status $rc"
sleep 1	# let the UART drain before the power goes
poweroff -f
EOF
chmod 755 "$out/root/init"
(cd "$out/root" && find . | cpio -o -H newc --quiet) >"$out/iso/boot/initrd.cpio"
cp "$kernel" "$out/iso/boot/vmlinuz"
cat >"$out/iso/boot/grub/grub.cfg" <<'EOF'
set timeout=0
set default=0
menuentry avx512-emu {
	linux /boot/vmlinuz console=ttyS0,115200 rdinit=/init quiet mitigations=off nokaslr clearcpuid=xsaves,xsavec,pku
	initrd /boot/initrd.cpio
}
EOF
grub-mkrescue -d /usr/lib/grub/i386-pc -o "$out/boot.iso" "$out/iso" >"$out/grub-mkrescue.log" 2>&1 ||
	{ cat "$out/grub-mkrescue.log" >&2; die "grub-mkrescue failed"; }

# ips only sets how fast guest time runs against emulated instructions
# (clock: sync=none): a low value shortens the BIOS's and GRUB's waits.
cat >"$out/bochsrc" <<EOF
megs: 256
romimage: file=$bios
vgaromimage: file=$vgabios
cpu: model=$cpu, count=1, ips=50000000, reset_on_triple_fault=0
clock: sync=none, time0=local
pci: enabled=1, chipset=i440fx
ata0-master: type=cdrom, path=boot.iso, status=inserted
ata1: enabled=0
ata2: enabled=0
ata3: enabled=0
boot: cdrom
floppy_bootsig_check: disabled=1
com1: enabled=1, mode=file, dev=serial.log
display_library: term
speaker: enabled=0
sound: driver=dummy
log: bochs.log
panic: action=fatal
error: action=report
info: action=report
debug: action=ignore
EOF
printf 'continue\nquit\n' >"$out/debugger.rc"

echo "avx512-emu: booting $(basename "$kernel") under Bochs (cpu $cpu), timeout ${tmo}s"
rc=0
(cd "$out" && TERM=vt100 timeout -k 10 "$tmo" script -qec \
	"bochs-bin -q -f bochsrc -rc debugger.rc" /dev/null) \
	</dev/null >"$out/bochs.stdout" 2>&1 || rc=$?
secs=$(( $(date +%s) - start ))
case $rc in 124 | 137) echo "avx512-emu: Bochs stopped by the ${tmo}s timeout" ;; esac

log=$out/serial.txt
: >"$log"
[ -f "$out/serial.log" ] && tr -d '\r' <"$out/serial.log" >"$log"
verdict
