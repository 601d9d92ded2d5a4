#!/bin/sh
# SPDX-License-Identifier: MIT
# The systemd guest's checks (kva-check.service, after kvarenad.service;
# tests/sandbox/systemd-guest.sh): kvarenad runs under its packaged unit
# with systemd as PID 1. Prints run-guest.sh's markers and powers off.
# busybox sh.
export PATH=/opt/kva/bin:/usr/sbin:/usr/bin:/sbin:/bin
URL=http://127.0.0.1:8080
KEY=sk-systemd-test-key-0123456789
D=/var/lib/kva-test
SVC=/sys/fs/cgroup/system.slice/kvarenad.service
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $1: $2"; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2"; }
prop() { systemctl show -p "$1" --value kvarenad; }
# chat OUT TEXT [KEY]: a chat request, the body to OUT, wget's verdict
chat() {
	wget -q -O "$1" ${3:+--header "Authorization: Bearer $3"} \
		--header 'Content-Type: application/json' \
		--post-data "{\"model\":\"test\",\"messages\":[{\"role\":\"user\",\"content\":\"$2\"}],\"max_tokens\":4,\"temperature\":0}" \
		"$URL/v1/chat/completions" 2>"$1.err"
}

read -r up0 _ </proc/uptime
echo
echo "KVA-GUEST-START kernel=$(uname -r) uptime=$up0"
echo "== kvarenad through its packaged systemd unit: systemd $(systemctl --version | head -n 1 | cut -d' ' -f2), kernel $(uname -r)"

# up to 120 s of the guest's clock (each systemctl is slow under TCG)
end=$(($(cut -d. -f1 /proc/uptime) + 120))
i=0
while [ "$(cut -d. -f1 /proc/uptime)" -lt "$end" ] && [ "$(systemctl is-active kvarenad)" != active ]; do
	sleep 1
	i=$((i + 2))
done
st=$(systemctl is-active kvarenad)
MAIN=$(prop MainPID)
if [ "$st" = active ] && [ "$MAIN" -gt 0 ]; then
	ok "the unit starts" "active (Type=notify: READY once the workers loaded the model) after $((i / 2)) s, main pid $MAIN"
else
	bad "the unit starts" "state $st, result $(prop Result), $(prop NRestarts) restarts"
	systemctl status kvarenad 2>&1 | head -n 20 | sed 's/^/     | /'
	MAIN=
fi
if [ -n "$MAIN" ]; then
[ "$(id -u)" = 0 ] && cat /proc/"$MAIN"/status 2>/dev/null | grep -E '^(Uid|CapBnd)' | sed 's/^/     /'
if grep -q '^Uid:[[:space:]]0[[:space:]]' /proc/"$MAIN"/status && ! grep -q '^CapBnd:[[:space:]]000001ffffffffff' /proc/"$MAIN"/status; then
	ok "privileges" "root with the unit's capability bounding set"
else
	bad "privileges" "$(grep -E '^(Uid|CapBnd)' /proc/"$MAIN"/status | tr '\n' ' ')"
fi

# the daemon moved itself into a leaf of its delegated cgroup; the runs'
# parent is beside it, with the controllers
cg=$(sed -n 's/^0:://p' /proc/"$MAIN"/cgroup)
if [ "$cg" = /system.slice/kvarenad.service/daemon ] && [ -d "$SVC/tools" ] &&
	grep -qw memory "$SVC/tools/cgroup.subtree_control" &&
	grep -qw pids "$SVC/tools/cgroup.subtree_control" &&
	grep -qw cpu "$SVC/tools/cgroup.subtree_control"; then
	ok "delegated cgroup" "the daemon in $cg, tool runs under $SVC/tools (+cpu +memory +pids)"
else
	bad "delegated cgroup" "daemon in '$cg'; tools: $(cat "$SVC/tools/cgroup.subtree_control" 2>&1)"
fi
if grep -q "controller" "$D/kvarenad.log"; then
	bad "controllers" "$(grep controller "$D/kvarenad.log" | head -n 2)"
else
	ok "controllers" "the daemon's policy load reports cpu, memory and pids enforced"
fi

# the key is a credential: none in the configuration, required, accepted
if ! grep -q sk- /etc/kvarena/kvarenad.conf && ! chat "$D/noauth" hello &&
	grep -q 401 "$D/noauth.err" && chat "$D/auth" hello "$KEY" &&
	grep -q '"completion_tokens": *[1-9]' "$D/auth"; then
	ok "LoadCredential" "the key (a credential, not in kvarenad.conf) is required and accepted"
