// SPDX-License-Identifier: GPL-2.0
/*
 * The "kvarena" generic netlink family, for operators who hold no arena
 * fd: dumps of arenas and sessions (multi-part, resumable by id, so 10,000+
 * sessions stream in pages), the policy of an arena by id, and the
 * multicast group "events" (arena created/destroyed, pressure with ranked
 * victims, quota hit, session ended).  Validation is strict: attributes a
 * request may not carry are rejected with an extack message.
 *
 * Who may see what (Documentation/threat-model.md): everything here shows
 * every user's arenas, so every command and the multicast group need
 * CAP_NET_ADMIN in the initial user namespace; an arena's owner reads its
 * own arena through its fd.  The family is not network-namespace aware on
 * purpose: arenas are host memory, not a per-namespace resource, so it
 * answers only sockets of the initial network namespace (a container sees
 * no family), and the pids in events are as the initial pid namespace sees
 * them.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/version.h>
#include <net/genetlink.h>

#include "kva.h"

/*
 * What each request may carry, nothing else: strict validation rejects any
 * other attribute of the family ("Unsupported attribute") and any number
 * above KVA_NL_A_MAX ("Unknown attribute type").
 */
static const struct nla_policy kva_nl_get_policy[KVA_NL_A_MAX + 1] = {
	[KVA_NL_A_ARENA_ID] = NLA_POLICY_MIN(NLA_U32, 1),
};

static const struct nla_policy kva_nl_policy_set_policy[KVA_NL_A_MAX + 1] = {
	[KVA_NL_A_ARENA_ID] = NLA_POLICY_MIN(NLA_U32, 1),
	[KVA_NL_A_POLICY] = NLA_POLICY_MAX(NLA_U32, KVC_POLICY_COUNT - 1),
	[KVA_NL_A_LOW_WM] = { .type = NLA_U32 },
	[KVA_NL_A_HIGH_WM] = { .type = NLA_U32 },
	[KVA_NL_A_TTL_MS] = { .type = NLA_U32 },
};

static struct genl_family kva_genl;

enum { KVA_MCGRP_EVENTS };

static struct nlattr **kva_dump_attrs(struct netlink_callback *cb)
{
#if KERNEL_VERSION(6, 2, 0) > LINUX_VERSION_CODE
	return genl_dumpit_info(cb)->attrs;
#else
	return genl_dumpit_info(cb)->info.attrs;
#endif
}

static u32 kva_nla_u32(const struct nlattr *a)
{
	return a ? nla_get_u32(a) : 0;
}

static int kva_put_arena(struct sk_buff *skb, struct kva_arena *arena)
{
	struct kvc_arena *c = &arena->core;
	int ret = 0;

	mutex_lock(&arena->lock);
	if (nla_put_u32(skb, KVA_NL_A_ARENA_ID, arena->id) ||
	    nla_put_string(skb, KVA_NL_A_ARENA_NAME, arena->name) ||
	    nla_put_u32(skb, KVA_NL_A_TENANT_ID, arena->tenant->id) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_BYTES, arena->bytes,
			      KVA_NL_A_PAD) ||
	    nla_put_u32(skb, KVA_NL_A_BLOCK_SIZE, arena->block_size) ||
	    nla_put_s32(skb, KVA_NL_A_NUMA_NODE, arena->numa_node) ||
	    nla_put_u8(skb, KVA_NL_A_FD_OPEN, arena->fd_open) ||
	    nla_put_u32(skb, KVA_NL_A_DMABUF_ATTACHMENTS,
			READ_ONCE(arena->nattached)) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_EVENTS_POSTED,
			      READ_ONCE(arena->events_posted), KVA_NL_A_PAD) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_EVENTS_DROPPED,
			      READ_ONCE(arena->events_dropped), KVA_NL_A_PAD))
		ret = -EMSGSIZE;
	if (!ret && arena->fd_open &&
	    (nla_put_u32(skb, KVA_NL_A_BLOCKS_TOTAL, c->pool.nblocks) ||
	     nla_put_u32(skb, KVA_NL_A_BLOCKS_FREE, c->pool.nfree) ||
	     nla_put_u32(skb, KVA_NL_A_SESSIONS, c->nsessions) ||
	     nla_put_u64_64bit(skb, KVA_NL_A_SESSIONS_ENDED,
			       c->sessions_ended, KVA_NL_A_PAD) ||
	     nla_put_u32(skb, KVA_NL_A_POLICY, c->policy) ||
	     nla_put_u32(skb, KVA_NL_A_LOW_WM, c->low_wm) ||
	     nla_put_u32(skb, KVA_NL_A_HIGH_WM, c->high_wm) ||
	     nla_put_u32(skb, KVA_NL_A_TTL_MS, c->ttl_ms)))
		ret = -EMSGSIZE;
	mutex_unlock(&arena->lock);
	return ret;
}

