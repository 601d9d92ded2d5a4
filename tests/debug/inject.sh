#!/usr/bin/env bash
# Put one known bug into a scratch copy of the module sources, to prove that
# check-debug catches it (see Documentation/hardening.md):
#   uaf   KASAN: ARENA_INFO reads a kmalloc'ed word after kfree
#   leak  kmemleak: ARENA_INFO leaks a 128-byte kmalloc (a static keeps only the last)
#   lock  lockdep: ARENA_INFO takes arena->lock and att_lock in both orders
#   odebug DEBUG_OBJECTS: ARENA_INFO frees an armed timer
# Usage: inject.sh uaf|leak|lock|odebug SRC_COPY_DIR
set -euo pipefail
kind=$1
f=$2/kmod/arena_ops.c
[ -f "$f" ] || { echo "inject: $f missing" >&2; exit 2; }
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
	anchor='	arg = (struct kva_arena_info){ .size = usize };'
	code='	{ struct timer_list *t = kzalloc(sizeof(*t), GFP_KERNEL); if (t) { timer_setup(t, NULL, 0); mod_timer(t, jiffies + 100 * HZ); kfree(t); } } /* INJECTED */' ;;
*) echo "inject: unknown kind '$kind' (uaf|leak|lock|odebug)" >&2; exit 2 ;;
esac
grep -qF "$anchor" "$f" || { echo "inject: anchor not found in $f" >&2; exit 2; }
awk -v a="$anchor" -v c="$code" '{ print } $0 == a && !done { print c; done = 1 }' "$f" >"$f.new"
mv "$f.new" "$f"
grep -q INJECTED "$f"
echo "inject: $kind bug put into $f"