else
	bad "LoadCredential" "$(cat "$D/noauth.err" "$D/auth.err" 2>/dev/null | head -n 3)"
fi
wd=$(stat -c '%a %u' /var/lib/kvarenad/tools 2>/dev/null)
if [ "$wd" = "700 0" ]; then ok "workdir_root" "/var/lib/kvarenad/tools is root's, 0700"; else bad "workdir_root" "'$wd'"; fi

# a tool run: its cgroup under the service's, with the policy's limits
printf '<tool_call>\n{"name": "sh", "arguments": {"command": "/opt/kva/bin/kvs-probe burn 3"}}\n</tool_call>' >"$D/reply"
chat "$D/burn" burn "$KEY" &
CHAT=$!
run=
i=0
while [ $i -lt 400 ] && [ -z "$run" ]; do
	for r in "$SVC"/tools/run-*; do
		[ -d "$r" ] && grep -q . "$r/cgroup.procs" 2>/dev/null && run=$r
	done
	[ -z "$run" ] && sleep 0.05
	i=$((i + 1))
done
if [ -n "$run" ]; then
	mem=$(cat "$run/memory.max") pids=$(cat "$run/pids.max") cpu=$(cat "$run/cpu.max")
	if [ "$mem" = 67108864 ] && [ "$pids" = 32 ] && [ "$cpu" = "50000 100000" ]; then
		ok "the tool's cgroup" "${run#/sys/fs/cgroup}: memory.max $mem, pids.max $pids, cpu.max $cpu"
	else
		bad "the tool's cgroup" "${run#/sys/fs/cgroup}: memory.max $mem, pids.max $pids, cpu.max $cpu"
	fi
else
	bad "the tool's cgroup" "no run-* under $SVC/tools while the tool ran"
fi
wait "$CHAT"
cpu=$(sed -n 's/.*burn wall=[0-9.]* cpu=\([0-9.]*\).*/\1/p' "$D/burn")
# (TCG's clocks are loose: unthrottled, a 3 s spin gets ~3 s; 0.5 cores
# gave 1.75-2.31 s here)
if [ -n "$cpu" ] && awk -v c="$cpu" 'BEGIN { exit !(c < 2.7) }'; then
	ok "the tool ran" "3 s of spinning under cpu.max 0.5 got ${cpu} s of CPU"
else
	bad "the tool ran" "$(head -c 400 "$D/burn")"
fi

# stop: the drains, a clean exit, nothing of the tools left
t0=$(cut -d' ' -f1 /proc/uptime)
systemctl stop kvarenad
t1=$(cut -d' ' -f1 /proc/uptime)
res=$(prop Result) code=$(prop ExecMainStatus)
if [ "$(systemctl is-active kvarenad)" = inactive ] && [ "$res" = success ] && [ "$code" = 0 ] &&
	[ ! -d "$SVC" ]; then
	ok "systemctl stop" "drained and exited 0 in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s (TimeoutStopSec $(prop TimeoutStopUSec)); its cgroup tree is gone"
else
	bad "systemctl stop" "state $(systemctl is-active kvarenad), result $res, status $code, cgroup left: $([ -d "$SVC" ] && echo yes || echo no)"
fi
fi	# the unit started
if [ "$fail" != 0 ]; then
	echo "     the daemon's log:"
	tail -n 40 "$D/kvarenad.log" | sed 's/^/     log| /'
fi
echo "== kvarenad through its packaged systemd unit: $pass passed, $fail failed"

rc=0
[ "$fail" = 0 ] || rc=1
read -r up1 _ </proc/uptime
echo "KVA-GUEST-END rc=$rc uptime=$up1"
bad_k=$(dmesg | grep -E 'Oops|BUG:|WARNING:|general protection|KASAN|kernel BUG|Call Trace' | head -n 200)
n=0
[ -n "$bad_k" ] && n=$(printf '%s\n' "$bad_k" | wc -l)
echo "KVA-DMESG-BEGIN"
[ -n "$bad_k" ] && printf '%s\n' "$bad_k" | sed 's/^/KVA-DMESG| /'
echo "KVA-DMESG-END count=$n"
echo "KVA-GUEST-RC=$rc"
sync
poweroff -f