static int kva_fill_arena(struct sk_buff *skb, struct kva_arena *arena,
			  u32 portid, u32 seq, int flags, u8 cmd)
{
	void *hdr = genlmsg_put(skb, portid, seq, &kva_genl, flags, cmd);

	if (!hdr)
		return -EMSGSIZE;
	if (kva_put_arena(skb, arena)) {
		genlmsg_cancel(skb, hdr);
		return -EMSGSIZE;
	}
	genlmsg_end(skb, hdr);
	return 0;
}

static int kva_nl_arena_get(struct sk_buff *skb, struct genl_info *info)
{
	struct kva_arena *arena;
	struct sk_buff *msg;
	int ret;

	if (!info->attrs[KVA_NL_A_ARENA_ID]) {
		NL_SET_ERR_MSG(info->extack, "ARENA_ID is required (or dump)");
		return -EINVAL;
	}
	msg = nlmsg_new(NLMSG_DEFAULT_SIZE, GFP_KERNEL);
	if (!msg)
		return -ENOMEM;
	arena = kva_arena_get_id(nla_get_u32(info->attrs[KVA_NL_A_ARENA_ID]));
	ret = arena ? kva_fill_arena(msg, arena, info->snd_portid,
				     info->snd_seq, 0, KVA_NL_CMD_ARENA_GET) :
		      -ENOENT;
	if (arena)
		kva_arena_put(arena);
	if (ret) {
		if (ret == -ENOENT)
			NL_SET_ERR_MSG_ATTR(info->extack,
					    info->attrs[KVA_NL_A_ARENA_ID],
					    "no arena with this id");
		nlmsg_free(msg);
		return ret;
	}
	return genlmsg_reply(msg, info);
}

/*
 * cb->args[0]: id of the last arena sent (ids only grow along the list).
 * Each arena is referenced and locked on its own, never under the list's
 * lock: a busy arena delays this dump only.
 */
static int kva_nl_arena_dump(struct sk_buff *skb, struct netlink_callback *cb)
{
	struct kva_arena *arena;
	int ret = 0;

	while (cb->args[0] < U32_MAX &&
	       (arena = kva_arena_get_next(cb->args[0] + 1))) {
		ret = kva_fill_arena(skb, arena, NETLINK_CB(cb->skb).portid,
				     cb->nlh->nlmsg_seq, NLM_F_MULTI,
				     KVA_NL_CMD_ARENA_GET);
		if (!ret)
			cb->args[0] = arena->id;
		kva_arena_put(arena);
		if (ret)
			break;
	}
	return ret && !skb->len ? ret : skb->len;
}

