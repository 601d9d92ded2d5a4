// SPDX-License-Identifier: MIT
/*
 * netns.c - empty network namespaces made ahead for a root launcher's
 * runs without network. Each such run gets one of its own: whatever it
 * binds (abstract Unix socket names above all) is seen by no other run.
 * Making one costs ~0.5-1 ms and its teardown more (the kernel's
 * cleanup_net): a thread of the launcher's process keeps a small pool
 * filled (unshare(CLONE_NEWNET) in that thread, its /proc/thread-self/ns/net
 * kept open), a spawn only takes a descriptor and its child joins it
 * (setns), and the namespace goes away, off the spawn's path, when the
 * run's last process is gone. An empty pool (a burst of spawns) falls
 * back to clone3(CLONE_NEWNET).
 *
 * The pool belongs to the process: a forked spawner starts its own
 * (kvs_netns_pool_reset() in the child after fork), and a process starts
 * it at its second take only, so a one-run CLI makes no thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "sandbox_internal.h"

#define POOL 16

static struct {
	pthread_mutex_t lock;
	pthread_cond_t need;
	int fds[POOL];
	int n;
	unsigned int takes;
	int running;
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER, .need = PTHREAD_COND_INITIALIZER };

static void *filler(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&pool.lock);
	for (;;) {
		int fd;

		while (pool.n == POOL)
			pthread_cond_wait(&pool.need, &pool.lock);
		pthread_mutex_unlock(&pool.lock);
		/* this thread's namespace only: the others keep theirs */
		fd = unshare(CLONE_NEWNET) ? -1 :
		     open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		pthread_mutex_lock(&pool.lock);
		if (fd < 0) {
			pool.running = 0;	/* spawns make their own */
			break;
		}
		pool.fds[pool.n++] = fd;
	}
	pthread_mutex_unlock(&pool.lock);
	return NULL;
}

int kvs_netns_take(void)
{
	int fd = -EAGAIN;

	pthread_mutex_lock(&pool.lock);
	if (pool.n) {
		fd = pool.fds[--pool.n];
		pthread_cond_signal(&pool.need);
	} else if (!pool.running && ++pool.takes >= 2) {
		pthread_attr_t a;
		pthread_t th;

		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &a, filler, NULL) == 0)
			pool.running = 1;
		pthread_attr_destroy(&a);
	}
	pthread_mutex_unlock(&pool.lock);
	return fd;
}

void kvs_netns_pool_reset(void)
{
	/* after fork(): the thread is not here, its descriptors are closed */
	pthread_mutex_init(&pool.lock, NULL);
	pthread_cond_init(&pool.need, NULL);
	pool.n = 0;
	pool.takes = 0;
	pool.running = 0;
}
