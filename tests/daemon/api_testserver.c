// SPDX-License-Identifier: MIT
/*
 * api_testserver.c - the HTTP layer (daemon/api/) over the scripted
 * orchestrator (scripted_kvd.c), as a server the API suites drive. It
 * calls the api.h functions the way kvarenad's main() does: start, reload
 * the keys on SIGHUP, drain on SIGTERM.
 *
 * usage: kvd-api-testserver [--listen ADDR] [--port N] [--port-file F]
 *        [--keys FILE] [--allow-remote] [--max-body BYTES]
 *        [--max-conn N] [--timeout S] [--drain S] [--context BYTES]
 *        [--model ID] [--debug] [--server-tools] [--cors ORIGIN]...
 *        [--host NAME]... [--responses-max N] [--responses-max-bytes B]
 *        [--max-conn-per-ip N] [--metrics-key KEY]... [--chat-template FAMILY]
 * Keys file: one tenant per line, "NAME ID KEY [KEY...]"; # comments.
 * SIGUSR1 toggles readiness (GET /health 200 <-> 503). --server-tools: the
 * scripted orchestrator declares a server-side tool (scripted_kvd.c).
 * --chat-template: render as that model family (daemon/chat; chatml).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "api.h"
#include "log.h"
#include "scripted_kvd.h"

#define MAX_T 64
#define MAX_K 8

struct keys {
	struct kvd_api_tenant t[MAX_T];
	char *names[MAX_T];
	char *keys[MAX_T][MAX_K];
	size_t n;
};

static void keys_free(struct keys *k)
{
	for (size_t i = 0; i < k->n; i++) {
		free(k->names[i]);
		for (size_t j = 0; j < k->t[i].n_keys; j++)
			free(k->keys[i][j]);
	}
	k->n = 0;
}

static int keys_load(const char *path, struct keys *k)
{
	FILE *f = fopen(path, "r");
	char line[2048];

	memset(k, 0, sizeof(*k));
	if (!f) {
		fprintf(stderr, "testserver: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f) && k->n < MAX_T) {
		char *save, *name = strtok_r(line, " \t\n", &save), *id, *key;

		if (!name || name[0] == '#')
			continue;
		id = strtok_r(NULL, " \t\n", &save);
		if (!id)
			continue;
		k->names[k->n] = strdup(name);
		k->t[k->n].name = k->names[k->n];
		k->t[k->n].id = (uint32_t)strtoul(id, NULL, 10);
		while ((key = strtok_r(NULL, " \t\n", &save)) && k->t[k->n].n_keys < MAX_K)
			k->keys[k->n][k->t[k->n].n_keys++] = strdup(key);
		k->t[k->n].keys = (const char *const *)k->keys[k->n];
		k->n++;
	}
	fclose(f);
	return 0;
}

int main(int argc, char **argv)
{
	struct kvd_api_config c;
	struct kvd_api *api;
	struct keys keys = { 0 };
	const char *keys_path = NULL, *port_file = NULL, *model = "kvarena-test", *family = NULL;
	uint32_t context = 1u << 20;
	char err[512];
	sigset_t set;
	struct rlimit rl;
	struct kvd *d;
	int sig, ready = 1, server_tools = 0;
	const char *cors[8], *hosts[8], *mkeys[4];

	kvd_api_config_defaults(&c);
	c.port = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--server-tools")) {
			server_tools = 1;
			continue;
		}
		if (!strcmp(a, "--allow-remote")) {
			c.allow_remote = 1;
			continue;
		}
		if (!strcmp(a, "--debug")) {
			kvd_log_set_level(KVD_LOG_DEBUG);
			continue;
		}
		if (!v) {
			fprintf(stderr, "testserver: %s needs a value\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--listen"))
			c.listen_addr = v;
		else if (!strcmp(a, "--port"))
			c.port = (uint16_t)atoi(v);
		else if (!strcmp(a, "--port-file"))
			port_file = v;
		else if (!strcmp(a, "--keys"))
			keys_path = v;
		else if (!strcmp(a, "--max-body"))
			c.max_body = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--max-conn"))
			c.max_connections = (unsigned)atoi(v);
		else if (!strcmp(a, "--max-conn-per-ip"))
			c.max_connections_per_ip = (unsigned)atoi(v);
		else if (!strcmp(a, "--metrics-key") && c.n_metrics_keys < 4)
			mkeys[c.n_metrics_keys++] = v;
		else if (!strcmp(a, "--timeout"))
			c.conn_timeout_s = (unsigned)atoi(v);
		else if (!strcmp(a, "--drain"))
			c.drain_timeout_s = (unsigned)atoi(v);
		else if (!strcmp(a, "--context"))
			context = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--model"))
			model = v;
		else if (!strcmp(a, "--chat-template"))
			family = v;
		else if (!strcmp(a, "--cors") && c.n_cors_origins < 8)
			cors[c.n_cors_origins++] = v;
		else if (!strcmp(a, "--host") && c.n_allowed_hosts < 8)
			hosts[c.n_allowed_hosts++] = v;
		else if (!strcmp(a, "--responses-max"))
			c.responses_max = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--responses-max-bytes"))
			c.responses_max_bytes = strtoull(v, NULL, 10);
		else {
			fprintf(stderr, "testserver: unknown option %s\n", a);
			return 2;
		}
	}
	/* a thousand connections need a thousand descriptors and more */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < 4096) {
		rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (keys_path && keys_load(keys_path, &keys))
		return 1;
	c.metrics_keys = mkeys;
	c.cors_origins = cors;
	c.allowed_hosts = hosts;
	c.tenants = keys.t;
	c.n_tenants = keys.n;
	d = scripted_kvd_new(model, context);
	if (!d)
		return 1;
	scripted_kvd_set_server_tools(d, server_tools);
	if (family && scripted_kvd_set_family(d, family)) {
		fprintf(stderr, "testserver: no chat family %s\n", family);
		scripted_kvd_free(d);
		return 1;
	}
	/* signals are taken by this thread only (sigwait below) */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (kvd_api_start(d, &c, &api, err, sizeof(err))) {
		fprintf(stderr, "testserver: %s\n", err);
		keys_free(&keys);
		scripted_kvd_free(d);
		return 1;
	}
	keys_free(&keys);
	if (port_file) {
		FILE *f = fopen(port_file, "w");

		if (f) {
			fprintf(f, "%u\n", (unsigned)kvd_api_port(api));
			fclose(f);
		}
	}
	printf("listening on port %u\n", (unsigned)kvd_api_port(api));
	fflush(stdout);
	for (;;) {
		if (sigwait(&set, &sig))
			continue;
		if (sig == SIGHUP && keys_path) {
			if (!keys_load(keys_path, &keys) &&
			    kvd_api_set_tenants(api, keys.t, keys.n, err, sizeof(err)))
				kvd_log(KVD_LOG_ERR, "testserver", "reload: %s", err);
			keys_free(&keys);
		} else if (sig == SIGUSR1) {
			ready = !ready;
			scripted_kvd_set_ready(d, ready);
		} else if (sig == SIGTERM || sig == SIGINT) {
			break;
		}
	}
	kvd_api_stop(api);
	scripted_kvd_free(d);
	return 0;
}