static int kva_put_session(struct sk_buff *skb, u32 arena_id,
			   const struct kva_session_info *si)
{
	if (nla_put_u32(skb, KVA_NL_A_ARENA_ID, arena_id) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_SESSION_ID, si->session_id,
			      KVA_NL_A_PAD) ||
	    nla_put_u32(skb, KVA_NL_A_STATE, si->state) ||
	    nla_put_u32(skb, KVA_NL_A_TOOL_CLASS, si->tool_class) ||
	    nla_put_u32(skb, KVA_NL_A_BLOCKS_HELD, si->blocks_held) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_EXPECTED_WAIT_US,
			      si->expected_wait_us, KVA_NL_A_PAD) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_COOKIE, si->cookie, KVA_NL_A_PAD) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_CREATED_NS, si->created_ns,
			      KVA_NL_A_PAD) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_STATE_SINCE_NS, si->state_since_ns,
			      KVA_NL_A_PAD) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_TRANSITIONS, si->transitions,
			      KVA_NL_A_PAD) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_IDLE_BLOCK_US, si->idle_block_us,
			      KVA_NL_A_PAD) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_IDLE_BYTE_SEC, si->idle_byte_sec,
			      KVA_NL_A_PAD) ||
	    nla_put_u32(skb, KVA_NL_A_TIER, si->tier))
		return -EMSGSIZE;
	return 0;
}

/* Sessions of one arena from slot *cursor on; arena lock held. */
static int kva_dump_arena_sessions(struct sk_buff *skb,
				   struct netlink_callback *cb,
				   struct kva_arena *arena, long *cursor)
{
	struct kva_session_info si;
	struct kvc_session *s;
	u32 next = *cursor;
	u64 now = ktime_get_ns();
	void *hdr;

	while ((s = kvc_session_next(&arena->core, &next))) {
		kvc_session_info(&arena->core, s->id, now, &si);
		hdr = genlmsg_put(skb, NETLINK_CB(cb->skb).portid,
				  cb->nlh->nlmsg_seq, &kva_genl, NLM_F_MULTI,
				  KVA_NL_CMD_SESSION_GET);
		if (!hdr)
			return -EMSGSIZE;
		if (kva_put_session(skb, arena->id, &si)) {
			genlmsg_cancel(skb, hdr);
			return -EMSGSIZE;
		}
		genlmsg_end(skb, hdr);
		*cursor = next;
	}
	return 0;
}

/*
 * cb->args[0]: the arena being dumped (0: not started), args[1]: the slot
 * cursor in it, args[2]: the arena filter (0: all).
 */
static int kva_nl_session_dump(struct sk_buff *skb, struct netlink_callback *cb)
{
	struct nlattr **attrs = kva_dump_attrs(cb);
	struct kva_arena *arena;
	int ret = 0;

	if (!cb->args[0] && attrs[KVA_NL_A_ARENA_ID])
		cb->args[2] = nla_get_u32(attrs[KVA_NL_A_ARENA_ID]);
	if (cb->args[2] && cb->args[0] < cb->args[2])
		cb->args[0] = cb->args[2];
	while (cb->args[0] <= U32_MAX &&
	       (arena = kva_arena_get_next(cb->args[0]))) {
		bool done = false;

		if (cb->args[2] && arena->id != cb->args[2]) {
			kva_arena_put(arena);
			break;
		}
		if (arena->id != cb->args[0]) {
			cb->args[0] = arena->id;
			cb->args[1] = 0;
		}
		mutex_lock(&arena->lock);
		if (arena->fd_open)
			ret = kva_dump_arena_sessions(skb, cb, arena,
						      &cb->args[1]);
		mutex_unlock(&arena->lock);
		if (!ret) {
			done = arena->id == U32_MAX;
			cb->args[0] = (u64)arena->id + 1;
			cb->args[1] = 0;
		}
		kva_arena_put(arena);
		if (ret || done)
			break;
	}
	return ret && !skb->len ? ret : skb->len;
}

