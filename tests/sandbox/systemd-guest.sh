#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The packaged systemd unit, for real (issue 36.7): a Debian 6.12 guest
# boots with systemd as PID 1 (rdinit= the shim systemd/sd-init.sh, which
# lays out /etc and execs systemd), systemd starts kvarenad through
# packaging/kvarenad.service as shipped (root with a capability bounding
# set, Delegate=yes, ProtectControlGroups=no, the API key as a
# LoadCredential= credential; a drop-in adds only the test hook's reply
# file and a log file), and the unit kva-check.service runs
# systemd/check.sh: the key works and is needed, a tool run gets its own
# cgroup under the service's delegated subtree with the policy's
# memory.max, pids.max and cpu.max, and systemctl stop drains the daemon
# to a clean exit within TimeoutStopSec. check.sh prints the harness's
# markers and powers the guest off.
#   tests/sandbox/systemd-guest.sh   (make check-sandbox-guest runs it)
set -euo pipefail
cd "$(dirname "$0")/../.."
for f in build/daemon/tests/kvarenad-hooks build/sandbox/kvs-probe \
	build/daemon/tests/sandbox-guest.gguf /lib/systemd/systemd /bin/systemctl; do
	[ -e "$f" ] || { echo "systemd guest: $f missing (make check-sandbox-guest builds it)" >&2; exit 2; }
done
S=$(mktemp -d build/sandbox/systemd.XXXXXX)
trap 'rm -rf "$S"' EXIT
# what sd-init.sh copies into place: /etc, and the few stock targets
# systemd's default dependencies name (empty: none of their wants)
mkdir -p "$S/etc/systemd/system/kvarenad.service.d" "$S/etc/kvarena/keys" "$S/lib"
# KVS_SYSTEMD_UNIT: another unit file to try (an older one, to see it fail)
cp "${KVS_SYSTEMD_UNIT:-packaging/kvarenad.service}" "$S/etc/systemd/system/kvarenad.service"
sed -i 's|^#LoadCredential=team-a.keys:|LoadCredential=team-a.keys:|' \
	"$S/etc/systemd/system/kvarenad.service"
grep -q '^LoadCredential=team-a.keys:/etc/kvarena/keys/team-a$' \
	"$S/etc/systemd/system/kvarenad.service" ||
	printf '[Service]\nLoadCredential=team-a.keys:/etc/kvarena/keys/team-a\n' \
		>"$S/etc/systemd/system/kvarenad.service.d/credential.conf"
cp tests/sandbox/systemd/test.conf "$S/etc/systemd/system/kvarenad.service.d/"
cp tests/sandbox/systemd/kva-check.service tests/sandbox/systemd/default.target \
	"$S/etc/systemd/system/"
cp tests/sandbox/systemd/kvarenad.conf tests/sandbox/systemd/tools.ini "$S/etc/kvarena/"
echo 'sk-systemd-test-key-0123456789' >"$S/etc/kvarena/keys/team-a"
chmod 600 "$S/etc/kvarena/keys/team-a"
for u in sysinit.target basic.target sockets.target paths.target timers.target slices.target \
	local-fs.target swap.target shutdown.target multi-user.target network.target \
	system.slice; do
	[ -e "/lib/systemd/system/$u" ] && cp "/lib/systemd/system/$u" "$S/lib/"
done
mkdir -p build/sandbox
# (busybox wget -T crashed twice here: no -T; the guest's timeout bounds it)
tests/vm/run-guest.sh --kver "${KVS_GUEST_KVER:-612}" --timeout "${KVS_GUEST_TIMEOUT:-400}" \
	--mem 1024 --log build/sandbox/systemd-guest.log \
	--bin /lib/systemd/systemd --bin /bin/systemctl \
	--bin build/daemon/tests/kvarenad-hooks --bin build/sandbox/kvs-probe \
	--bin tests/sandbox/systemd/sd-init.sh --bin tests/sandbox/systemd/check.sh \
	--file build/daemon/tests/sandbox-guest.gguf:models/sandbox-guest.gguf \
	--file "$S/etc:sd/etc" --file "$S/lib:sd/lib" \
	--append 'rdinit=/opt/kva/bin/sd-init.sh systemd.show_status=0' \
	--cmd 'echo "run.sh is not used: systemd is PID 1"' || exit $?
