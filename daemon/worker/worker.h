/* SPDX-License-Identifier: MIT */
/*
 * worker.h - a kvarenad stage worker process (prefill or decode).
 *
 * The orchestrator starts each worker as `kvarenad --worker ...` (a fresh
 * exec, so no thread or lock of the orchestrator is inherited) with one
 * end of a SOCK_STREAM socketpair as fd KVD_WORKER_FD. The worker
 * receives HELLO with the arena's data fd, maps the arena, starts its
 * backend, answers READY, then serves STEP and KV_LOAD messages in the
 * order they come, one at a time, until the socket closes (proto.h); the
 * orchestrator may queue the next step while one computes.
 */
#ifndef KVD_WORKER_H
#define KVD_WORKER_H

#define KVD_WORKER_FD 3

struct kvd_worker_args {
	const char *model_path;
	const char *backend;		/* "cpu" or a path to a plugin .so */
	const char *backend_options;
	unsigned int n_threads;
	unsigned int max_batch;
	unsigned int max_ctx;
	unsigned int max_step_tokens;	/* a step's token budget (0: max_batch) */
	const char *tool_open, *tool_close;	/* NULL: <tool_call> </tool_call> */
	const char *chat_template;	/* [model] chat_template: "auto", a family */
};

/* Runs the worker on fd sock; returns the process exit status. */
int kvd_worker_main(int sock, const struct kvd_worker_args *a);

#endif
