// SPDX-License-Identifier: MIT
/*
 * hooks.c - the orchestrator's side of the remote room (hooks.h): the
 * listening socket remote worker hosts join through, the link processes'
 * command lines, the KV event publisher fed by the prefix cache, and the
 * load metrics under the names vLLM-fed routers read.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chan.h"
#include "hooks.h"
#include "internal.h"
#include "kvevents.h"
#include "log.h"
#include "worker.h"

#define LINK_LISTEN_FD 4	/* link.c's LISTEN_FD */

int kvd_remote_init(struct kvd *d, char *err, size_t errlen)
{
	const struct kvd_config *c = &d->cfg;
	int rc;

	d->remote_lfd = -1;
	d->remote_started_ns = kvd_now_ns();
	if (c->remote_prefill + c->remote_decode) {
		struct kvr_psk k;

		/* a bad key file stops the start, not each link */
		rc = kvr_psk_load(c->remote_secret_file, &k, err, errlen);
		memset(&k, 0, sizeof(k));
		if (rc)
			return rc;
		rc = kvr_listen(c->remote_listen, &d->remote_lfd, err, errlen);
		if (rc)
			return rc;
		kvd_log(KVD_LOG_INFO, "remote", "remote worker hosts join on %s (TLS 1.3, "
			"pre-shared key): %u prefill + %u decode slots", c->remote_listen,
			c->remote_prefill, c->remote_decode);
	}
	if (c->events_endpoint[0]) {
		struct kvr_events_params p = { 0 };
		char topic[256], host[64] = "kvarenad";

		gethostname(host, sizeof(host) - 1);
		if (c->events_topic[0])
			snprintf(topic, sizeof(topic), "%s", c->events_topic);
		else	/* llm-d's convention: kv@<instance>@<model> */
			snprintf(topic, sizeof(topic), "kv@%.64s@%.128s", host, c->model_id);
		p.endpoint = c->events_endpoint;
		p.replay_endpoint = c->events_replay[0] ? c->events_replay : NULL;
		p.topic = topic;
		p.block_size = d->geom.block_tokens;
		p.allow_remote = c->events_allow_remote;
		rc = kvr_events_open(&p, &d->kvev, err, errlen);
		if (rc)
			return rc;
		/* whatever a router knew of an earlier run of this instance */
		kvr_events_cleared(d->kvev);
		kvr_events_flush(d->kvev);
		kvd_log(KVD_LOG_INFO, "remote", "KV events on %s, topic %s%s%s", c->events_endpoint,
			topic, p.replay_endpoint ? ", replay on " : "",
			p.replay_endpoint ? p.replay_endpoint : "");
	}
	return 0;
}

void kvd_remote_fini(struct kvd *d)
{
	if (d->kvev) {
		kvr_events_cleared(d->kvev);
		kvr_events_close(d->kvev);
		d->kvev = NULL;
	}
	if (d->remote_lfd >= 0)
		close(d->remote_lfd);
	d->remote_lfd = -1;
}

uint32_t kvd_remote_slots(const struct kvd *d, uint32_t role)
{
	return role == KVD_ROLE_PREFILL ? d->cfg.remote_prefill : d->cfg.remote_decode;
}

void kvd_remote_exec(struct kvd *d, struct kvd_worker *w, int sock)
{
	char hb[16], to[16], ctx[16], batch[16], lv[4];
	const struct kvd_config *c = &d->cfg;
	const char *argv[] = { d->self_exe, "--remote-link", "--model", c->model_path,
			       "--secret-file", c->remote_secret_file, "--heartbeat-ms", hb,
			       "--timeout-ms", to, "--max-ctx", ctx, "--max-batch", batch,
			       "--tool-open", c->tool_open, "--tool-close", c->tool_close,
			       "--ucx-tls", c->remote_ucx_tls, "--ucx-devices",
			       c->remote_ucx_devices, "--log-level", lv, NULL };
	int s2, l2;

	(void)w;
	snprintf(hb, sizeof(hb), "%u", c->remote_heartbeat_ms);
	snprintf(to, sizeof(to), "%u", c->remote_timeout_ms);
	snprintf(ctx, sizeof(ctx), "%u", d->ctx_len);
	snprintf(batch, sizeof(batch), "%u", c->max_batch);
	snprintf(lv, sizeof(lv), "%d", c->log_level);
	if (d->remote_lfd < 0)
		return;
	/* out of the way first: either may sit on fd 3 or 4 */
	s2 = fcntl(sock, F_DUPFD_CLOEXEC, 10);
	l2 = fcntl(d->remote_lfd, F_DUPFD_CLOEXEC, 10);
	if (s2 < 0 || l2 < 0 || dup2(s2, KVD_WORKER_FD) < 0 || dup2(l2, LINK_LISTEN_FD) < 0)
		return;
	close_range(LINK_LISTEN_FD + 1, ~0u, 0);
	execv(d->self_exe, (char *const *)argv);
}

