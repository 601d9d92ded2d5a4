#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install the Debian packages kvarena needs for a purpose, only those missing.
# Usage: scripts/deps.sh build|check|demo|bench|avx512-emu|all
set -euo pipefail

build=(gcc make pkg-config libcunit1-dev liburing-dev libnl-3-dev
       libnl-genl-3-dev libbpf-dev libelf-dev zlib1g-dev bpftool clang llvm
       systemtap-sdt-dev linux-headers-amd64 linux-headers-6.12-amd64
       libpcre2-dev libmicrohttpd-dev libjansson-dev libseccomp-dev libinih-dev
       libsystemd-dev libcurl4-openssl-dev libxxhash-dev
       libucx-dev libzmq3-dev libmsgpack-dev libssl-dev)
# node + npm run the official openai client against the API (check-api);
# a node already installed from elsewhere (e.g. NodeSource) is kept
command -v node >/dev/null && command -v npm >/dev/null || build+=(nodejs npm)
# systemd: its PID 1 and systemctl boot the sandbox's systemd guest
# (check-sandbox-guest runs the packaged unit under them)
guest=(qemu-system-x86 busybox-static cpio xz-utils kmod
       linux-image-amd64 linux-image-6.12-amd64 systemd)
check=(sparse linux-source-6.1 dkms valgrind python3-numpy python3-regex
       mandoc g++ node-ajv
       python3-torch libopenblas0-pthread gnuplot-nox fio
       ucx-utils python3-zmq python3-msgpack iproute2)
# make check-engine-avx512: Bochs (its Skylake-X model has AVX-512; bochs-term
# is the display plugin it runs headless with), a GRUB ISO, a 6.12 kernel
avx512_emu=(bochs bochs-term bochsbios vgabios grub-pc-bin grub-common xorriso
            mtools busybox-static cpio linux-image-6.12-amd64)

case "${1:-all}" in
build) want=("${build[@]}") ;;
demo) want=("${build[@]}" "${guest[@]}") ;;
check | bench) want=("${build[@]}" "${guest[@]}" "${check[@]}") ;;
avx512-emu) want=("${build[@]}" "${avx512_emu[@]}") ;;
all) want=("${build[@]}" "${guest[@]}" "${check[@]}" "${avx512_emu[@]}") ;;
*) echo "usage: $0 build|check|demo|bench|avx512-emu|all" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing+=("$p")
done
# the sandbox's MCP lane runs node; any node >= 18 with npm will do, so
# Debian's packages only where the machine has none
case "${1:-all}" in
check | bench | all)
	command -v node >/dev/null || missing+=(nodejs)
	command -v npm >/dev/null || missing+=(npm)
	;;
esac
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: need root to install packages (or install them yourself)" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
