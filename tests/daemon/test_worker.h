/* SPDX-License-Identifier: MIT */
/*
 * test_worker.h - a daemon test binary is also its own stage worker: the
 * orchestrator spawns it as "SELF --worker ROLE --model M ..." (workers.c)
 * and it runs kvd_worker_main() with the arguments it was given.
 */
#ifndef KVD_TEST_WORKER_H
#define KVD_TEST_WORKER_H

#include <stdlib.h>
#include <string.h>

#include "worker.h"

/* argv is a worker's: its exit status in *rc and 1; else 0. */
static inline int test_worker_main(int argc, char **argv, int *rc)
{
	struct kvd_worker_args a = { .backend = "cpu", .n_threads = 1, .max_batch = 16 };

	if (argc < 3 || strcmp(argv[1], "--worker"))
		return 0;
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--model"))
			a.model_path = argv[i + 1];
		else if (!strcmp(argv[i], "--backend"))
			a.backend = argv[i + 1];
		else if (!strcmp(argv[i], "--max-ctx"))
			a.max_ctx = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--max-batch"))
			a.max_batch = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--max-step-tokens"))
			a.max_step_tokens = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--threads"))
			a.n_threads = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--tool-open"))
			a.tool_open = argv[i + 1];
		else if (!strcmp(argv[i], "--tool-close"))
			a.tool_close = argv[i + 1];
	}
	*rc = kvd_worker_main(KVD_WORKER_FD, &a);
	return 1;
}

#endif
