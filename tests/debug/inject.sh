#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Put one known bug into a scratch copy of the module sources, to prove that
# check-debug catches it (see Documentation/hardening.md):
#   uaf   KASAN: ARENA_INFO reads a kmalloc'ed word after kfree
#   leak  kmemleak: ARENA_INFO leaks a 128-byte kmalloc (a static keeps only the last)
#   lock  lockdep: ARENA_INFO takes arena->lock and att_lock in both orders
#   odebug DEBUG_OBJECTS: arena creation frees a delayed work whose timer is armed
# Usage: inject.sh uaf|leak|lock|odebug SRC_COPY_DIR
set -euo pipefail
kind=$1
f=$2/kmod/arena_ops.c
case $kind in
uaf)
	anchor='	arg = (struct kva_arena_info){ .size = usize };'
	code='	{ u32 *p = kmalloc(16, GFP_KERNEL); if (p) { kfree(p); arg.flags = READ_ONCE(p[1]); } } /* INJECTED */' ;;
leak)
	anchor='	ret = kva_arena_lock(arena, nowait);'
	code='	{ static void *kva_injected; kva_injected = kmalloc(128, GFP_KERNEL); } /* INJECTED */' ;;
lock)
	anchor='	arg = (struct kva_arena_info){ .size = usize };'
	code='	mutex_lock(&arena->lock); mutex_lock(&arena->att_lock); mutex_unlock(&arena->att_lock); mutex_unlock(&arena->lock); mutex_lock(&arena->att_lock); mutex_lock(&arena->lock); mutex_unlock(&arena->lock); mutex_unlock(&arena->att_lock); /* INJECTED */' ;;
odebug)
	# (a timer with a NULL function is never armed on 6.1.y: use a real one)
	f=$2/kmod/events.c
	anchor='	INIT_DELAYED_WORK(&arena->monitor, kva_monitor_fn);'
	code='	{ struct delayed_work *w = kzalloc(sizeof(*w), GFP_KERNEL); if (w) { INIT_DELAYED_WORK(w, kva_monitor_fn); schedule_delayed_work(w, 100 * HZ); kfree(w); } } /* INJECTED */' ;;
*) echo "inject: unknown kind '$kind' (uaf|leak|lock|odebug)" >&2; exit 2 ;;
esac
[ -f "$f" ] || { echo "inject: $f missing" >&2; exit 2; }
grep -qF "$anchor" "$f" || { echo "inject: anchor not found in $f" >&2; exit 2; }
awk -v a="$anchor" -v c="$code" '{ print } $0 == a && !done { print c; done = 1 }' "$f" >"$f.new"
mv "$f.new" "$f"
grep -q INJECTED "$f"
echo "inject: $kind bug put into $f"