int kvd_worker_joinable(struct kvd *d, struct kvd_worker *w)
{
	uint64_t now = kvd_now_ns();

	if (!w->remote)
		return 1;
	if (w->state == W_READY) {
		w->joined_ns = now;
		return 1;
	}
	/* waiting for a host: since the start, or since the last one left */
	return now - (w->joined_ns > d->remote_started_ns ? w->joined_ns : d->remote_started_ns) <
	       (uint64_t)d->cfg.remote_join_grace_s * 1000000000ull;
}

void kvd_kvev_stored(struct kvd *d, uint64_t hash, uint64_t parent, const int32_t *tokens)
{
	if (d->kvev)
		kvr_events_stored(d->kvev, hash, parent, tokens);
}

void kvd_kvev_removed(struct kvd *d, uint64_t hash)
{
	if (d->kvev)
		kvr_events_removed(d->kvev, hash);
}

void kvd_kvev_flush(struct kvd *d)
{
	if (d->kvev)
		kvr_events_flush(d->kvev);
}

int kvd_router_metrics(struct kvd *d, char *buf, size_t len, uint32_t waiting,
		       uint32_t running, const struct kva_arena_info *ai)
{
	uint32_t evictable, total = ai->blocks_total, active;
	double usage, hit;

	/* cached blocks no conversation holds are free to a router: the
	 * next allocation reclaims them (vLLM counts its cached-free blocks
	 * as free the same way) */
	evictable = d->radix.n_evictable;	/* the radix index's unheld leaves */
	active = total - ai->blocks_free - evictable;
	if (active > total)
		active = total;
	usage = total ? (double)active / total : 0;
	hit = d->m.prompt_tokens ? (double)d->m.prefix_hit_tokens / d->m.prompt_tokens : 0;
	return snprintf(buf, len,
		"# HELP vllm:num_requests_waiting Requests waiting (vLLM's name, read by llm-d).\n"
		"# TYPE vllm:num_requests_waiting gauge\n"
		"vllm:num_requests_waiting{model_name=\"%s\"} %u\n"
		"# HELP vllm:num_requests_running Requests running (vLLM's name).\n"
		"# TYPE vllm:num_requests_running gauge\n"
		"vllm:num_requests_running{model_name=\"%s\"} %u\n"
		"# HELP vllm:kv_cache_usage_perc KV blocks in use, 1 = full (vLLM's name).\n"
		"# TYPE vllm:kv_cache_usage_perc gauge\n"
		"vllm:kv_cache_usage_perc{model_name=\"%s\"} %.6f\n"
		"# HELP vllm:gpu_cache_usage_perc The same, under vLLM's older name.\n"
		"# TYPE vllm:gpu_cache_usage_perc gauge\n"
		"vllm:gpu_cache_usage_perc{model_name=\"%s\"} %.6f\n"
		"# HELP vllm:cache_config_info The KV cache's shape (vLLM's name).\n"
		"# TYPE vllm:cache_config_info gauge\n"
		"vllm:cache_config_info{model_name=\"%s\",block_size=\"%u\",num_gpu_blocks=\"%u\"} 1\n"
		"# HELP dynamo_component_kvstats_active_blocks KV blocks in use (Dynamo's name).\n"
		"# TYPE dynamo_component_kvstats_active_blocks gauge\n"
		"dynamo_component_kvstats_active_blocks{dp_rank=\"0\"} %u\n"
		"# HELP dynamo_component_kvstats_total_blocks KV blocks in all (Dynamo's name).\n"
		"# TYPE dynamo_component_kvstats_total_blocks gauge\n"
		"dynamo_component_kvstats_total_blocks{dp_rank=\"0\"} %u\n"
		"# HELP dynamo_component_kvstats_gpu_cache_usage_percent KV usage, 0..1 (Dynamo's name).\n"
		"# TYPE dynamo_component_kvstats_gpu_cache_usage_percent gauge\n"
		"dynamo_component_kvstats_gpu_cache_usage_percent{dp_rank=\"0\"} %.6f\n"
		"# HELP dynamo_component_kvstats_gpu_prefix_cache_hit_rate Prompt tokens served "
		"from the prefix cache, 0..1 (Dynamo's name).\n"
		"# TYPE dynamo_component_kvstats_gpu_prefix_cache_hit_rate gauge\n"
		"dynamo_component_kvstats_gpu_prefix_cache_hit_rate{dp_rank=\"0\"} %.6f\n",
		d->cfg.model_id, waiting, d->cfg.model_id, running, d->cfg.model_id, usage,
		d->cfg.model_id, usage, d->cfg.model_id, d->geom.block_tokens, total, active, total,
		usage, hit);
}