static int kva_nl_policy_set(struct sk_buff *skb, struct genl_info *info)
{
	struct nlattr **a = info->attrs;
	struct kva_arena *arena;
	int ret;

	if (!a[KVA_NL_A_ARENA_ID] || !a[KVA_NL_A_POLICY]) {
		NL_SET_ERR_MSG(info->extack, "ARENA_ID and POLICY are required");
		return -EINVAL;
	}
	arena = kva_arena_get_id(nla_get_u32(a[KVA_NL_A_ARENA_ID]));
	ret = -ENOENT;
	if (arena) {
		mutex_lock(&arena->lock);
		ret = arena->fd_open ?
		      kvc_policy_set(&arena->core,
				     nla_get_u32(a[KVA_NL_A_POLICY]),
				     kva_nla_u32(a[KVA_NL_A_LOW_WM]),
				     kva_nla_u32(a[KVA_NL_A_HIGH_WM]),
				     kva_nla_u32(a[KVA_NL_A_TTL_MS])) :
		      -ENOENT;
		mutex_unlock(&arena->lock);
		kva_arena_put(arena);
	}
	if (ret == -ENOENT)
		NL_SET_ERR_MSG_ATTR(info->extack, a[KVA_NL_A_ARENA_ID],
				    "no live arena with this id");
	else if (ret)
		NL_SET_ERR_MSG(info->extack,
			       "watermarks: need low_wm <= high_wm <= blocks");
	return ret;
}

/*
 * Every op takes its own references and locks (the arena list, then one
 * arena), so the family runs its ops in parallel: none of them holds the
 * genetlink-wide genl_mutex, which every non-parallel family's requests
 * wait for, while it waits for a busy arena.
 */
static const struct genl_ops kva_nl_ops[] = {
	{
		/* Names, tenants and usage of everyone's arenas: operators. */
		.cmd = KVA_NL_CMD_ARENA_GET,
		.doit = kva_nl_arena_get,
		.dumpit = kva_nl_arena_dump,
		.policy = kva_nl_get_policy,
		.maxattr = KVA_NL_A_MAX,
		.flags = GENL_ADMIN_PERM,
	},
	{
		/* Sessions carry runtimes' cookies: operators only. */
		.cmd = KVA_NL_CMD_SESSION_GET,
		.dumpit = kva_nl_session_dump,
		.policy = kva_nl_get_policy,
		.maxattr = KVA_NL_A_MAX,
		.flags = GENL_ADMIN_PERM,
	},
	{
		.cmd = KVA_NL_CMD_POLICY_SET,
		.doit = kva_nl_policy_set,
		.policy = kva_nl_policy_set_policy,
		.maxattr = KVA_NL_A_MAX,
		.flags = GENL_ADMIN_PERM,
	},
};

static const struct genl_multicast_group kva_nl_mcgrps[] = {
	[KVA_MCGRP_EVENTS] = {
		.name = KVA_GENL_MCGRP_EVENTS,
		.flags = GENL_MCAST_CAP_NET_ADMIN,	/* events name pids */
	},
};

static struct genl_family kva_genl __ro_after_init = {
	.name = KVA_GENL_NAME,
	.version = KVA_GENL_VERSION,
	.maxattr = KVA_NL_A_MAX,
	.module = THIS_MODULE,
	.parallel_ops = true,
	.ops = kva_nl_ops,
	.n_ops = ARRAY_SIZE(kva_nl_ops),
	/* resv_start_op 0: reserved header fields are checked for every op */
	.mcgrps = kva_nl_mcgrps,
	.n_mcgrps = ARRAY_SIZE(kva_nl_mcgrps),
};

static bool kva_nl_listening(void)
{
	return genl_has_listeners(&kva_genl, &init_net, KVA_MCGRP_EVENTS);
}

static void kva_nl_send(struct sk_buff *msg)
{
	genlmsg_multicast(&kva_genl, msg, 0, KVA_MCGRP_EVENTS, GFP_KERNEL);
}

