#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Self-test of the VM harness: builds a throw-away hello module (and a small
# dynamically linked program) for every installed guest kernel, then checks,
# one guest at a time:
#   1. modprobe of our module from extra/, modprobe vgem -> /dev/dri/card0,
#      --bin with its library closure, a #!/bin/bash script, --file, and the
#      mounts/cgroup controllers the init script promises   -> exit 0
#   2. a command that exits 3                               -> exit 3
#   3. a module that WARNs while the command succeeds        -> exit 1 (dmesg check)
#   4. a module that oopses (NULL dereference)             -> nonzero, dmesg check
#   5. a command that hangs (sleep 1000, --timeout 20)       -> exit 124
# and prints the wall time of a boot.
#
# Usage: tests/vm/selftest.sh [--kver VER|SERIES]... [--quick]
#   --quick skips the 20 s hang test.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RG=$HERE/run-guest.sh
QUICK=0
KVERS=()
while [ "$#" -gt 0 ]; do
	case $1 in
	--kver)
		[ "$#" -ge 2 ] || { echo "selftest: --kver needs a value" >&2; exit 2; }
		KVERS+=("$2"); shift 2 ;;
	--quick) QUICK=1; shift ;;
	-h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "selftest: unknown argument $1" >&2; exit 2 ;;
	esac
done
if [ ${#KVERS[@]} -eq 0 ]; then
	list=$("$HERE/kernels.sh") || { echo "selftest: FAIL: guest kernels missing (see above)" >&2; exit 1; }
	mapfile -t KVERS < <(awk '{print $2}' <<<"$list")
else
	for i in "${!KVERS[@]}"; do
		case ${KVERS[$i]} in
		[0-9][0-9] | [0-9][0-9][0-9]) KVERS[i]=$("$HERE/kernels.sh" "${KVERS[$i]}" | awk '{print $2}') ;;
		esac
	done
fi
command -v gcc >/dev/null || { echo "selftest: gcc not found" >&2; exit 2; }

TMP=$(mktemp -d /tmp/kva-vm-selftest.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# ---------------------------------------------------------------- fixtures
mkdir -p "$TMP/src"
cat >"$TMP/src/kva_hello.c" <<'EOF'
// SPDX-License-Identifier: GPL-2.0
#include <linux/module.h>
#include <linux/bug.h>

static int warn;
module_param(warn, int, 0444);
MODULE_PARM_DESC(warn, "WARN() on load (harness self-test)");
static int oops;
module_param(oops, int, 0444);
MODULE_PARM_DESC(oops, "NULL dereference on load (harness self-test)");

static int __init kva_hello_init(void)
{
	pr_info("kva_hello: loaded\n");
	WARN(warn, "kva_hello: deliberate warning for the harness self-test\n");
	if (oops) {
		int *volatile p = NULL;

		*p = 1;
	}
	return 0;
}

static void __exit kva_hello_exit(void)
{
	pr_info("kva_hello: unloaded\n");
}

module_init(kva_hello_init);
module_exit(kva_hello_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("kvarena VM harness self-test module");
EOF
echo 'obj-m := kva_hello.o' >"$TMP/src/Kbuild"

cat >"$TMP/kva_hellobin.c" <<'EOF'
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
	volatile double x = argc > 1 ? atof(argv[1]) : 2.0;
	printf("kva_hellobin: sqrt=%.3f\n", sqrt(x));
	return 0;
}
EOF
gcc -O2 -o "$TMP/kva_hellobin" "$TMP/kva_hellobin.c" -lm
# shellcheck disable=SC2016 # expanded in the guest
printf '#!/bin/bash\nset -euo pipefail\narr=(a b c)\necho "kva_bashscript: ${#arr[@]} items, bash $BASH_VERSION"\n' >"$TMP/kva_bashscript"
chmod +x "$TMP/kva_bashscript"
echo "kva-data-ok" >"$TMP/data.txt"

# shellcheck disable=SC2016 # expanded in the guest
GUEST_CHECKS='
set -u
fail() { echo "SELFTEST-CHECK-FAILED: $*"; exit 10; }
modprobe kva_hello || fail "modprobe kva_hello"
grep -q "^kva_hello " /proc/modules || fail "kva_hello not in /proc/modules"
dmesg | grep -q "kva_hello: loaded" || fail "no load message"
modprobe -r kva_hello || fail "modprobe -r kva_hello"
modprobe vgem || fail "modprobe vgem"
ls -l /dev/dri
[ -c /dev/dri/card0 ] || ls /dev/dri/card* >/dev/null 2>&1 || fail "no /dev/dri/card*"
kva_hellobin 9 | grep -q "sqrt=3.000" || fail "--bin dynamic program"
kva_bashscript | grep -q "3 items" || fail "--bin bash script"
[ "$(cat /opt/kva/data/data.txt)" = kva-data-ok ] || fail "--file relative"
[ "$(cat /etc/kva-data.txt)" = kva-data-ok ] || fail "--file absolute"
[ "$(pwd)" = /opt/kva ] || fail "cwd is $(pwd)"
for m in /proc /sys /dev /sys/kernel/debug /sys/kernel/tracing /sys/fs/bpf /sys/fs/cgroup /tmp /dev/shm; do
	grep -q " $m " /proc/mounts || fail "$m not mounted"
done
echo "cgroup subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
for c in cpu memory pids; do grep -qw $c /sys/fs/cgroup/cgroup.subtree_control || fail "cgroup $c not enabled"; done
echo x >/dev/shm/x && rm /dev/shm/x || fail "/dev/shm not writable"
echo SELFTEST-GUEST-OK
'

# ---------------------------------------------------------------- runs
RESULTS=()
FAILED=0
record() { # kver test expected(N or nz) got seconds [extra]
	local verdict=ok
	if [ "$3" = nz ]; then
		[ "$4" != 0 ] || { verdict=FAILED; FAILED=1; }
	elif [ "$3" != "$4" ]; then verdict=FAILED; FAILED=1; fi
	RESULTS+=("$(printf '%-24s %-10s expect %-3s got %-3s %5ss %s %s' "$1" "$2" "$3" "$4" "$5" "$verdict" "${6:-}")")
	echo "selftest: $1 $2: expected exit $3, got $4 ($5 s) -> $verdict" >&2
}
wall() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

for kv in "${KVERS[@]}"; do
	echo "==== selftest: kernel $kv" >&2
	b=$TMP/build-$kv
	cp -r "$TMP/src" "$b"
	t=$(date +%s.%N)
	if ! make -C "/lib/modules/$kv/build" M="$b" modules >"$b/make.log" 2>&1; then
		cat "$b/make.log" >&2
		record "$kv" build 0 1 "$(wall "$t")"
		continue
	fi
	echo "selftest: built kva_hello.ko for $kv in $(wall "$t") s" >&2
	KO=$b/kva_hello.ko
	COMMON=(--kver "$kv" --ko "$KO" --bin "$TMP/kva_hellobin" --bin "$TMP/kva_bashscript"
		--file "$TMP/data.txt:data/" --file "$TMP/data.txt:/etc/kva-data.txt")

	# 1. everything that must work
	t=$(date +%s.%N)
	set +e
	"$RG" "${COMMON[@]}" --log "$TMP/t1-$kv.log" --cmd "$GUEST_CHECKS"
	rc=$?
	set -e
	s=$(wall "$t")
	if [ "$rc" = 0 ] && ! tr -d '\r' <"$TMP/t1-$kv.log" | grep -qx SELFTEST-GUEST-OK; then rc=99; fi
	record "$kv" features 0 "$rc" "$s"

	# 2. exit status passes through; also the boot-time measurement
	t=$(date +%s.%N)
	set +e
	"$RG" --kver "$kv" --cmd 'echo about to exit 3; exit 3' 2>"$TMP/t2.err"
	rc=$?
	set -e
	s=$(wall "$t")
	cat "$TMP/t2.err" >&2
	timing=$(grep -o 'qemu wall.*(guest clock)' "$TMP/t2.err" || true)
	record "$kv" exit3 3 "$rc" "$s" "[boot: $timing]"

	# 3. a kernel WARNING fails a command that itself succeeds
	t=$(date +%s.%N)
	set +e
	"$RG" --kver "$kv" --ko "$KO" --cmd 'modprobe kva_hello warn=1' 2>"$TMP/t3.err"
	rc=$?
	set -e
	s=$(wall "$t")
	cat "$TMP/t3.err" >&2
	if [ "$rc" = 1 ] && ! grep -q 'FAIL: .*kernel log has' "$TMP/t3.err"; then rc=98; fi
	record "$kv" warn 1 "$rc" "$s"

	# 4. an oops in our module fails the run (whatever modprobe's status)
	t=$(date +%s.%N)
	set +e
	"$RG" --kver "$kv" --ko "$KO" --cmd 'modprobe kva_hello oops=1; echo "modprobe exited $?"; exit 0' 2>"$TMP/t4.err"
	rc=$?
	set -e
	s=$(wall "$t")
	cat "$TMP/t4.err" >&2
	if [ "$rc" != 0 ] && ! grep -q 'FAIL: .*kernel log has' "$TMP/t4.err"; then rc=0; fi
	record "$kv" oops nz "$rc" "$s"

	# 5. a hung guest is killed: 124
	if [ "$QUICK" = 0 ]; then
		t=$(date +%s.%N)
		set +e
		"$RG" --kver "$kv" --timeout 20 --cmd 'echo sleeping; sleep 1000'
		rc=$?
		set -e
		record "$kv" hang 124 "$rc" "$(wall "$t")"
	fi
done

echo
echo "==== VM harness self-test summary (wall seconds include packing)"
printf '%s\n' "${RESULTS[@]}"
if [ "$FAILED" != 0 ]; then
	echo "selftest: FAIL"
	exit 1
fi
echo "selftest: PASS"
