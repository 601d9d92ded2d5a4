// SPDX-License-Identifier: MIT
/*
 * park.c - connections parked while their generation has nothing to send
 * (park.h): the suspend/resume protocol with libmicrohttpd, the jobs'
 * notifications, and the parker's thread, which watches the parked
 * sockets for hang-ups (one epoll set) and their deadlines (a scan once a
 * second, over the requests in flight only).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "api_internal.h"
#include "log.h"
#include "park.h"

#define PARK_SCAN_MS 1000
#define PARK_STOP_TAG UINT64_MAX	/* the eventfd's epoll data */

struct parker {
	pthread_mutex_t lock;		/* list, by_fd, next_no */
	struct park *list;		/* attached */
	struct park **by_fd;		/* socket -> its park (epoll events) */
	size_t n_fd;
	uint32_t next_no;
	int ep, stop_fd;
	pthread_t thread;
	int stopping;			/* atomic */
	unsigned long parked;		/* atomic */
};

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void park_wake(void *arg)
{
	struct park *p = arg;

	pthread_mutex_lock(&p->lock);
	if (p->suspended) {
		p->suspended = 0;
		__atomic_sub_fetch(&p->pk->parked, 1, __ATOMIC_RELAXED);
		MHD_resume_connection(p->c);
	} else {
		p->pending = 1;
	}
	pthread_mutex_unlock(&p->lock);
}

