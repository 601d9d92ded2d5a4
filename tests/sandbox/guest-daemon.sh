#!/bin/sh
# SPDX-License-Identifier: MIT
# The escape suite's cgroup-limit cases through the daemon, inside the
# Debian 6.12 guest (pure cgroup v2, +cpu +memory +pids; tests/vm/
# run-guest.sh): kvarenad (kvarenad-hooks: the daemon built with the test
# hook that takes a round's reply from $KVD_TEST_REPLY_FILE, the random
# test model never calling a tool itself) runs with the memfd backend and
# the server-side tool sh under a policy with cgroup limits; each hostile
# call is a tool call of the reply, sent through the HTTP API, run by the
# daemon's agent loop in the sandbox. A fork bomb meets pids.max, a memory
# bomb is OOM-killed inside its cgroup only, a spinner gets cpu.max's share
# (its cgroup's cpu.stat, in the daemon's log) and is killed at the
# timeout while another request is served; after each, the daemon, its
# workers and a process outside live on and the next request is served.
# busybox sh and wget.
P=${KVS_PROBE:-/opt/kva/bin/kvs-probe}
D=${KVD_HOOKS:-/opt/kva/bin/kvarenad-hooks}
M=${KVD_MODEL:-/opt/kva/models/sandbox-guest.gguf}
T=${KVD_GUEST_TMP:-/tmp/kvd-guest}
PORT=${KVD_GUEST_PORT:-8077}
URL=http://127.0.0.1:$PORT
REPLY=$T/reply
pass=0
fail=0
mkdir -p "$T"
[ -d /opt/kva/bin ] && chmod 755 /opt/kva /opt/kva/bin
cat >"$T/tools.ini" <<INI
[sh]
exec = /bin/sh $P
pids = 32
memory = 64M
cpu = 0.25
# 15 s: under TCG at 0.25 cores, filling 64 MiB until the OOM took more
# than 8 s on a loaded host (the spin past the timeout waits this long)
timeout = 15s
INI
cat >"$T/kvarenad.conf" <<CONF
[server]
listen = 127.0.0.1:$PORT
[model]
path = $M
id = test
[kv]
backend = memfd
blocks = 128
toolwait_bpf = no
[tools]
enable = sh
policy = $T/tools.ini
max_rounds = 1
workdir_root = $T/work
CONF

