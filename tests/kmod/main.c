// SPDX-License-Identifier: GPL-2.0
/*
 * kvarena in-guest suite runner.  Usage: test_kmod [suite...]
 * Suites: uapi blocks dmabuf lifetime trace uring events netlink kvactl
 * security review35 stress module (default: all, in that order; "module"
 * reloads kvarena.ko, so it runs last).
 */
#include <CUnit/Basic.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

static const struct {
	const char *name;
	void (*add)(void);
} suites[] = {
	{ "uapi", kt_register_uapi },
	{ "blocks", kt_register_blocks },
	{ "dmabuf", kt_register_dmabuf },
	{ "lifetime", kt_register_lifetime },
	{ "trace", kt_register_trace },
	{ "uring", kt_register_uring },
	{ "events", kt_register_events },
	{ "netlink", kt_register_netlink },
	{ "kvactl", kt_register_kvactl },
	{ "security", kt_register_security },
	{ "review35", kt_register_review35 },
	{ "stress", kt_register_stress },
	{ "module", kt_register_module },
};

int main(int argc, char **argv)
{
	unsigned int failures;
	size_t i;
	int j;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	for (i = 0; i < sizeof(suites) / sizeof(suites[0]); i++) {
		int want = argc < 2;

		for (j = 1; j < argc; j++)
			want |= !strcmp(argv[j], suites[i].name);
		if (want)
			suites[i].add();
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	failures = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
	if (CU_get_number_of_suites_failed())
		failures++;
	CU_cleanup_registry();
	return failures ? 1 : 0;
}