int park_sleep(struct park *p, uint64_t deadline_ns)
{
	int r = 1;

	pthread_mutex_lock(&p->lock);
	if (__atomic_load_n(&p->pk->stopping, __ATOMIC_ACQUIRE)) {
		r = -1;
	} else if (p->pending) {
		p->pending = 0;
		r = 0;
	} else {
		__atomic_store_n(&p->deadline_ns, deadline_ns, __ATOMIC_RELAXED);
		p->suspended = 1;
		__atomic_add_fetch(&p->pk->parked, 1, __ATOMIC_RELAXED);
		MHD_suspend_connection(p->c);
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

static void set_notify(struct gen *g, void (*fn)(void *), void *arg)
{
	/* for the jobs a gen submits later (a reply continued past its
	 * think budget) */
	g->notify_fn = fn;
	g->notify_arg = arg;
	for (unsigned i = 0; i < g->n; i++)
		if (g->ch[i].job)
			kvd_job_set_notify(g->ch[i].job, fn, arg);
}

void park_attach(struct park *p, struct parker *pk, struct MHD_Connection *c, int fd,
		 struct gen *g)
{
	struct epoll_event ev = { .events = EPOLLRDHUP | EPOLLONESHOT };

	pthread_mutex_init(&p->lock, NULL);
	p->pk = pk;
	p->c = c;
	p->g = g;
	p->fd = fd;
	pthread_mutex_lock(&pk->lock);
	p->no = ++pk->next_no ? pk->next_no : ++pk->next_no;
	p->next = pk->list;
	if (pk->list)
		pk->list->prev = &p->next;
	pk->list = p;
	p->prev = &pk->list;
	if (fd >= 0 && (size_t)fd >= pk->n_fd) {
		size_t n = (size_t)fd + 64;
		struct park **t = realloc(pk->by_fd, n * sizeof(*t));

		if (t) {
			memset(t + pk->n_fd, 0, (n - pk->n_fd) * sizeof(*t));
			pk->by_fd = t;
			pk->n_fd = n;
		}
	}
	if (fd >= 0 && (size_t)fd < pk->n_fd)
		pk->by_fd[fd] = p;
	pthread_mutex_unlock(&pk->lock);
	ev.data.u64 = (uint64_t)p->no << 32 | (uint32_t)fd;
	/* without it a hang-up is noticed when an event or a deadline wakes
	 * the request (the gen polls its socket then) */
	if (fd >= 0 && epoll_ctl(pk->ep, EPOLL_CTL_ADD, fd, &ev) &&
	    (errno != EEXIST || epoll_ctl(pk->ep, EPOLL_CTL_MOD, fd, &ev)))
		kvd_log(KVD_LOG_WARN, "api", "cannot watch connection %d for hang-ups: %s", fd,
			strerror(errno));
	set_notify(g, park_wake, p);
}

void park_detach(struct park *p)
{
	struct parker *pk = p->pk;

	if (!pk)
		return;
	set_notify(p->g, NULL, NULL);	/* after it, no job calls park_wake */
	pthread_mutex_lock(&pk->lock);
	*p->prev = p->next;
	if (p->next)
		p->next->prev = p->prev;
	if (p->fd >= 0 && (size_t)p->fd < pk->n_fd && pk->by_fd[p->fd] == p)
		pk->by_fd[p->fd] = NULL;
	if (p->suspended)	/* libmicrohttpd closed it parked (shutdown) */
		__atomic_sub_fetch(&pk->parked, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&pk->lock);
	if (p->fd >= 0)
		epoll_ctl(pk->ep, EPOLL_CTL_DEL, p->fd, NULL);	/* closed: gone already */
	pthread_mutex_destroy(&p->lock);
	p->pk = NULL;
}

void park_release_all(struct parker *pk)
{
	__atomic_store_n(&pk->stopping, 1, __ATOMIC_RELEASE);
	pthread_mutex_lock(&pk->lock);
	for (struct park *p = pk->list; p; p = p->next)
		park_wake(p);
	pthread_mutex_unlock(&pk->lock);
}

unsigned long parker_parked(struct parker *pk)
{
	return __atomic_load_n(&pk->parked, __ATOMIC_RELAXED);
}

static void *parker_main(void *arg)
{
	struct parker *pk = arg;
	struct epoll_event evs[64];
	uint64_t last_scan = now_ns();
	int stop = 0;

	while (!stop) {
		int n = epoll_wait(pk->ep, evs, 64, PARK_SCAN_MS);
		uint64_t now = now_ns();

		pthread_mutex_lock(&pk->lock);
		for (int i = 0; i < n; i++) {
			uint64_t u = evs[i].data.u64;
			size_t fd = (uint32_t)u;
			struct park *p;

			if (u == PARK_STOP_TAG) {
				stop = 1;
				continue;
			}
			/* by number: the socket may serve a newer request now */
			p = fd < pk->n_fd ? pk->by_fd[fd] : NULL;
			if (p && p->no == (uint32_t)(u >> 32))
				park_wake(p);
		}
		if (now - last_scan >= (uint64_t)PARK_SCAN_MS * 1000000ull) {
			last_scan = now;
			for (struct park *p = pk->list; p; p = p->next) {
				uint64_t d = __atomic_load_n(&p->deadline_ns, __ATOMIC_RELAXED);

				if (d && now >= d) {
					__atomic_store_n(&p->deadline_ns, 0, __ATOMIC_RELAXED);
					park_wake(p);
				}
			}
		}
		pthread_mutex_unlock(&pk->lock);
	}
	return NULL;
}

struct parker *parker_new(char *err, size_t errlen)
{
	struct parker *pk = calloc(1, sizeof(*pk));
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = PARK_STOP_TAG };

	if (!pk) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&pk->lock, NULL);
	pk->ep = epoll_create1(EPOLL_CLOEXEC);
	pk->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (pk->ep < 0 || pk->stop_fd < 0 ||
	    epoll_ctl(pk->ep, EPOLL_CTL_ADD, pk->stop_fd, &ev) ||
	    pthread_create(&pk->thread, NULL, parker_main, pk)) {
		snprintf(err, errlen, "cannot start the connection parker: %s", strerror(errno));
		if (pk->ep >= 0)
			close(pk->ep);
		if (pk->stop_fd >= 0)
			close(pk->stop_fd);
		pthread_mutex_destroy(&pk->lock);
		free(pk);
		return NULL;
	}
	pthread_setname_np(pk->thread, "kvd-http-park");
	return pk;
}

void parker_free(struct parker *pk)
{
	uint64_t one = 1;

	if (!pk)
		return;
	if (write(pk->stop_fd, &one, sizeof(one)) != sizeof(one))
		kvd_log(KVD_LOG_WARN, "api", "parker: cannot signal its thread: %s",
			strerror(errno));
	pthread_join(pk->thread, NULL);
	close(pk->stop_fd);
	close(pk->ep);
	free(pk->by_fd);
	pthread_mutex_destroy(&pk->lock);
	free(pk);
}
