#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The escape suite, through kva-sandbox: each attempt must fail, for a
# reason the output names. Host lane (this script, `make check-sandbox`):
# everything but the cgroup v2 limits; where this host cannot enforce a
# limit (hybrid cgroups: no v2 cpu/memory/pids) the rlimit stand-in is what
# is checked, and said. The limits themselves: guest-limits.sh in a Debian
# 6.12 guest (`make check-sandbox-guest`).
#
#   tests/sandbox/escape.sh [host]
# Environment: KVS (the CLI, default the ASan build), PROBE.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

KVS=${KVS:-build/sandbox/kva-sandbox-san}
PROBE=$(realpath "${PROBE:-build/sandbox/kvs-probe}")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
if [ ! -x "$KVS" ] || [ ! -x "$PROBE" ]; then
	echo "escape: build first (make sandbox)" >&2
	exit 2
fi
[ "$(id -u)" = 0 ] || { echo "escape: SKIP: the suite runs as root (it plants a setuid-root binary and a host listener)" >&2; exit 0; }

T=$(mktemp -d /tmp/kvs-escape.XXXXXX)
chmod 755 "$T"
LISTENER=
SLEEPER=
cleanup() {
	[ -n "$LISTENER" ] && kill "$LISTENER" 2>/dev/null
	[ -n "$SLEEPER" ] && kill "$SLEEPER" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT

pass=0
fail=0
start=$(date +%s)

ok() { pass=$((pass + 1)); printf 'ok   %-34s %s\n' "$1" "$2"; }
bad() { fail=$((fail + 1)); printf 'FAIL %-34s %s\n' "$1" "$2"; cut -c1-300 "$T/out" | sed 's/^/     | /' | head -n 20; }

# run NAME ARGS... : kva-sandbox ARGS, output in $T/out, status in $rc
run() {
	local name=$1
	shift
	"$KVS" -q "$@" >"$T/out" 2>&1
	rc=$?
	reason=$(grep -ao 'kva-sandbox: tool=[^ ]* reason=[a-z-]*' "$T/out" | tail -n1 | sed 's/.*reason=//')
	: "$name"
}

# expect_blocked NAME [kva-sandbox args --] probe-args: the probe ran and
# said BLOCKED, and nothing said ESCAPED or SUCCEEDED
expect_blocked() {
	local name=$1
	shift
	run "$name" "$@"
	if [ "$rc" = 0 ] && grep -q '^BLOCKED' "$T/out" && ! grep -qE 'ESCAPED|SUCCEEDED' "$T/out"; then
		ok "$name" "$(grep -m1 '^BLOCKED' "$T/out")"
	else
		bad "$name" "exit $rc, reason ${reason:-?}"
	fi
}

W=$T/work
mkdir -p "$W" && chown 65534:65534 "$W"

echo "== escape suite (host lane): $KVS"
: >"$T/empty.ini"
"$KVS" --policy "$T/empty.ini" --check 2>&1 | sed -n 's/^host: /   host cannot enforce: /p' | cut -c1-300

# ---- files
mkdir -p "$T/secret" && echo secret >"$T/secret/key"
expect_blocked "read /etc/shadow" --workdir "$W" -- "$PROBE" read /etc/shadow
expect_blocked "read a file outside the work dir" --workdir "$W" -- "$PROBE" read "$T/secret/key"
expect_blocked "read the launcher's own files" --workdir "$W" -- "$PROBE" read /proc/1/root/etc/passwd
expect_blocked "write outside (/etc)" --workdir "$W" -- "$PROBE" write /etc/kvs-escape
expect_blocked "write outside (a ro system dir)" --workdir "$W" -- "$PROBE" write /usr/lib/x86_64-linux-gnu/kvs-escape
expect_blocked "write outside (host path)" --workdir "$W" -- "$PROBE" write "$T/secret/planted"
[ -e "$T/secret/planted" ] && bad "write outside (host path)" "the file appeared on the host"
expect_blocked "symlink to /etc/passwd" --workdir "$W" -- "$PROBE" symlink /etc/passwd
expect_blocked "symlink ../.. to the host" --workdir "$W" -- "$PROBE" symlink "../../../../../../$T/secret/key"
expect_blocked "read ../.. out of the work dir" --workdir "$W" -- "$PROBE" read "../../../../../$T/secret/key"
# control: the work directory itself is readable and writable
run "control: write in the work dir" --workdir "$W" -- "$PROBE" write ./control
if [ "$rc" = 99 ] && [ "$(stat -c %u "$W/control" 2>/dev/null)" = 65534 ]; then
	ok "control: write in the work dir" "allowed, owned by uid 65534 on the host"
else
	bad "control: write in the work dir" "exit $rc"
fi

# ---- the built-in file tools, run by the launcher itself: a link the
# sandbox left in the work directory must not lead the launcher out
"$KVS" -q --workdir "$W" -- "$PROBE" symlink /etc/shadow >/dev/null 2>&1
ln -sfn /etc/shadow "$W/lnk"	# as a tool would have left it
run "read_file via a planted symlink" --tool read_file --workdir "$W" -- lnk
if [ "$rc" = 126 ] && grep -q 'out of the work directory\|link it may not follow' "$T/out" &&
	! grep -q 'root:' "$T/out"; then
	ok "read_file via a planted symlink" "$(grep -o 'read_file lnk: .*' "$T/out")"
else
	bad "read_file via a planted symlink" "exit $rc"
fi
run "read_file ../" --tool read_file --workdir "$W" -- "../secret/key"
if [ "$rc" = 126 ] && ! grep -qx secret "$T/out"; then ok "read_file ../" "$(grep -o 'read_file \.\./secret/key: .*' "$T/out")"; else bad "read_file ../" "exit $rc"; fi
run "read_file absolute" --tool read_file --workdir "$W" -- /etc/passwd
if [ "$rc" = 126 ]; then ok "read_file absolute" "$(grep -o 'read_file /etc/passwd: .*' "$T/out")"; else bad "read_file absolute" "exit $rc"; fi
run "write_file via a planted symlink" --tool write_file --workdir "$W" --stdin /dev/null -- lnk
if [ "$rc" = 126 ] && [ -s /etc/shadow ]; then ok "write_file via a planted symlink" "$(grep -o 'write_file lnk: .*' "$T/out")"; else bad "write_file via a planted symlink" "exit $rc"; fi
run "write_file ../" --tool write_file --workdir "$W" --stdin /dev/null -- ../planted
if [ "$rc" = 126 ] && [ ! -e "$T/planted" ]; then ok "write_file ../" "$(grep -o 'write_file \.\./planted: .*' "$T/out")"; else bad "write_file ../" "exit $rc"; fi
echo hello >"$T/in"
run "control: write_file + read_file" --tool write_file --workdir "$W" --stdin "$T/in" -- notes.txt
run "control: write_file + read_file" --tool read_file --workdir "$W" -- notes.txt
if [ "$rc" = 0 ] && grep -q hello "$T/out"; then ok "control: write_file + read_file" "round trip in the work dir"; else bad "control: write_file + read_file" "exit $rc"; fi

# ---- network: a real listener on the host's loopback
PORT=$((20000 + RANDOM % 20000))
/usr/bin/python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
while True:
    c, _ = s.accept(); c.close()
' "$PORT" &
LISTENER=$!
for _ in $(seq 50); do
	(exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break
	sleep 0.1
done
expect_blocked "TCP to 127.0.0.1 (network denied)" --workdir "$W" -- "$PROBE" connect 127.0.0.1 "$PORT"
cat >"$T/net.ini" <<EOF
[net]
exec = $PROBE
network = yes
EOF
run "control: TCP with network granted" --policy "$T/net.ini" --tool net --workdir "$W" -- "$PROBE" connect 127.0.0.1 "$PORT"
if [ "$rc" = 99 ]; then ok "control: TCP with network granted" "connected: the listener is real"; else bad "control: TCP with network granted" "exit $rc"; fi

# ---- processes and the kernel
expect_blocked "ptrace / process_vm_writev of a sibling" --workdir "$W" -- "$PROBE" ptrace
expect_blocked "mount, unshare/setns, bpf, modules, ..." --workdir "$W" -- "$PROBE" syscalls
sleep 300 &
SLEEPER=$!
expect_blocked "kill a process outside" --workdir "$W" -- "$PROBE" kill "$SLEEPER"
if ! kill -0 "$SLEEPER" 2>/dev/null; then bad "kill a process outside" "the host process died"; fi
expect_blocked "write /proc/sys and /sys" --workdir "$W" -- "$PROBE" procsys
cp "$PROBE" "$T/suid-probe" && chown 0:0 "$T/suid-probe" && chmod 4755 "$T/suid-probe"
expect_blocked "setuid-root binary" --workdir "$W" -- "$T/suid-probe" euid
expect_blocked "exec what the policy does not list" --workdir "$W" -- "$PROBE" exec /usr/lib/x86_64-linux-gnu/libc.so.6

# ---- issue 36: sockets, namespaces, memory outside the limits, code from memory
expect_blocked "socket families: AF_VSOCK, AF_ALG, netlink audit, ... (36.11)" --workdir "$W" -- "$PROBE" sockets
cat >>"$T/net.ini" <<EOF
[netprobe]
exec = $PROBE
network = yes
EOF
run "control: AF_INET/AF_INET6 with network granted" --policy "$T/net.ini" --tool netprobe --workdir "$W" -- "$PROBE" sockets net
if [ "$rc" = 0 ] && grep -q '^BLOCKED sockets' "$T/out"; then
	ok "control: AF_INET/AF_INET6 with network granted" "allowed; AF_VSOCK and the rest still refused"
else
	bad "control: AF_INET/AF_INET6 with network granted" "exit $rc"
fi
mun0=$(cat /proc/sys/user/max_user_namespaces)
mfd0=$(cat /proc/sys/vm/memfd_noexec 2>/dev/null || echo none)
expect_blocked "a user namespace inside the run (36.13)" --workdir "$W" -- "$PROBE" userns
# the run's limits are its own namespaces', never the host's
if [ "$(cat /proc/sys/user/max_user_namespaces)" = "$mun0" ] && [ "$mun0" != 0 ] &&
	[ "$(cat /proc/sys/vm/memfd_noexec 2>/dev/null || echo none)" = "$mfd0" ]; then
	ok "the host's sysctls untouched" "max_user_namespaces $mun0, memfd_noexec $mfd0"
else
	bad "the host's sysctls untouched" "max_user_namespaces $mun0 -> $(cat /proc/sys/user/max_user_namespaces)"
fi
# without a memory controller a memfd is memory no limit sees; with one it
# is charged to the run's cgroup (the guest lane: OOM there)
printf '[memfd]\nexec = %s\nmemory = 16M\n' "$PROBE" >"$T/memfd.ini"
run "memfd past the memory limit (36.9)" --policy "$T/memfd.ini" --tool memfd --workdir "$W" -- "$PROBE" memfd 48
if { [ "$rc" = 0 ] && grep -q '^BLOCKED memfd' "$T/out"; } || [ "$reason" = oom ]; then
	ok "memfd past the memory limit (36.9)" "$(grep -m1 '^BLOCKED' "$T/out" || echo "reason $reason")"
else
	bad "memfd past the memory limit (36.9)" "exit $rc reason ${reason:-?}"
fi
expect_blocked "exec from a memfd: fexecve, /proc/self/fd (36.12)" --workdir "$W" -- "$PROBE" memfdexec

# ---- issue 36.10/36.13: session work directories, as kvarenad's (through a
# spawner: a tmpfs each, capped, a uid each, its mounts the spawner's alone)
S=$T/session
run "work directory past its size cap (36.10)" --workdir "$S" --workdir-size 8M -- "$PROBE" fill 20
if [ "$rc" = 0 ] && grep -q '^BLOCKED fill' "$T/out"; then
	ok "work directory past its size cap (36.10)" "$(grep -m1 '^BLOCKED' "$T/out")"
else
	bad "work directory past its size cap (36.10)" "exit $rc"
fi
[ -e "$S" ] && bad "session work directory removed" "$S is left"
expect_blocked "the work directory's host path in mountinfo (36.13)" --workdir "$S" --workdir-size 8M -- "$PROBE" mountinfo "$S"
expect_blocked "setuid/setgid files in the work directory (36.10)" --workdir "$S" --workdir-size 8M -- "$PROBE" suidfile
run "a tree 2000 deep, removed with the work directory (36.10)" --workdir "$S" --workdir-size 8M -- "$PROBE" deep 2000
if [ "$rc" = 0 ] && [ ! -e "$S" ]; then
	ok "a tree 2000 deep, removed with the work directory (36.10)" "gone"
else
	bad "a tree 2000 deep, removed with the work directory (36.10)" "exit $rc"
fi
run "a uid of its own per session (36.10)" --workdir "$S" --workdir-size 8M -- /bin/cat /proc/self/uid_map
outside=$(awk '$1 == 1000 { print $2 }' "$T/out")
if [ "$rc" = 0 ] && [ -n "$outside" ] && [ "$outside" -ge 1879048192 ] && [ "$outside" != 65534 ]; then
	ok "a uid of its own per session (36.10)" "uid $outside outside, not nobody"
else
	bad "a uid of its own per session (36.10)" "exit $rc uid ${outside:-?}"
fi
# a plain work directory (no spawner) keeps its size uncapped: said, not silent
run "control: plain work directory" --workdir "$W" -- "$PROBE" write ./control2
if [ "$rc" = 99 ]; then ok "control: plain work directory" "writable"; else bad "control: plain work directory" "exit $rc"; fi

# ---- 36.13: a tool's bytes to a terminal: control sequences shown, not run
if /usr/bin/python3 - "$KVS" >"$T/out" 2>&1 <<'PY'
import os, pty, subprocess, sys
m, s = pty.openpty()
p = subprocess.Popen([sys.argv[1], "-q", "--", "/usr/bin/printf",
                      r"a\033]0;title\007b\rc\302\233d\342\202\254\377e\n"],
                     stdout=s, stderr=subprocess.DEVNULL)
p.wait()
os.close(s)
out = b""
while True:
    try:
        d = os.read(m, 4096)
    except OSError:
        break
    if not d:
        break
    out += d
print(repr(out))
want = b"a\\x1b]0;title\\x07b\\x0dc\\xc2\\x9bd\xe2\x82\xac\\xffe"
sys.exit(0 if out.startswith(want) and b"\x1b" not in out else 1)
PY
then
	ok "terminal escapes from a tool (36.13)" "shown as \\xHH, UTF-8 kept"
else
	bad "terminal escapes from a tool (36.13)" "raw control bytes reached the terminal"
fi

# ---- limits and the kill
run "CPU spin past the timeout" --workdir "$W" --timeout 1 -- "$PROBE" spin
wall=$(grep -ao ' wall=[0-9.]*' "$T/out" | tail -n1 | cut -d= -f2)
if [ "$rc" = 124 ] && [ "$reason" = timeout ] && awk -v w="$wall" 'BEGIN { exit !(w < 10) }'; then
	ok "CPU spin past the timeout" "exit 124, killed after ${wall}s"
else
	bad "CPU spin past the timeout" "exit $rc reason ${reason:-?} wall ${wall:-?}"
fi
rm -f "$W/hb"
run "a daemon forked by the tool" --workdir "$W" -- "$PROBE" daemon hb
sleep 0.5
s1=$(stat -c %s "$W/hb" 2>/dev/null || echo 0)
sleep 0.6
s2=$(stat -c %s "$W/hb" 2>/dev/null || echo 0)
if [ "$rc" = 0 ] && [ "$s1" -gt 0 ] && [ "$s1" = "$s2" ] && ! pgrep -f "kvs-probe daemon" >/dev/null; then
	ok "a daemon forked by the tool" "gone with the run (heartbeat stopped at $s2 bytes)"
else
	bad "a daemon forked by the tool" "exit $rc, heartbeat $s1 -> $s2"
	pkill -KILL -f "kvs-probe daemon" 2>/dev/null
fi
run "output past the cap" --workdir "$W" -- "$PROBE" output 5000000
if [ "$rc" = 122 ] && [ "$reason" = output-cap ]; then ok "output past the cap" "exit 122, captured 1 MiB then killed"; else bad "output past the cap" "exit $rc reason ${reason:-?}"; fi
# without v2 pids/memory controllers the rlimit stand-ins must still stop
# the bombs (the guest lane checks pids.max and memory.max themselves)
expect_blocked "fork bomb (RLIMIT_NPROC here)" --workdir "$W" -- "$PROBE" forkbomb 5000
# (16 MiB and 60 s: touching the default tool's 256 MiB + 256 MiB of
# address space ran past its 10 s timeout at load average 30)
printf '[membomb]\nexec = %s\nmemory = 16M\ntimeout = 60s\n' "$PROBE" >"$T/membomb.ini"
expect_blocked "memory bomb (RLIMIT_AS here)" --policy "$T/membomb.ini" --tool membomb --workdir "$W" -- "$PROBE" membomb 4096

# ---- policy
run "unknown tool refused" --policy "$T/net.ini" --tool nope --workdir "$W" -- "$PROBE" euid
if [ "$rc" = 126 ] && grep -q "unknown tool 'nope'" "$T/out"; then ok "unknown tool refused" "exit 126"; else bad "unknown tool refused" "exit $rc"; fi
run "command outside the tool's exec list" --policy "$T/net.ini" --tool net --workdir "$W" -- /bin/sh -c true
if [ "$rc" = 126 ] && grep -q "may not execute" "$T/out"; then ok "command outside the tool's exec list" "exit 126"; else bad "command outside the tool's exec list" "exit $rc"; fi
printf '[t]\nexec = /bin/sh\nbogus = 1\n' >"$T/badkey.ini"
run "bad policy key" --policy "$T/badkey.ini" --check
if [ "$rc" = 126 ] && grep -q "unknown key 'bogus'" "$T/out"; then ok "bad policy key" "$(grep -o 'badkey.ini:.*' "$T/out")"; else bad "bad policy key" "exit $rc"; fi
printf '[t]\nro = /etc\n' >"$T/etc.ini"
run "policy exposing /etc wholesale" --policy "$T/etc.ini" --check
if [ "$rc" = 126 ] && grep -q "never exposed" "$T/out"; then ok "policy exposing /etc wholesale" "refused"; else bad "policy exposing /etc wholesale" "exit $rc"; fi

# ---- supplementary groups (36.13): a launcher holding group 4242 (as a
# daemon in a device group would), a file in the work directory only that
# group may read: a root launcher's tool holds no supplementary group
printf 'g\n' >"$W/grp" && chown 0:4242 "$W/grp" && chmod 0640 "$W/grp"
KVS_SAVE=$KVS
printf '#!/bin/sh\nexec setpriv --groups 4242 %s "$@"\n' "$(realpath "$KVS")" >"$T/kvs-groups"
chmod 755 "$T/kvs-groups"
KVS=$T/kvs-groups
expect_blocked "the launcher's supplementary groups (36.13)" --workdir "$W" -- "$PROBE" read grp
KVS=$KVS_SAVE
rm -f "$W/grp"

# ---- the unprivileged launcher (user namespaces only): the same walls
U=$T/uwork
mkdir -p "$U" && chown 65534:65534 "$U"
chmod 755 "$(dirname "$KVS")" "$PROBE"
if setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
	KVS_SAVE=$KVS
	printf '#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups %s "$@"\n' \
		"$(realpath "$KVS")" >"$T/kvs-unpriv"
	chmod 755 "$T/kvs-unpriv"
	KVS=$T/kvs-unpriv
	expect_blocked "unprivileged launcher: syscalls" --workdir "$U" -- "$PROBE" syscalls
	expect_blocked "unprivileged launcher: read outside" --workdir "$U" -- "$PROBE" read "$T/secret/key"
	expect_blocked "unprivileged launcher: TCP" --workdir "$U" -- "$PROBE" connect 127.0.0.1 "$PORT"
	expect_blocked "unprivileged launcher: socket families" --workdir "$U" -- "$PROBE" sockets
	expect_blocked "unprivileged launcher: a user namespace" --workdir "$U" -- "$PROBE" userns
	expect_blocked "unprivileged launcher: exec from a memfd" --workdir "$U" -- "$PROBE" memfdexec
	# it cannot drop its supplementary groups (setgroups needs CAP_SETGID
	# outside): it says so at policy load
	printf '#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --groups 4242 %s "$@"\n' \
		"$(realpath "$KVS_SAVE")" >"$T/kvs-unpriv-groups"
	chmod 755 "$T/kvs-unpriv-groups"
	"$T/kvs-unpriv-groups" --workdir "$U" -- /bin/true >"$T/out" 2>&1
	rc=$?
	if [ "$rc" = 0 ] && grep -q 'supplementary groups stay with its tools' "$T/out"; then
		ok "unprivileged launcher: its groups" "said at load: start it without any"
	else
		bad "unprivileged launcher: its groups" "exit $rc, no note"
	fi
	KVS=$KVS_SAVE
fi

echo "== escape suite (host lane): $pass passed, $fail failed, $(($(date +%s) - start)) s"
[ "$fail" = 0 ]