# pids of the processes whose command line (words joined by blanks) matches
# the pattern $2 (busybox has no pgrep): one grep for $1's first word over
# every /proc/N/cmdline, then the pattern on the candidates
procs() {
	# shellcheck disable=SC2013 # /proc/N/cmdline: no blanks in the names
	for f in $(grep -lsF "${1%% *}" /proc/[0-9]*/cmdline); do
		tr '\0' ' ' 2>/dev/null <"$f" | grep -q "$2" && { p=${f#/proc/}; echo "${p%/cmdline}"; }
	done
}
alive() { [ -n "$(procs "$1" "$1")" ]; }
# the daemon's processes (itself, its spawner, its workers), one line
daemon_pids() { procs "$D" "^$D " | sort -n | tr '\n' ' '; }
ok() { pass=$((pass + 1)); echo "ok   $1: $2"; }
bad() {
	fail=$((fail + 1))
	echo "FAIL $1: $2"
	head -c 2000 "$T/out" 2>/dev/null | sed 's/^/     | /'
	echo
	tail -n 5 "$T/log" | sed 's/^/     log| /'
}
# chat OUT TEXT: POST a chat request (4 tokens at most), the body to OUT
chat() {
	wget -q -O "$1" --header 'Content-Type: application/json' \
		--post-data "{\"model\":\"test\",\"messages\":[{\"role\":\"user\",\"content\":\"$2\"}],\"max_tokens\":4,\"temperature\":0}" \
		"$URL/v1/chat/completions"
}
# call CMD: the next round's reply is one sh tool call running CMD
call() {
	printf '<tool_call>\n{"name": "sh", "arguments": {"command": "%s"}}\n</tool_call>' "$1" >"$REPLY"
}
field() { grep -o "\"$1\": *\"[^\"]*\"" "$T/out" | head -n 1 | sed 's/.*: *"//; s/"$//'; }
served() {
	chat "$T/ok" "hello" && grep -q '"completion_tokens": *[1-9]' "$T/ok" &&
		[ "$(daemon_pids)" = "$PIDS" ]
}
after() {
	if served; then ok "$1: served after" "a plain request answered, the daemon and its workers ($PIDS) unchanged"; else
		bad "$1: served after" "daemon pids $(daemon_pids), was $PIDS"; fi
}

read -r up0 _ </proc/uptime
echo "== escape suite through kvarenad (guest lane, cgroup v2 limits): kernel $(uname -r)"
KVD_TEST_REPLY_FILE=$REPLY "$D" --config "$T/kvarenad.conf" >"$T/log" 2>&1 &
KVD=$!
i=0
while [ $i -lt 600 ] && ! wget -q -O /dev/null "$URL/health" 2>/dev/null; do
	kill -0 "$KVD" 2>/dev/null || break
	sleep 0.2
	i=$((i + 1))
done
if ! wget -q -O /dev/null "$URL/health" 2>/dev/null; then
	bad "kvarenad starts" "not healthy"
	cat "$T/log"
	echo "== escape suite through kvarenad (guest lane): $pass passed, $fail failed"
	exit 1
fi
PIDS=$(daemon_pids)
ok "kvarenad starts" "healthy after $((i / 5)) s, processes $PIDS"
if grep -q "controller" "$T/log"; then bad "controllers" "$(grep controller "$T/log")"; else
	ok "controllers" "the daemon's policy load reports cpu, memory and pids enforced"; fi

# fork bomb: pids.max
call "$P forkbomb 5000"
chat "$T/out" "fork"
n=$(sed -n 's/.*after \([0-9]*\) processes.*/\1/p' "$T/out")
if [ "$(field exit_reason)" = exit ] && grep -q 'BLOCKED fork' "$T/out" && [ -n "$n" ] &&
	[ "$n" -lt 32 ]; then
	ok "fork bomb" "the reply reports it stopped by pids.max after $n processes"
else
	bad "fork bomb" "exit_reason $(field exit_reason)"
fi
after "fork bomb"

# memory bomb: OOM inside the tool's cgroup only
sleep 1000 &
OUTSIDE=$!
# what came before must be clean: the log is cleared after the bomb
if dmesg | grep -qE 'Oops|BUG:|WARNING:|general protection|KASAN|Call Trace'; then
	bad "kernel log before the memory bomb" "$(dmesg | grep -E 'Oops|BUG:|WARNING:' | head -n 3)"
fi
n0=$(dmesg | grep -c 'Memory cgroup out of memory')
call "$P membomb 1024"
chat "$T/out" "memory"
n1=$(dmesg | grep -c 'Memory cgroup out of memory')
if [ "$(field exit_reason)" = oom ] && grep -q '\[oom ' "$T/out" && kill -0 "$OUTSIDE" 2>/dev/null &&
	kill -0 "$KVD" 2>/dev/null && [ "$n1" -gt "$n0" ]; then
	ok "memory bomb" "the reply reports oom; OOM-killed inside its cgroup, the daemon and a process outside live on"
else
	bad "memory bomb" "exit_reason $(field exit_reason)"
fi
# the OOM report's stack dump would read as a kernel bug to the harness:
# checked to be the memory cgroup's OOM and nothing else, then cleared
if dmesg | grep -E 'Oops|BUG:|general protection|KASAN' | grep -q .; then
	bad "kernel log after the memory bomb" "$(dmesg | grep -E 'Oops|BUG:' | head -n 3)"
elif dmesg | grep 'Killed process' | grep -vqE '\((kvs-probe|sh)\)'; then
	bad "OOM victims" "$(dmesg | grep 'Killed process' | head -n 3)"
else
	dmesg -c >/dev/null
fi
kill "$OUTSIDE"
after "memory bomb"

# CPU: cpu.max 0.25 cores, seen by the probe and in the cgroup's cpu.stat
call "$P burn 3"
chat "$T/out" "burn"
cpu=$(sed -n 's/.*burn wall=[0-9.]* cpu=\([0-9.]*\).*/\1/p' "$T/out")
cms=$(grep ' tool=sh ' "$T/log" | tail -n 1 | sed -n 's/.* cpu_ms=\([0-9.]*\) .*/\1/p')
wms=$(grep ' tool=sh ' "$T/log" | tail -n 1 | sed -n 's/.* wall_ms=\([0-9.]*\) .*/\1/p')
if [ "$(field exit_reason)" = exit ] && [ -n "$cpu" ] && [ -n "$cms" ] &&
	awk -v c="$cpu" -v m="$cms" 'BEGIN { exit !(c < 1.5 && m > 0 && m < 1500) }'; then
	ok "cpu.max 0.25 cores" "3 s of spinning got ${cpu} s of CPU; the daemon's log: cpu_ms=$cms of wall_ms=$wms (cpu.stat)"
else
	bad "cpu.max 0.25 cores" "exit_reason $(field exit_reason) cpu ${cpu:-?} cpu_ms ${cms:-?}"
fi
after "cpu.max"

# CPU spin past the policy's timeout (15 s), another request served meanwhile
call "$P spin"
chat "$T/out" "spin" &
SPIN=$!
i=0
while [ $i -lt 100 ] && ! alive "$P spin"; do
	sleep 0.05
	i=$((i + 1))
done
if alive "$P spin" && served && alive "$P spin"; then
	ok "served while spinning" "another request answered while the spin ran"
else
	bad "served while spinning" "spin alive: $(alive "$P spin" && echo yes || echo no)"
fi
wait "$SPIN"
if [ "$(field exit_reason)" = timeout ] && grep -q '\[timeout ' "$T/out" && ! alive "$P spin"; then
	ok "CPU spin" "the reply reports the timeout; the cgroup was killed"
else
	bad "CPU spin" "exit_reason $(field exit_reason)"
fi
after "CPU spin"

left=0
for d in /sys/fs/cgroup/kvarena-sandbox/run-*; do
	[ -d "$d" ] && left=$((left + 1))
done
if [ "$left" = 0 ]; then ok "cgroups removed" "no run-* left"; else bad "cgroups removed" "$left left"; fi
runs=$(grep -c ' tool=sh ' "$T/log")
cgs=$(grep ' tool=sh ' "$T/log" | grep -c ' cgroup=[1-9]')
if [ "$runs" = 4 ] && [ "$cgs" = 4 ]; then ok "the daemon's log" "4 sh runs, each in a cgroup of its own"; else
	bad "the daemon's log" "$runs sh runs logged, $cgs with a cgroup"; fi

kill -TERM "$KVD"
wait "$KVD"
rc=$?
if [ "$rc" = 0 ] && [ -z "$(daemon_pids)" ]; then ok "SIGTERM" "kvarenad drained and exited 0"; else bad "SIGTERM" "exit $rc"; fi

read -r up1 _ </proc/uptime
echo "== escape suite through kvarenad (guest lane): $pass passed, $fail failed," \
	"$(awk -v a="$up0" -v b="$up1" 'BEGIN { printf "%.0f", b - a }') s"
[ "$fail" = 0 ]
