// SPDX-License-Identifier: GPL-2.0
/*
 * kvactl toolwait's interval arithmetic (tools/kvactl/toolwait.c), without
 * BPF: a plain difference while counts grow, and after a clear of the
 * histograms (counts went down) what accumulated since, never a wrapped
 * negative.
 */
#include <stdio.h>
#include <string.h>

#include "kvarena_toolwait.h"
#include "toolwait.h"

static int fails;

#define CHECK(c)							\
	do {								\
		if (!(c)) {						\
			fprintf(stderr, "test_delta: %s:%d: %s\n",	\
				__FILE__, __LINE__, #c);		\
			fails++;					\
		}							\
	} while (0)

int main(void)
{
	struct kva_toolwait_hist prev, h;

	memset(&prev, 0, sizeof(prev));
	prev.count = 10;
	prev.total_us = 5000;
	prev.max_us = 900;
	prev.slots[3] = 4;
	prev.slots[9] = 6;

	h = prev;			/* grew: 2 more waits in slot 9 */
	h.count = 12;
	h.total_us = 6200;
	h.slots[9] = 8;
	CHECK(kvactl_toolwait_delta(&h, &prev) == 0);
	CHECK(h.count == 2 && h.total_us == 1200 && h.slots[9] == 2 &&
	      h.slots[3] == 0);

	memset(&h, 0, sizeof(h));	/* cleared, then 1 wait in slot 2 */
	h.count = 1;
	h.total_us = 5;
	h.slots[2] = 1;
	CHECK(kvactl_toolwait_delta(&h, &prev) == 1);
	CHECK(h.count == 1 && h.total_us == 5 && h.slots[2] == 1 &&
	      h.slots[9] == 0);

	h = prev;			/* cleared and refilled past count */
	h.count = 11;
	h.total_us = 5100;
	h.slots[3] = 0;
	h.slots[9] = 11;
	CHECK(kvactl_toolwait_delta(&h, &prev) == 1 && h.count == 11);

	if (!fails)
		printf("test_delta: interval deltas survive a clear: ok\n");
	return fails != 0;
}
