#!/bin/sh
# SPDX-License-Identifier: MIT
# rdinit of the systemd guest (tests/sandbox/systemd-guest.sh): lays out
# /etc (units, configuration, the key, users) from /opt/kva/sd, puts
# kvarenad where the packaged unit looks for it, and execs systemd as
# PID 1. busybox sh.
export PATH=/opt/kva/bin:/usr/sbin:/usr/bin:/sbin:/bin
mkdir -p /etc /lib/systemd/system /usr/local/bin /var/lib/kva-test /run /tmp /root
cp -a /opt/kva/sd/etc/. /etc/
cp -a /opt/kva/sd/lib/. /lib/systemd/system/
ln -sf /opt/kva/bin/kvarenad-hooks /usr/local/bin/kvarenad
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >/etc/passwd
printf 'root:x:0:\nkvarena:x:990:\nnogroup:x:65534:\n' >/etc/group
printf 'ID=kva-guest\nNAME=kvarena test guest\n' >/etc/os-release
: >/etc/machine-id
rm -f /etc/mtab
exec /opt/kva/bin/systemd