static int kva_put_victim(struct sk_buff *skb, const struct kva_victim *v)
{
	struct nlattr *nest = nla_nest_start(skb, KVA_NL_A_VICTIM);

	if (!nest ||
	    nla_put_u64_64bit(skb, KVA_NL_A_SESSION_ID, v->session_id,
			      KVA_NL_A_PAD) ||
	    nla_put_u32(skb, KVA_NL_A_STATE, v->state) ||
	    nla_put_u32(skb, KVA_NL_A_BLOCKS_HELD, v->blocks_held) ||
	    nla_put_u32(skb, KVA_NL_A_TOOL_CLASS, v->tool_class) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_SCORE, v->score, KVA_NL_A_PAD) ||
	    nla_put_u64_64bit(skb, KVA_NL_A_IDLE_NS, v->idle_ns, KVA_NL_A_PAD))
		return -EMSGSIZE;
	nla_nest_end(skb, nest);
	return 0;
}

void kva_netlink_event(const struct kva_event *ev, u64 dropped)
{
	struct sk_buff *msg;
	void *hdr;
	u32 i;

	if (!kva_nl_listening())
		return;
	msg = genlmsg_new(NLMSG_DEFAULT_SIZE, GFP_KERNEL);
	if (!msg)
		return;
	hdr = genlmsg_put(msg, 0, 0, &kva_genl, 0, KVA_NL_CMD_EVENT);
	if (!hdr ||
	    nla_put_u32(msg, KVA_NL_A_EVENT_TYPE, ev->type) ||
	    nla_put_u32(msg, KVA_NL_A_ARENA_ID, ev->arena_id) ||
	    nla_put_u64_64bit(msg, KVA_NL_A_EVENT_SEQ, ev->seq, KVA_NL_A_PAD) ||
	    nla_put_u64_64bit(msg, KVA_NL_A_TIME_NS, ev->time_ns,
			      KVA_NL_A_PAD) ||
	    nla_put_u64_64bit(msg, KVA_NL_A_SESSION_ID, ev->session_id,
			      KVA_NL_A_PAD) ||
	    nla_put_u32(msg, KVA_NL_A_TENANT_ID, ev->tenant_id) ||
	    nla_put_u32(msg, KVA_NL_A_BLOCKS_FREE, ev->blocks_free) ||
	    nla_put_u32(msg, KVA_NL_A_LOW_WM, ev->low_wm) ||
	    nla_put_u32(msg, KVA_NL_A_REQUESTED, ev->requested) ||
	    nla_put_u32(msg, KVA_NL_A_PID, ev->pid) ||
	    nla_put_u64_64bit(msg, KVA_NL_A_DROPPED, dropped, KVA_NL_A_PAD))
		goto fail;
	for (i = 0; i < ev->nvictims && i < KVA_EVENT_MAX_VICTIMS; i++)
		if (kva_put_victim(msg, &ev->victims[i]))
			goto fail;
	genlmsg_end(msg, hdr);
	kva_nl_send(msg);
	return;
fail:
	nlmsg_free(msg);
}

void kva_netlink_arena(const struct kva_arena *arena, bool created)
{
	struct sk_buff *msg;
	void *hdr;

	if (!kva_nl_listening())
		return;
	msg = genlmsg_new(NLMSG_DEFAULT_SIZE, GFP_KERNEL);
	if (!msg)
		return;
	hdr = genlmsg_put(msg, 0, 0, &kva_genl, 0,
			  created ? KVA_NL_CMD_ARENA_NEW : KVA_NL_CMD_ARENA_DEL);
	if (!hdr ||
	    nla_put_u32(msg, KVA_NL_A_ARENA_ID, arena->id) ||
	    nla_put_string(msg, KVA_NL_A_ARENA_NAME, arena->name) ||
	    nla_put_u32(msg, KVA_NL_A_TENANT_ID, arena->tenant->id) ||
	    nla_put_u64_64bit(msg, KVA_NL_A_BYTES, arena->bytes,
			      KVA_NL_A_PAD)) {
		nlmsg_free(msg);
		return;
	}
	genlmsg_end(msg, hdr);
	kva_nl_send(msg);
}

int kva_netlink_init(void)
{
	return genl_register_family(&kva_genl);
}

void kva_netlink_exit(void)
{
	genl_unregister_family(&kva_genl);
}
