#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python binding on the kernel backend: lib/python/tests with
# KVARENA_TEST_BACKEND=kernel in a QEMU guest running kernel VERSION, with
# Debian's python3 and numpy packed in (only the files the suite imports,
# listed by python_closure.py on the host); then every byte the module
# pinned must be back and the module must unload.
# Usage: python-guest.sh VERSION LIBSO          (make check-python-guest)
set -euo pipefail
cd "$(dirname "$0")/../.."

kver=$1 libso=$2
py=/usr/bin/python3
ko=build/kmod/$kver/kvarena.ko
for f in "$ko" "$libso" "$py"; do
	[ -e "$f" ] || { echo "python-guest: $f missing (make modules-guest lib)" >&2; exit 2; }
done

# The closure: every module file and shared library the suite loads here.
list=build/tests/python-guest.files
mkdir -p build/tests
KVARENA_LIB=$PWD/$libso PYTHONPATH=lib/python:/usr/lib/python3/dist-packages \
	"$py" -S tests/lib/python_closure.py >"$list"
files=()
while IFS= read -r f; do
	files+=(--file "$f:$f")
done <"$list"

# No `python -m unittest` (runpy is not in the closure): the same discovery.
run='import sys, unittest
t = unittest.defaultTestLoader.discover("/opt/kva/python/tests")
sys.exit(not unittest.TextTestRunner(verbosity=2).run(t).wasSuccessful())'
sysfs=/sys/class/misc/kvarena
echo "== python binding over kvarena.ko on $kver ($(wc -l <"$list") files packed) =="
start=$(date +%s)
rc=0
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin "$libso" \
	--file lib/python:python "${files[@]}" \
	--timeout "${KT_GUEST_TIMEOUT:-600}" --mem 1024 \
	--log "build/tests/python-guest-$kver.log" \
	--cmd "modprobe kvarena max_pinned_mb=64 || exit 90" \
	--cmd "export KVARENA_TEST_BACKEND=kernel KVARENA_LIB=/opt/kva/bin/$(basename "$libso")" \
	--cmd "export PYTHONPATH=/opt/kva/python:/usr/lib/python3/dist-packages PYTHONDONTWRITEBYTECODE=1" \
	--cmd "$(readlink -f $py) -S -c '$run' || exit 91" \
	--cmd "p=\$(cat $sysfs/pinned_bytes) a=\$(cat $sysfs/arenas) s=\$(cat $sysfs/sessions)" \
	--cmd "echo \"after: pinned_bytes \$p arenas \$a sessions \$s\"" \
	--cmd "[ \"\$p\" = 0 ] && [ \"\$a\" = 0 ] && [ \"\$s\" = 0 ] || exit 92" \
	--cmd "rmmod kvarena || exit 93" || rc=$?
echo "== python binding over kvarena.ko on $kver: exit $rc, $(($(date +%s) - start)) s =="
exit "$rc"
