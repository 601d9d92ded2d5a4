/* SPDX-License-Identifier: MIT */
/*
 * subproc.h - the remote tests' handle on kv_subscriber.py: started with
 * pipes on its stdin (closing it ends the subscriber) and stdout (one
 * JSON line per batch), lines read with a deadline. Header-only, for the
 * test programs.
 */
#ifndef KVR_TEST_SUBPROC_H
#define KVR_TEST_SUBPROC_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct subproc {
	pid_t pid;
	int in, out;		/* its stdin (write end), its stdout (read end) */
	char buf[1 << 20];
	size_t len;
};

static inline int subproc_start(struct subproc *s, char *const argv[])
{
	int pin[2], pout[2];

	if (pipe(pin) || pipe(pout))
		return -errno;
	s->pid = fork();
	if (s->pid < 0)
		return -errno;
	if (s->pid == 0) {
		dup2(pin[0], 0);
		dup2(pout[1], 1);
		close(pin[1]);
		close(pout[0]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pin[0]);
	close(pout[1]);
	s->in = pin[1];
	s->out = pout[0];
	s->len = 0;
	return 0;
}

/* The next line (without its newline) into line; 1, or 0 on EOF or when
 * timeout_ms passed. */
static inline int subproc_line(struct subproc *s, char *line, size_t max, int timeout_ms)
{
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		char *nl = memchr(s->buf, '\n', s->len);
		struct pollfd pfd = { s->out, POLLIN, 0 };
		long left;
		ssize_t r;

		if (nl) {
			size_t n = (size_t)(nl - s->buf);

			if (n >= max)
				n = max - 1;
			memcpy(line, s->buf, n);
			line[n] = 0;
			s->len -= (size_t)(nl - s->buf) + 1;
			memmove(s->buf, nl + 1, s->len);
			return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		left = timeout_ms - ((t1.tv_sec - t0.tv_sec) * 1000 +
				     (t1.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0 || s->len == sizeof(s->buf))
			return 0;
		if (poll(&pfd, 1, (int)left) <= 0)
			return 0;
		r = read(s->out, s->buf + s->len, sizeof(s->buf) - s->len);
		if (r <= 0)
			return 0;
		s->len += (size_t)r;
	}
}

/* Ends it (stdin closed, then SIGKILL after 2 s); its exit status. */
static inline int subproc_stop(struct subproc *s)
{
	int st = 0, i;

	close(s->in);
	for (i = 0; i < 200 && waitpid(s->pid, &st, WNOHANG) == 0; i++)
		usleep(10000);
	if (i == 200) {
		kill(s->pid, SIGKILL);
		waitpid(s->pid, &st, 0);
	}
	close(s->out);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif
